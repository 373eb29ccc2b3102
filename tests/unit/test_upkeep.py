"""Long-running upkeep: option values, retention decisions on a real
directory, and the sd_notify protocol on a socket the test owns."""

from __future__ import annotations

import os
import socket
import time

import pytest

from qtools.daemon.sets import retention
from qtools.daemon.clock import Clock
from qtools.daemon.config import parse_age, parse_size
from qtools.daemon.notify import Notifier
from qtools.qformat import (Histogram, Info, ObjectRef, QDir, SetName, TaskInfo, dump_info,
                            hist_lines, read_hist)


def test_sizes_and_ages():
    assert parse_size("2G") == 2 << 30 and parse_size("800m") == 800 << 20
    assert parse_size("4096") == 4096 and parse_size("1.5K") == 1536
    assert parse_age("14d") == 14 * 86400 and parse_age("90m") == 5400
    assert parse_age("30") == 30 and parse_age("1w") == 7 * 86400
    for bad in ("", "lots", "5x", "-1G"):
        with pytest.raises(ValueError):
            parse_size(bad)
    with pytest.raises(ValueError):
        parse_age("soon")


class FakeClock(Clock):
    """Both clocks under the test's control: ``advance`` moves both, ``step``
    only the wall clock, as an administrator or NTP would."""

    def __init__(self, wall: float) -> None:
        self.now_wall, self.now_mono = wall, 1000.0
        super().__init__(lambda: self.now_wall, lambda: self.now_mono)

    def advance(self, seconds: float) -> None:
        self.now_wall += seconds
        self.now_mono += seconds

    def step(self, seconds: float) -> None:  # type: ignore[override]
        self.now_wall += seconds


def _make_set(q: QDir, prog: str, end: float, state: str, copy: str | None,
              lines: int = 200, version: int = 0) -> str:
    name = SetName(prog, 0, 1)
    info = Info(task=TaskInfo(comm=prog, start_time=end - 10, end_time=end, state=state))
    info.histogram = Histogram(name.file("hist", version))
    if copy:
        info.objects = [ObjectRef(prog, file=copy)]
    q.atomic_write(info.histogram.file, hist_lines({0x1000 + 16 * i: i + 1 for i in range(lines)}))
    q.atomic_write(name.file("info", version), dump_info(info).encode())
    return name.file("info", version)


def _round(index: retention.Index, q: QDir, **kw) -> retention.Report:
    kw.setdefault("stale_after", 600)
    kw.setdefault("grace", 0)
    return index.maintain(q, **kw)


