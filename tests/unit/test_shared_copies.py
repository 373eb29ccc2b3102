"""One run's collectors share their object copies (daemon/sets/sharedcopies.py).

A copy one collector made is known to the others: they neither read nor
checksum the object again. Checked across real forks, with a hard link
(which changes the source's ctime) and a byte copy, and the table's
bounds and checks.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from qtools.daemon.sets import sharedcopies
from qtools.daemon.sets.sharedcopies import SharedCopies
from qtools.qformat import QDir, Stored
from qtools.qformat.copies import CopyJob
from test_copies import _start  # a copy begun from a path


def _copy_in_child(q: QDir, path: Path, **kw) -> None:
    """What a collector does: copy ``path`` into ``q``, in a process of its own."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            got = _start(q, path, **kw)
            while isinstance(got, CopyJob):
                got = got.advance(None)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("link", [True, False])
def test_a_copy_one_collector_made_is_the_others(tmp_path, link):
    src = tmp_path / "libwork.so"
    shutil.copyfile("/bin/true", src)  # ours alone to write: a hard link is allowed
    with QDir.open(tmp_path / "q", create=True) as q:
        q.shared = SharedCopies.create()
        assert q.shared is not None
        _copy_in_child(q, src, link=link)
        got = _start(q, src, link=link)
        assert isinstance(got, Stored)  # known: nothing read again
        assert (tmp_path / "q" / got.name).read_bytes() == src.read_bytes()
        if link:
            assert (tmp_path / "q" / got.name).stat().st_ino == src.stat().st_ino


def test_without_the_shared_table_each_collector_copies_again(tmp_path):
    src = tmp_path / "libwork.so"
    shutil.copyfile("/bin/true", src)
    with QDir.open(tmp_path / "q", create=True) as q:
        _copy_in_child(q, src)
        job = _start(q, src)
        assert isinstance(job, CopyJob)
        job.close()


@pytest.fixture
def copied(tmp_path):
    """A byte copy of a file, made by another process of the run: (q, the file)."""
    src = tmp_path / "libwork.so"
    src.write_bytes(b"\x7fELF" + bytes(4000))
    with QDir.open(tmp_path / "q", create=True) as q:
        q.shared = SharedCopies.create()
        _copy_in_child(q, src, link=False)
        yield q, src


def test_a_changed_file_is_copied_again(copied, tmp_path):
    q, src = copied
    with open(src, "r+b") as f:
        f.seek(100)
        f.write(b"changed")
    job = _start(q, src, link=False)
    assert isinstance(job, CopyJob)
    done = job.advance(None)
    assert (tmp_path / "q" / done.name).read_bytes() == src.read_bytes()


def test_a_removed_copy_is_made_again(copied, tmp_path):
    q, src = copied
    for name in os.listdir(tmp_path / "q"):
        if name.startswith(".libwork"):
            os.unlink(tmp_path / "q" / name)  # retention took it
    assert isinstance(_start(q, src, link=False), CopyJob)


def test_malformed_lines_are_skipped_and_the_table_is_bounded(monkeypatch):
    table = SharedCopies.create()
    other = SharedCopies(table.fd)  # another collector's view of the same file
    good = Stored(".libc.so.6.crc32.0badf00d")
    os.write(table.fd, b"1 2 3 4 5 0 ../../etc/passwd\nnot a line\n1 2 3\n")
    table.add((1, 2, 3, 4, 5), good)
    os.write(table.fd, b"9 9 9 9 9 0 .half.crc32.0000")  # a line still being written
    assert other.get((1, 2, 3, 4, 5)) == good
    assert other.get((9, 9, 9, 9, 9)) is None
    monkeypatch.setattr(sharedcopies, "MAX_BYTES", os.fstat(table.fd).st_size)
    table.add((7, 7, 7, 7, 7), Stored(".big.crc32.00000001"))
    assert other.get((7, 7, 7, 7, 7)) is None  # past the bound: each copies for itself
