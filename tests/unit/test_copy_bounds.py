"""How often a changing perf map is copied again, and how long a copy no
set names is kept (daemon.sets.perfmaps, daemon.config, retention)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qtools.daemon.config import Config
from qtools.daemon.machine.tasks import Process
from qtools.daemon.sets import perfmaps, retention
from qtools.daemon.sets.objects import ObjectCopier
from qtools.daemon.sets.perfmaps import MIN_GROWTH, RECOPY_SECONDS, MapCopy, recopy_due
from qtools.qformat import QDir, Stored

from test_upkeep import FakeClock, _make_set, _round

KiB = 1 << 10


def _last(size: int, at: float = 100.0, truncated: bool = False) -> MapCopy:
    return MapCopy(Stored(".perf-1.map.crc32.00000001", truncated), size, at)


def test_a_map_is_copied_again_only_when_it_grew_by_a_real_amount_and_not_too_soon():
    later = 100.0 + RECOPY_SECONDS
    assert recopy_due(None, 10, 0.0)  # the first copy
    big = 4096 * KiB
    assert not recopy_due(_last(big), big, later)  # rewritten in place: never again
    assert not recopy_due(_last(big), big + big // 4 - 1, later)  # less than a quarter
    assert recopy_due(_last(big), big + big // 4, later)
    assert not recopy_due(_last(big), 2 * big, later - 1)  # not within the interval
    assert not recopy_due(_last(100), 100 + MIN_GROWTH - 1, later)  # a small map: 16 KiB
    assert recopy_due(_last(100), 100 + MIN_GROWTH, later)
    assert not recopy_due(_last(big, truncated=True), 2 * big, later)  # cut at its limit


def test_a_set_written_for_the_last_time_takes_any_growth_once():
    assert recopy_due(_last(1000), 1001, 100.5, closing=True)
    assert not recopy_due(_last(1000), 1000, 100.5, closing=True)  # nothing new


@pytest.fixture
def own_map():
    """A perf map of a pid nobody runs now, owned by this user."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    path = Path(f"/tmp/perf-{gone.pid}.map")
    path.write_bytes(b"7f0000001000 10 first\n")
    yield gone.pid, path
    path.unlink(missing_ok=True)


def _map_copies(q: Path, pid: int) -> list[str]:
    return sorted(n for n in os.listdir(q) if n.startswith(f".perf-{pid}.map."))


def test_a_changing_map_is_copied_at_its_growth_not_at_each_change(tmp_path, own_map,
                                                                     monkeypatch):
    pid, path = own_map
    proc = Process(pid, "jit", ended=True, uid=os.geteuid())
    with QDir.open(tmp_path / "q", create=True) as q:
        copier = ObjectCopier(q)
        first = copier.perf_map(proc)
        with open(path, "r+b") as f:  # its owner rewrites a byte, at every checkpoint
            for i in range(5):
                f.seek(i)
                f.write(b"8")
                f.flush()
                assert copier.perf_map(proc) == first
        with open(path, "ab") as f:
            f.write(b"7f0000002000 10 grown\n" * 1000)  # 22 KB: more than a real amount
        assert copier.perf_map(proc) == first  # but within the interval
        monkeypatch.setattr(perfmaps, "RECOPY_SECONDS", 0.0)
        grown = copier.perf_map(proc)
        assert grown != first and b"grown" in (tmp_path / "q" / grown.name).read_bytes()
        with open(path, "ab") as f:
            f.write(b"7f0000003000 10 last\n")
        assert copier.perf_map(proc) == grown  # a line is not a real amount
        last = copier.perf_map(proc, closing=True)  # but the set's last write takes it
        assert last != grown and (tmp_path / "q" / last.name).read_bytes().endswith(b"last\n")
        assert copier.perf_map(proc, closing=True) == last
    assert len(_map_copies(tmp_path / "q", pid)) == 3


def test_the_grace_of_a_copy_no_set_names_does_not_grow_with_rotate():
    hourly = Config("q", [0], checkpoint=2, rotate=3600)
    daily = Config("q", [0], checkpoint=2, rotate=86400)
    assert hourly.copy_grace == daily.copy_grace == Config("q", [0], checkpoint=2).copy_grace
    assert hourly.copy_grace == 3 * 2 + 60 < hourly.stale_after == 3 * 2 + 3600 + 60


def test_an_older_map_copy_goes_after_the_copy_grace_not_the_open_sets(tmp_path):
    cfg = Config("q", [0], checkpoint=2, rotate=3600)
    now = time.time()
    with QDir.open(tmp_path) as q:
        clock = FakeClock(now)
        index = retention.Index(clock)
        q.atomic_write(".perf-7.map.crc32.00000001", b"7f0000001000 10 old\n")
        live = _make_set(q, "jit", now, "open", ".perf-7.map.crc32.00000002")
        q.atomic_write(".perf-7.map.crc32.00000002", b"7f0000001000 10 new\n")
        q.atomic_write("jit-pid1-cpu0.hist#5", b"0x1 1\n")  # a writer at its claim

        def upkeep() -> retention.Report:
            return _round(index, q, stale_after=cfg.stale_after, grace=cfg.stale_after,
                          copy_grace=cfg.copy_grace)
        upkeep()
        clock.advance(cfg.copy_grace + 1)
        assert upkeep().collected == [".perf-7.map.crc32.00000001"]  # 67 s, not 3,667 s
        names = q.names()
        assert live in names and ".perf-7.map.crc32.00000002" in names
        assert "jit-pid1-cpu0.hist#5" in names  # a data file waits for an open set's time