def test_retention_removes_oldest_closed_compresses_and_collects(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        q.atomic_write(".old.crc32.00000001", b"x" * 10000)
        q.atomic_write(".kept.crc32.00000002", b"y" * 10000)
        old = _make_set(q, "old", now - 40 * 86400, "closed", ".old.crc32.00000001")
        mid = _make_set(q, "mid", now - 3600, "closed", ".kept.crc32.00000002")
        live = _make_set(q, "live", now, "open", ".kept.crc32.00000002")
        stale = _make_set(q, "stale", now - 86400, "open", None)  # writer killed long ago
        clock = FakeClock(now + 1)  # the copies above are older than a zero grace
        report = _round(retention.Index(clock), q, max_age=30 * 86400, compress=True)
        assert report.removed == [old]
        names = set(q.names())
        assert old not in names and "old-pid1-cpu0.hist#0" not in names
        assert ".old.crc32.00000001" not in names  # nobody refers to it any more
        assert {".kept.crc32.00000002", mid, live, stale} <= names
        for closed in ("mid-pid1-cpu0.hist#0", "stale-pid1-cpu0.hist#0"):
            assert (tmp_path / closed).read_bytes()[:2] == b"\x1f\x8b"
            assert len(list(read_hist(tmp_path / closed))) == 200  # still reads the same
        assert (tmp_path / "live-pid1-cpu0.hist#0").read_bytes()[:2] == b"0x"  # open: untouched


def test_a_fresh_copy_is_kept_through_its_grace_by_the_monotonic_clock(tmp_path):
    with QDir.open(tmp_path) as q:
        clock = FakeClock(time.time())
        index = retention.Index(clock)
        _round(index, q, grace=3600)
        # a copy just made for a set not yet written
        q.atomic_write(".fresh.crc32.00000003", b"z" * 100)
        _round(index, q, grace=3600)
        clock.step(7200)  # a wall clock stepped forward does not age it
        _round(index, q, grace=3600)
        assert ".fresh.crc32.00000003" in q.names()
        clock.advance(3601)
        _round(index, q, grace=3600)
        assert ".fresh.crc32.00000003" not in q.names()


def test_retention_by_size_removes_oldest_first_and_never_open_sets(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        sets = [_make_set(q, f"s{i}", now - 1000 + i, "closed", None, lines=3000)
                for i in range(5)]
        live = _make_set(q, "live", now, "open", None, lines=3000)
        index = retention.Index(FakeClock(now))
        index.refresh(q)
        one = index.sets[sets[0]].size
        report = _round(index, q, max_size=3 * one + 100)
        assert report.removed == sets[:3]
        assert set(q.names()) >= {sets[3], sets[4], live}
        # even a tiny limit never removes an open set
        _round(index, q, max_size=1)
        assert live in q.names() and sets[4] not in q.names()


def test_unreadable_info_stops_copy_collection(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        q.atomic_write(".lib.crc32.00000001", b"x")
        q.atomic_write("bad-cpu0.info#0", b"(q:info '((q:pid . ")
        report = _round(retention.Index(FakeClock(now + 1)), q)
        assert report.collected == [] and ".lib.crc32.00000001" in q.names()


def test_index_parses_an_info_only_when_it_is_new_or_replaced(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        closed = [_make_set(q, f"c{i}", now - 100, "closed", None, lines=5) for i in range(20)]
        live = _make_set(q, "live", now, "open", None, lines=5)
        clock = FakeClock(now + 5)  # files changed this recently are read again once
        index = retention.Index(clock)
        _round(index, q)
        assert index.parses == 21
        for _ in range(3):
            clock.advance(10)
            _round(index, q)
        assert index.parses == 21  # nothing changed: nothing read
        _make_set(q, "live", now + 30, "open", None, lines=6)  # its collector rewrites it
        _make_set(q, "new", now + 30, "open", None, lines=5)
        clock.step(5)  # (the files' own times are real ones)
        _round(index, q)
        assert index.parses == 23
        index.refresh(q)
        assert set(index.sets) == {*closed, live, "new-pid1-cpu0.info#0"}
        assert index.parses == 23


def test_first_pass_over_budget_spreads_over_rounds_and_holds_copies(tmp_path, monkeypatch):
    now = time.time()
    with QDir.open(tmp_path) as q:
        q.atomic_write(".lib.crc32.00000001", b"x")
        for i in range(5):
            _make_set(q, f"c{i}", now - 100, "closed", None, lines=5)
        monkeypatch.setattr(retention, "PARSE_SECONDS", 0.0)  # one .info a round
        clock = FakeClock(now + 1)
        index = retention.Index(clock)
        rounds = 0
        while True:
            report = _round(index, q, max_size=1)
            rounds += 1
            if not index.pending:
                break
            # .info files not read yet may name the copy, and the size is not known
            assert report.collected == [] and report.removed == []
        assert rounds == 5 and index.parses == 5
        assert ".lib.crc32.00000001" in report.collected


def test_data_files_without_their_info_go_after_the_grace(tmp_path):
    with QDir.open(tmp_path) as q:
        clock = FakeClock(time.time())
        index = retention.Index(clock)
        q.atomic_write("app-pid1-cpu0.hist#0", b"0x1 1\n")  # a writer died after its claim
        keep = _make_set(q, "app", time.time(), "open", None, lines=5, version=1)
        _round(index, q, grace=600)
        clock.advance(300)
        assert _round(index, q, grace=600).collected == []
        clock.advance(301)
        assert _round(index, q, grace=600).collected == ["app-pid1-cpu0.hist#0"]
        assert keep in q.names() and "app-pid1-cpu0.hist#1" in q.names()


def test_a_stepped_wall_clock_deletes_nothing(tmp_path):
    """The issue's run: the clock jumped forward and 26 sets were deleted."""
    now = time.time()
    with QDir.open(tmp_path) as q:
        clock = FakeClock(now)
        index = retention.Index(clock)
        _round(index, q, max_age=86400)
        written = []
        for i in range(26):  # this run's sets, closed and open
            written.append(_make_set(q, f"s{i}", now, "closed" if i % 2 else "open", None,
                                     lines=5))
        clock.advance(60)
        _round(index, q, max_age=86400)
        clock.step(30 * 86400)  # a month forward
        clock.advance(60)
        report = _round(index, q, stale_after=600, max_age=86400, compress=True)
        assert report.removed == [] and set(written) <= set(q.names())
        # the open ones are still open: nothing compressed them
        assert all((tmp_path / f"s{i}-pid1-cpu0.hist#0").read_bytes()[:2] == b"0x"
                   for i in range(0, 26, 2))
        # and in real time they do age
        clock.advance(86401)
        assert len(_round(index, q, max_age=86400).removed) == 26


def test_an_earlier_runs_set_from_the_future_is_kept(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        future = _make_set(q, "future", now + 365 * 86400, "closed", None, lines=5)
        past = _make_set(q, "past", now - 30 * 86400, "closed", None, lines=5)
        clock = FakeClock(now)
        index = retention.Index(clock)
        assert _round(index, q, max_age=14 * 86400).removed == [past]
        clock.advance(13 * 86400)
        assert _round(index, q, max_age=14 * 86400).removed == []
        assert future in q.names()  # it counts as new when first seen, and ages from there
        clock.advance(86400 + 1)
        assert _round(index, q, max_age=14 * 86400).removed == [future]


@pytest.fixture
def listener(tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_notify_sends_datagrams(listener):
    sock, path = listener
    n = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "4000000"})
    assert n.enabled and n.watchdog_interval == 2.0
    assert n.ready("collecting")
    msg = sock.recv(4096).decode().split("\n")
    assert "READY=1" in msg and "STATUS=collecting" in msg and f"MAINPID={os.getpid()}" in msg
    n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    n.stopping("bye")
    assert sock.recv(4096) == b"STOPPING=1\nSTATUS=bye"


def test_notify_abstract_socket_and_absence():
    name = f"qtools-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).status("hi")
        assert sock.recv(100) == b"STATUS=hi"
    finally:
        sock.close()
    quiet = Notifier({})
    assert not quiet.enabled and not quiet.ready("x") and quiet.watchdog_interval is None
    assert Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000",
                     "WATCHDOG_PID": "1"}).watchdog_interval is None  # not ours
