"""Object copies: size limits, slices of time, who may keep a link (qformat.copies)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from qtools.daemon.machine import synthesize
from qtools.daemon.machine.host import HostProcess, StaticHost
from qtools.daemon.sets.objects import CopyBudget
from qtools.daemon.machine.procfs import MapsLine
from qtools.daemon.decode.records import Comm, SampleId, Task
from qtools.daemon.machine.tasks import TaskTable
from qtools.qformat import QDir, Stored, TooLarge
from qtools.qformat.copies import may_link, root_only
from qtools.qformat.writers import alive, proc_stat

MiB = 1 << 20
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files away")


def _temps(q: Path) -> list[str]:
    return [n for n in os.listdir(q) if n.startswith(".tmp-")]


def _start(q: QDir, path: Path, **kw):
    fd = os.open(path, os.O_RDONLY)
    try:
        return q.start_copy(fd, path.name, **kw)
    finally:
        os.close(fd)


def test_a_huge_sparse_file_is_copied_up_to_the_limit_and_marked_truncated(tmp_path):
    src = tmp_path / "perf-1.map"
    with open(src, "wb") as f:
        f.write(b"7f0000001000 10 first\n")
        f.truncate(8 << 40)  # 8 TiB, almost all of it a hole
    with QDir.open(tmp_path / "q", create=True) as q:
        job = _start(q, src, limit=2 * MiB, truncate=True, link=False)
        done = job.advance(None)
    assert done == Stored(done.name, truncated=True)
    copy = (tmp_path / "q" / done.name).read_bytes()
    assert copy == b"7f0000001000 10 first\n"  # whole lines only: the rest is a hole of zeros
    assert done.name.endswith(f"{zlib.crc32(copy):08x}")


def test_a_truncated_copy_keeps_whole_lines(tmp_path):
    src = tmp_path / "perf-2.map"
    line = b"7f0000001000 10 %07d\n"
    src.write_bytes(b"".join(line % i for i in range(200_000)))  # 4.6 MB
    with QDir.open(tmp_path / "q", create=True) as q:
        job = _start(q, src, limit=MiB + 5, truncate=True, link=False)
        done = None
        while done is None:
            done = job.advance(time.monotonic() - 1)  # in slices: line ends across chunks
    copy = (tmp_path / "q" / done.name).read_bytes()
    assert done.truncated and copy.endswith(b"\n") and MiB - 24 < len(copy) <= MiB + 5
    assert src.read_bytes().startswith(copy) and done.name.endswith(f"{zlib.crc32(copy):08x}")


def test_an_object_over_the_limit_is_refused_and_leaves_nothing(tmp_path):
    src = tmp_path / "libbig.so"
    src.write_bytes(os.urandom(3 * MiB))
    with QDir.open(tmp_path / "q", create=True) as q:
        with pytest.raises(TooLarge, match="over the limit"):
            _start(q, src, limit=MiB)
    assert os.listdir(tmp_path / "q") == []


def test_a_proc_file_over_the_limit_is_found_out_while_reading(tmp_path):
    """/proc files say size 0: the limit is found by reading."""
    with QDir.open(tmp_path / "q", create=True) as q:
        fd = os.open("/proc/self/maps", os.O_RDONLY)
        try:
            job = q.start_copy(fd, "maps", limit=64)
        finally:
            os.close(fd)
        with pytest.raises(TooLarge):
            job.advance(None)
    assert os.listdir(tmp_path / "q") == []


def test_a_copy_goes_on_where_its_deadline_stopped_it(tmp_path):
    src = tmp_path / "liblong.so"
    data = os.urandom(5 * MiB + 123)
    src.write_bytes(data)
    src.chmod(0o664)  # group-writable: copied byte by byte, never linked
    with QDir.open(tmp_path / "q", create=True) as q:
        job = _start(q, src)
        steps = 0
        done = None
        while done is None:
            done = job.advance(time.monotonic() - 1)  # past: one chunk per call
            steps += 1
        assert steps == 7  # six chunks, then the end found
        assert _start(q, src) == done  # the same content again: at once
    assert (tmp_path / "q" / done.name).read_bytes() == data
    assert not done.truncated and _temps(tmp_path / "q") == []


def test_an_abandoned_copy_leaves_no_temporary(tmp_path):
    src = tmp_path / "lib.so"
    src.write_bytes(os.urandom(3 * MiB))
    src.chmod(0o666)
    with QDir.open(tmp_path / "q", create=True) as q:
        job = _start(q, src)
        assert job.advance(time.monotonic() - 1) is None
        assert _temps(tmp_path / "q")
        job.close()
    assert os.listdir(tmp_path / "q") == []


# ---------------------------------------------------------------- links

def _link_or_copy(tmp_path: Path, src: Path) -> os.stat_result:
    with QDir.open(tmp_path / "q", create=True) as q:
        fd = os.open(src, os.O_RDONLY)
        try:
            name = q.store_object(fd, src.name)
        finally:
            os.close(fd)
    return (tmp_path / "q" / name).stat()


def test_a_file_only_root_can_write_is_linked(tmp_path):
    src = tmp_path / "libroot.so"
    src.write_bytes(b"\x7fELF root's")
    src.chmod(0o755)
    copy = _link_or_copy(tmp_path, src)
    assert copy.st_ino == src.stat().st_ino or copy.st_nlink == 1  # or a reflink


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_a_file_others_can_write_is_copied_not_linked(tmp_path, mode):
    src = tmp_path / "libshared.so"
    src.write_bytes(b"\x7fELF writable")
    src.chmod(mode)
    copy = _link_or_copy(tmp_path, src)
    assert copy.st_ino != src.stat().st_ino and copy.st_nlink == 1
    assert copy.st_uid == os.geteuid() and not copy.st_mode & 0o222


@as_root
def test_a_file_a_user_owns_is_copied_not_linked(tmp_path):
    src = tmp_path / "libuser.so"
    src.write_bytes(b"\x7fELF user's")
    src.chmod(0o755)
    os.chown(src, 65534, 65534)
    fd = os.open(src, os.O_RDONLY)
    try:
        assert not may_link(fd, os.fstat(fd))
    finally:
        os.close(fd)
    copy = _link_or_copy(tmp_path, src)
    assert copy.st_ino != src.stat().st_ino and copy.st_nlink == 1 and copy.st_uid == 0


# ---------------------------------------------------------------- symlinks

@as_root
def test_root_only_walks_the_path_it_checks(tmp_path):
    os.chmod(tmp_path, 0o755)
    top = tmp_path / "usr"
    (top / "lib").mkdir(parents=True)
    lib = top / "lib" / "libc.so"
    lib.write_bytes(b"\x7fELF")
    lib.chmod(0o755)
    (tmp_path / "lib").symlink_to("usr/lib")  # merged /usr
    target = lib.stat()
    assert root_only(str(lib), target)
    assert root_only(str(tmp_path / "lib" / "libc.so"), target)
    assert not root_only(str(top / "lib" / "other.so"), target)
    os.chown(tmp_path / "lib", 65534, 65534, follow_symlinks=False)  # a user's symlink
    assert not root_only(str(tmp_path / "lib" / "libc.so"), target)
    (top / "lib").chmod(0o777)  # anyone may swap the file
    assert not root_only(str(lib), target)
    (top / "lib").chmod(0o1777)  # sticky: only root may replace root's entries
    assert root_only(str(lib), target)
    os.chown(top, 65534, 65534)  # a user's directory on the way
    assert not root_only(str(lib), target)


@as_root
def test_symlink_is_refused_where_a_user_can_swap_the_path(tmp_path):
    os.chmod(tmp_path, 0o755)
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    src = home / "prog"
    src.write_bytes(b"\x7fELF prog")
    src.chmod(0o755)
    with QDir.open(tmp_path / "q", create=True) as q:
        fd = os.open(src, os.O_RDONLY)
        try:
            name = q.store_object(fd, "prog", symlink_to=str(src))
        finally:
            os.close(fd)
    assert not (tmp_path / "q" / name).is_symlink()
    assert (tmp_path / "q" / name).read_bytes() == b"\x7fELF prog"


# ---------------------------------------------------------------- temporaries

def test_temporaries_of_dead_zombie_or_reused_writers_are_removed(tmp_path):
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    while proc_stat(zombie.pid)[0] != "Z":
        time.sleep(0.01)
    me = os.getpid()
    started = proc_stat(me)[1]
    zombie_start = proc_stat(zombie.pid)[1]
    names = {
        f".tmp-{me}.{started}-live": True,
        f".tmp-{me}.{started + 1}-reused": False,  # our pid, another process's start
        f".tmp-{zombie.pid}.{zombie_start}-zombie": False,
        ".tmp-999999999.5-gone": False,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    try:
        assert not alive(zombie.pid) and alive(me, started) and not alive(me, started + 1)
        with QDir.open(tmp_path) as q:
            assert q.remove_stale_temps() == 3
            assert q.temp_name().startswith(f".tmp-{me}.{started}-")
    finally:
        zombie.wait()
    assert sorted(os.listdir(tmp_path)) == [n for n, kept in names.items() if kept]


# ---------------------------------------------------------------- budget and owners

def test_the_copy_budget_allows_a_share_and_a_burst():
    now = [0.0]
    budget = CopyBudget(share=0.2, burst=1.0, clock=lambda: now[0])
    assert budget.deadline(0.1) == pytest.approx(0.1)
    budget.spend(1.0)
    assert budget.deadline(0.1) is None  # spent: nothing until it flows back
    now[0] = 2.5
    assert budget.deadline(0.1) == pytest.approx(2.6)
    budget.spend(0.5)
    now[0] = 100.0
    assert budget.deadline(5.0) == pytest.approx(101.0)  # never more than the burst


def _sid(time_ns: int) -> SampleId:
    return SampleId(pid=0, tid=0, time=time_ns)


def test_task_owners_are_recorded_at_seed_fork_and_exec_and_kept():
    owners = {10: 1000}
    table = TaskTable(owner=owners.get)
    maps = (MapsLine(0x1000, 0x2000, "r-xp", 0, 8, 1, 5, "/bin/sh", False),)
    for rec in synthesize.process(StaticHost({10: HostProcess("sh", maps)}), 10, 1):
        table.apply(rec)  # seeded from the host: its owner asked then
    assert table.get(10).uid == 1000
    table.apply(Task(pid=20, ppid=10, tid=20, ptid=10, time=5, fork=True))
    assert table.get(20).uid == 1000  # a fork is its parent's
    owners[20] = 0
    table.apply(Comm(pid=20, tid=20, comm="su", exec=True, sid=_sid(6)))
    child = table.get(20)
    assert child.uid == 0  # a setuid program: read again at exec
    del owners[20]
    table.apply(Task(pid=20, ppid=10, tid=20, ptid=10, time=7, fork=False))
    assert child.ended and child.uid == 0  # kept after it ends
    table.apply(Comm(pid=30, tid=30, comm="gone", exec=True, sid=_sid(8)))
    assert table.get(30).uid is None  # gone before anyone saw who ran it


def test_a_perf_map_is_taken_only_from_the_recorded_owner(tmp_path, capsys):
    from qtools.daemon.sets.objects import ObjectCopier
    from qtools.daemon.machine.tasks import Process
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid nobody runs now (until it is reused)
    path = Path(f"/tmp/perf-{gone.pid}.map")
    path.write_text("7f0000001000 10 jitted\n")
    try:
        with QDir.open(tmp_path / "q", create=True) as q:
            copier = ObjectCopier(q)
            unknown = Process(gone.pid, "gone", ended=True)
            assert copier.perf_map(unknown) is None and copier.perf_map(unknown) is None
            other = Process(gone.pid, "gone", ended=True, uid=os.geteuid() + 1)
            assert copier.perf_map(other) is None
            mine = Process(gone.pid, "gone", ended=True, uid=os.geteuid())
            stored = copier.perf_map(mine)
        assert stored and not stored.truncated
        assert (tmp_path / "q" / stored.name).read_text() == "7f0000001000 10 jitted\n"
    finally:
        path.unlink()
    err = capsys.readouterr().err
    assert err.count(f"not using {path}: the owner of pid {gone.pid} was never seen") == 1
    assert f"not using {path}: owned by uid {os.geteuid()}, not by uid {os.geteuid() + 1}" in err
