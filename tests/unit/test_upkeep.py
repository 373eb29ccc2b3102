"""Long-running upkeep: option values, retention decisions on a real
directory, and the sd_notify protocol on a socket the test owns."""

from __future__ import annotations

import os
import socket
import time

import pytest

from qtools.daemon import retention
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


def _make_set(q: QDir, prog: str, end: float, state: str, copy: str | None,
              lines: int = 200) -> str:
    name = SetName(prog, 0, 1)
    info = Info(task=TaskInfo(comm=prog, start_time=end - 10, end_time=end, state=state))
    info.histogram = Histogram(name.file("hist", 0))
    if copy:
        info.objects = [ObjectRef(prog, file=copy)]
    q.atomic_write(info.histogram.file, hist_lines({0x1000 + 16 * i: i + 1 for i in range(lines)}))
    q.atomic_write(name.file("info", 0), dump_info(info).encode())
    return name.file("info", 0)


def test_retention_removes_oldest_closed_compresses_and_collects(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        q.atomic_write(".old.crc32.00000001", b"x" * 10000)
        q.atomic_write(".kept.crc32.00000002", b"y" * 10000)
        old = _make_set(q, "old", now - 40 * 86400, "closed", ".old.crc32.00000001")
        mid = _make_set(q, "mid", now - 3600, "closed", ".kept.crc32.00000002")
        live = _make_set(q, "live", now, "open", ".kept.crc32.00000002")
        stale = _make_set(q, "stale", now - 86400, "open", None)  # writer killed long ago
        now = time.time() + 1  # the copies above are older than a zero grace
        report = retention.maintain(q, now, stale_after=600, grace=0, max_age=30 * 86400,
                                    compress=True)
        assert report.removed == [old]
        names = set(q.names())
        assert old not in names and "old-pid1-cpu0.hist#0" not in names
        assert ".old.crc32.00000001" not in names  # nobody refers to it any more
        assert {".kept.crc32.00000002", mid, live, stale} <= names
        for closed in ("mid-pid1-cpu0.hist#0", "stale-pid1-cpu0.hist#0"):
            assert (tmp_path / closed).read_bytes()[:2] == b"\x1f\x8b"
            assert len(list(read_hist(tmp_path / closed))) == 200  # still reads the same
        assert (tmp_path / "live-pid1-cpu0.hist#0").read_bytes()[:2] == b"0x"  # open: untouched
        # a copy just made for a set not yet written is kept through its grace period
        q.atomic_write(".fresh.crc32.00000003", b"z" * 100)
        retention.maintain(q, time.time(), stale_after=600, grace=3600)
        assert ".fresh.crc32.00000003" in q.names()
        retention.maintain(q, time.time() + 3601, stale_after=600, grace=3600)
        assert ".fresh.crc32.00000003" not in q.names()


def test_retention_by_size_removes_oldest_first_and_never_open_sets(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        sets = [_make_set(q, f"s{i}", now - 1000 + i, "closed", None, lines=3000)
                for i in range(5)]
        live = _make_set(q, "live", now, "open", None, lines=3000)
        one = retention.scan(q, now, 600).sets[0].size
        report = retention.maintain(q, now, stale_after=600, grace=0, max_size=3 * one + 100)
        assert report.removed == sets[:3]
        assert set(q.names()) >= {sets[3], sets[4], live}
        # even a tiny limit never removes an open set
        retention.maintain(q, now, stale_after=600, grace=0, max_size=1)
        assert live in q.names() and sets[4] not in q.names()


def test_unreadable_info_stops_copy_collection(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        q.atomic_write(".lib.crc32.00000001", b"x")
        q.atomic_write("bad-cpu0.info#0", b"(q:info '((q:pid . ")
        report = retention.maintain(q, now + 1, stale_after=600, grace=0)
        assert report.collected == [] and ".lib.crc32.00000001" in q.names()


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
