"""What a user can make q-syscollect, running as root, put on the disk:
sparse binaries keep their holes, a perf map rewritten all the time is not
copied again and again, and a --max-size run's copies never pass it, not
even between two rounds of upkeep. The directory is measured as du does
(st_blocks), many times a second while the run goes on. The runs profile
the attacker's command alone (-i): system-wide, the copies of whatever
else the machine runs meanwhile would share the room."""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from tests.conftest import q_syscollect_popen
from tests.integration.test_collect import infos
from tests.integration.test_hostile_copies import AS_NOBODY, MiB, _program, perf_maps, \
    shared  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to act as another user")

MAX_SIZE = 100 * MiB


class DiskWatch:
    """Samples, until stopped, the bytes a `.q` holds on the disk: its copies
    and temporary files (all names that begin with a dot), and its set
    files (the slice being written). A file with another name elsewhere (a
    hard link to a root-owned library) costs the disk nothing more."""

    def __init__(self, q: Path) -> None:
        self.q = q
        self.samples: list[tuple[int, int]] = []  # (copies, sets)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _measure(self) -> tuple[int, int]:
        copies = sets = 0
        try:
            names = os.listdir(self.q)
        except FileNotFoundError:
            return 0, 0
        for name in names:
            try:
                st = os.lstat(self.q / name)
            except FileNotFoundError:
                continue
            held = st.st_blocks * 512 if st.st_nlink == 1 else 0
            if name.startswith("."):
                copies += held
            else:
                sets += held
        return copies, sets

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append(self._measure())

    def stop(self) -> int:
        """The most the copies held at any sample, the run's end included
        (the set files come on top: the slice being written)."""
        self._stop.set()
        self._thread.join()
        self.samples.append(self._measure())
        return max(c for c, _s in self.samples)


def _attack(q: Path, command: list[str]) -> tuple[str, str, int]:
    """Run ``command`` as nobody under q-syscollect --max-size 100M; its
    output, q-syscollect's messages, and the most `.q`'s copies held."""
    watch = DiskWatch(q)
    collector = q_syscollect_popen("-d", str(q), "-i", "--checkpoint", "2",
                                   "--max-size", "100M", "--min-samples", "1", "--",
                                   *AS_NOBODY, *command)
    try:
        out, err = collector.communicate(timeout=120)
    finally:
        collector.kill()
        peak = watch.stop()
    assert collector.returncode == 0, err
    return out, err, peak


def _copies_of(q: Path, prefix: str) -> list[Path]:
    return [q / n for n in os.listdir(q) if n.startswith(f".{prefix}") and ".crc32." in n]


def test_sparse_binaries_of_a_user_are_copied_with_their_holes(perf, build, shared, tmp_path):
    """Eight copies of a small program, each made 480 MiB long by a hole (160 KB
    of the user's disk): byte copies took 888 MB of .q during a --max-size
    100M run before the holes were kept."""
    exes = []
    for i in range(8):
        exe = _program(build, shared, f"holey{i}")
        os.truncate(exe, 480 * MiB + i)  # its own content, so a copy each
        os.chown(exe, 65534, 65534)  # the user's: copied, not linked
        exes.append(exe)
    q = tmp_path / "q"
    _out, err, peak = _attack(q, ["sh", "-c", " & ".join(f"{e} 4" for e in exes) + "; wait"])
    assert peak <= MAX_SIZE, peak
    copies = [c for e in exes for c in _copies_of(q, e.name)]
    assert copies, err  # sampled and copied, their symbols there for q-view
    for copy in copies:
        st = copy.stat()
        assert st.st_size >= 480 * MiB and st.st_blocks * 512 < MiB, (copy, st)
    named = {o.file for _n, i in infos(q).items() for o in i.objects if o.file}
    assert {c.name for c in copies} <= named


PERF_MAP_WRITER = """
import os, time
print(os.getpid(), flush=True)
with open(f"/tmp/perf-{os.getpid()}.map", "wb") as f:
    f.write(b"7f0000001000 10 jitted\\n")
    f.truncate(60 << 20)
    end, i = time.monotonic() + 9, 0
    while time.monotonic() < end:
        f.seek(4096 * (1 + i * 7919 % 15000))
        f.write(b"x")  # a byte a second: a new content, a new copy at each checkpoint
        f.flush()
        i += 1
        spin = time.monotonic() + 1
        while time.monotonic() < spin:
            pass
"""


def test_a_sparse_perf_map_rewritten_every_second_is_copied_once(perf, tmp_path, perf_maps):
    """A 60 MiB sparse map with a byte written every second: with --checkpoint 2
    each collector copied it at every checkpoint (13 copies, 847 MB in a
    26-second run)."""
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is not installed")
    q = tmp_path / "q"
    out, err, peak = _attack(q, [python, "-c", PERF_MAP_WRITER])
    pid = int(out.split()[0])
    perf_maps.append(pid)
    assert peak <= MAX_SIZE, peak
    copies = _copies_of(q, f"perf-{pid}.map")
    sets = [i for _n, i in infos(q).items() if i.task.pid == pid and i.perf_maps]
    assert sets and copies, err
    # one a collector (each met it first on its own), not one a checkpoint
    assert len(copies) <= len(os.sched_getaffinity(0)), copies
    assert all(c.stat().st_blocks * 512 < MiB for c in copies)  # its holes kept


def test_copies_past_max_size_are_refused_during_the_run(perf, build, shared, tmp_path):
    """Six programs of 24 MiB each (random bytes after the code), 144 MiB of
    the user's disk: each copy fit at the moment it was made and upkeep came
    later, so `.q` passed --max-size between two rounds."""
    exes = []
    for i in range(6):
        exe = _program(build, shared, f"dense{i}")
        with open(exe, "ab") as f:
            f.write(os.urandom(24 * MiB))
        os.chown(exe, 65534, 65534)
        exes.append(exe)
    q = tmp_path / "q"
    _out, err, peak = _attack(q, ["sh", "-c", " & ".join(f"{e} 4" for e in exes) + "; wait"])
    assert peak <= MAX_SIZE, peak
    refused = re.findall(r"not copying (\S+) \(pid \d+\): it would take \S+ past --max-size "
                         r"100M", err)
    assert len(refused) == 1, err  # said once for the run, not once a copy or a collector
    copied = [e for e in exes if _copies_of(q, e.name)]
    assert copied and len(copied) < len(exes), err  # what fit was copied, the rest was not
