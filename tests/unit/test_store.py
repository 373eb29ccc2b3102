"""The `.q` directory: atomic files, versions, safety rules, object copies."""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import time
import zlib

import pytest

from qtools.qformat import (QDir, QFormatError, SetName, UnsafeDirectory, parse_copy_name,
                            parse_info, resolve_info)

SET = SetName("app", 0, 42)


def test_atomic_write_replaces_whole_file(tmp_path):
    with QDir.open(tmp_path) as q:
        q.atomic_write("a-pid1-cpu0.hist#0", b"0x1 1\n")
        q.atomic_write("a-pid1-cpu0.hist#0", [b"0x1 2\n", b"0x2 3\n"])
    assert (tmp_path / "a-pid1-cpu0.hist#0").read_bytes() == b"0x1 2\n0x2 3\n"
    assert sorted(os.listdir(tmp_path)) == ["a-pid1-cpu0.hist#0"]


def test_atomic_write_refuses_names_that_leave_the_directory(tmp_path):
    with QDir.open(tmp_path) as q:
        for bad in ("../x", "/etc/passwd", "a/b", ".."):
            with pytest.raises(QFormatError):
                q.atomic_write(bad, b"x")
    assert os.listdir(tmp_path) == []


def test_atomic_write_does_not_follow_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    q_dir = tmp_path / "q"
    q_dir.mkdir()
    (q_dir / "a-pid1-cpu0.hist#0").symlink_to(victim)
    with QDir.open(q_dir) as q:
        q.atomic_write("a-pid1-cpu0.hist#0", b"0x1 1\n")
    assert victim.read_text() == "keep me"
    assert not (q_dir / "a-pid1-cpu0.hist#0").is_symlink()


def _render(n: int) -> bytes:
    return (f"(q:info '((q:pid . {os.getpid()}) (q:samples . {n})))\n").encode()


def test_claim_version_counts_up(tmp_path):
    with QDir.open(tmp_path) as q:
        assert [q.claim_version(SET, _render) for _ in range(3)] == [0, 1, 2]
        assert q.latest_version(SET) == 2
        assert q.versions(SET) == [0, 1, 2]
        assert q.latest_version(SetName("other", 0, 1)) is None
    info = parse_info((tmp_path / "app-pid42-cpu0.info#1").read_bytes())
    assert info.task.samples == 1
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp")]


def _claimer(path: str, count: int, out: "multiprocessing.Queue[list[int]]") -> None:
    with QDir.open(path) as q:
        out.put([q.claim_version(SET, _render) for _ in range(count)])


def test_concurrent_writers_never_share_a_version(tmp_path):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(str(tmp_path), 25, out)) for _ in range(6)]
    for p in procs:
        p.start()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    claimed = [n for chunk in got for n in chunk]
    assert sorted(claimed) == list(range(150))
    for n in claimed:
        info = parse_info((tmp_path / f"app-pid42-cpu0.info#{n}").read_bytes())
        assert info.task.samples == n  # each file is the one its claimer wrote, complete


WRITER = """
import sys
from qtools.qformat import QDir
q = QDir.open(sys.argv[1])
a = b"0x1 1\\n" * 400000
b = b"0x2 2\\n" * 400000
print("ready", flush=True)
while True:
    q.atomic_write("w-pid1-cpu0.hist#0", a)
    q.atomic_write("w-pid1-cpu0.hist#0", b)
"""


def test_writer_killed_mid_write_leaves_old_or_new(tmp_path):
    good = {b"0x1 1\n" * 400000, b"0x2 2\n" * 400000}
    for delay in (0.05, 0.13, 0.21, 0.37, 0.5):
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)],
                                 stdout=subprocess.PIPE)
        assert child.stdout.readline() == b"ready\n"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        target = tmp_path / "w-pid1-cpu0.hist#0"
        if target.exists():
            assert target.read_bytes() in good
    with QDir.open(tmp_path) as q:
        q.remove_stale_temps()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp")] == []


def test_stale_temps_of_live_writers_are_kept(tmp_path):
    (tmp_path / ".tmp-999999999-dead").write_bytes(b"x")
    (tmp_path / f".tmp-{os.getpid()}-live").write_bytes(b"x")
    with QDir.open(tmp_path) as q:
        assert q.remove_stale_temps() == 1
    assert os.listdir(tmp_path) == [f".tmp-{os.getpid()}-live"]


# ---------------------------------------------------------------- safety rules

def test_symlinked_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafeDirectory, match="symlink"):
        QDir.open(tmp_path / "link", create=True)


def test_not_a_directory(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(QFormatError, match="not a directory"):
        QDir.open(tmp_path / "f")


def test_create_makes_the_directory(tmp_path):
    with QDir.open(tmp_path / "new", create=True, secure=True) as q:
        q.atomic_write("x-pid1-cpu0.hist#0", b"")
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) & 0o022 == 0


def test_secure_refuses_group_writable(tmp_path):
    d = tmp_path / "q"
    d.mkdir()
    d.chmod(0o777)
    with pytest.raises(UnsafeDirectory, match="writable by group or others"):
        QDir.open(d, secure=True)
    QDir.open(d).close()  # a reader does not care


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory away")
def test_secure_refuses_directory_of_another_user(tmp_path):
    d = tmp_path / "q"
    d.mkdir(mode=0o755)
    os.chown(d, 65534, 65534)
    with pytest.raises(UnsafeDirectory, match="owned by uid 65534"):
        QDir.open(d, secure=True)


# ---------------------------------------------------------------- object copies

def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _store(q: QDir, path, basename, **kw) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return q.store_object(fd, basename, **kw)
    finally:
        os.close(fd)


def test_object_copy_is_named_by_crc_and_made_once(tmp_path):
    src = tmp_path / "libx.so.1"
    data = os.urandom(3 << 20)
    src.write_bytes(data)
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as q:
        name = _store(q, src, "libx.so.1")
        assert name == f".libx.so.1.crc32.{_crc(data):08x}"
        assert _store(q, src, "libx.so.1") == name
        with QDir.open(qd) as other:  # a second writer, no shared cache
            assert _store(other, src, "libx.so.1") == name
        assert q.verify_copy(name) is None
    assert (qd / name).read_bytes() == data
    assert os.listdir(qd) == [name]


def test_copy_keeps_unreadable_objects_unreadable(tmp_path):
    src = tmp_path / "secret"
    src.write_bytes(b"\x7fELF secret")
    src.chmod(0o600)
    with QDir.open(tmp_path / "q", create=True) as q:
        name = _store(q, src, "secret")
    assert stat.S_IMODE((tmp_path / "q" / name).stat().st_mode) & 0o077 == 0


def test_setuid_binaries_are_copied_not_linked(tmp_path):
    src = tmp_path / "su"
    src.write_bytes(b"\x7fELF setuid")
    src.chmod(0o4755)
    with QDir.open(tmp_path / "q", create=True) as q:
        name = _store(q, src, "su")
    copy = (tmp_path / "q" / name).stat()
    assert copy.st_ino != src.stat().st_ino
    assert not copy.st_mode & (stat.S_ISUID | stat.S_ISGID | 0o111)


def test_deleted_file_is_copied_through_its_descriptor(tmp_path):
    src = tmp_path / "gone"
    src.write_bytes(b"deleted binary")
    fd = os.open(src, os.O_RDONLY)
    src.unlink()
    try:
        with QDir.open(tmp_path / "q", create=True) as q:
            name = q.store_object(fd, "gone")
    finally:
        os.close(fd)
    assert (tmp_path / "q" / name).read_bytes() == b"deleted binary"


def test_proc_files_are_really_copied(tmp_path):
    with QDir.open(tmp_path / "q", create=True) as q:
        name = _store(q, "/proc/version", "version")
    data = (tmp_path / "q" / name).read_bytes()
    assert data == open("/proc/version", "rb").read()
    assert parse_copy_name(name)[1] == _crc(data)


def test_copy_from_another_filesystem(tmp_path):
    if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second filesystem to copy from")
    src = f"/dev/shm/qtools-test-{os.getpid()}"
    with open(src, "wb") as f:
        f.write(b"other fs")
    try:
        with QDir.open(tmp_path / "q", create=True) as q:
            name = _store(q, src, "other")
    finally:
        os.unlink(src)
    assert (tmp_path / "q" / name).read_bytes() == b"other fs"


def test_symlink_mode(tmp_path):
    src = tmp_path / "bin"
    data = b"\x7fELF linked"
    src.write_bytes(data)
    with QDir.open(tmp_path / "q", create=True) as q:
        name = _store(q, src, "bin", symlink_to=str(src))
        assert q.verify_copy(name) is None
    assert os.readlink(tmp_path / "q" / name) == str(src)
    assert name == f".bin.crc32.{_crc(data):08x}"


def test_verify_reports_changed_and_missing_copies(tmp_path):
    src = tmp_path / "obj"
    src.write_bytes(b"original")
    with QDir.open(tmp_path / "q", create=True) as q:
        name = _store(q, src, "obj", symlink_to=str(src))
        src.write_bytes(b"changed!")
        problem = q.verify_copy(name)
        assert problem is not None and "content changed" in problem.reason
        assert "missing" in str(q.verify_copy(".nothere.crc32.00000000"))
        assert q.verify_copy("not-a-copy") is not None


# ---------------------------------------------------------------- resolving names

def test_resolve_latest_version(tmp_path):
    with QDir.open(tmp_path) as q:
        for _ in range(3):
            q.claim_version(SET, _render)
    base = tmp_path / "app-pid42-cpu0.info"
    assert resolve_info(base) == f"{base}#2"
    assert resolve_info(f"{base}#1") == f"{base}#1"
    with pytest.raises(QFormatError, match="no such"):
        resolve_info(tmp_path / "zzz-pid1-cpu0.info")
    with pytest.raises(QFormatError, match="not an .info"):
        resolve_info(tmp_path / "app-pid42-cpu0.hist#0")


def test_a_reader_may_open_a_symlinked_directory(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with QDir.open(tmp_path / "link", reader=True) as q:
        assert q.names() == []
