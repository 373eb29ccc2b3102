"""Copies of sparse files keep their holes, and copies keep within the room
a bounded `.q` has left (qformat.copies, daemon.sets.diskroom)."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from hypothesis import given, strategies as st

from qtools.daemon.sets.diskroom import DiskRoom
from qtools.qformat import NoRoom, QDir, crc32_of_fd
from qtools.qformat.copies import CHUNK
from qtools.qformat.files import crc32_zeros
from qtools.qformat.names import parse_copy_name

import pytest

MiB = 1 << 20


def _sparse(path: Path, length: int, data_at: list[int], piece: int = 64 << 10) -> bytes:
    """A file of ``length`` bytes, holes but for ``piece`` random bytes at
    each of ``data_at``; returns the random bytes (to compare)."""
    pieces = b""
    with open(path, "wb") as f:
        for at in data_at:
            data = os.urandom(piece)
            f.seek(at)
            f.write(data)
            pieces += data
        f.truncate(length)
    return pieces


def _plain_crc(path: Path) -> int:
    """The crc32 of a file read byte by byte, as any reader sees it."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def _temps(q: Path) -> list[str]:
    return [n for n in os.listdir(q) if n.startswith(".tmp-")]


def _copy(q: QDir, path: Path, deadline: float | None = None, **kw):
    fd = os.open(path, os.O_RDONLY)
    try:
        job = q.start_copy(fd, path.name, link=False, **kw)
    finally:
        os.close(fd)
    calls = 1
    done = job.advance(deadline)
    while done is None:
        calls += 1
        done = job.advance(deadline)
    return done, calls


def test_a_sparse_file_is_copied_with_its_holes_and_the_crc_of_its_content(tmp_path):
    src = tmp_path / "sparse-bin"
    _sparse(src, 96 * MiB + 123, [0, 40 * MiB + 4096])  # ends in a hole
    assert _allocated(src) < MiB
    with QDir.open(tmp_path / "q", create=True) as q:
        done, _calls = _copy(q, src)
        copy = tmp_path / "q" / done.name
        assert copy.stat().st_size == src.stat().st_size
        assert _allocated(copy) < MiB  # was 96 MiB of written zeros
        assert parse_copy_name(done.name)[1] == _plain_crc(src)
        assert q.verify_copy(done.name) is None  # q-view's check reads it as before
    assert _plain_crc(copy) == _plain_crc(src)


def test_a_copy_across_many_holes_goes_on_after_each_deadline(tmp_path):
    src = tmp_path / "holey"
    _sparse(src, 32 * MiB, [i * MiB for i in range(0, 32, 2)], piece=4096)
    with QDir.open(tmp_path / "q", create=True) as q:
        done, calls = _copy(q, src, deadline=0.0)  # a deadline passed: a run of data a call
    copy = tmp_path / "q" / done.name
    assert calls > 1 and _plain_crc(copy) == _plain_crc(src) == parse_copy_name(done.name)[1]
    assert copy.read_bytes() == src.read_bytes()
    assert _allocated(copy) <= 16 * 4096 + 8 * 4096  # 16 pieces, a few blocks of the fs's own


def test_a_file_that_is_all_hole_past_the_limit_is_cut_at_its_last_line(tmp_path):
    src = tmp_path / "perf-3.map"
    with open(src, "wb") as f:
        f.write(b"7f0000001000 10 first\n")
        f.seek(3 * MiB)
        f.write(b"7f0000002000 10 far\n")  # past the limit, after a hole
    with QDir.open(tmp_path / "q", create=True) as q:
        done, _calls = _copy(q, src, limit=2 * MiB, truncate=True)
    assert done.truncated and (tmp_path / "q" / done.name).read_bytes() == \
        b"7f0000001000 10 first\n"


@given(st.binary(max_size=64), st.integers(min_value=0, max_value=1 << 20))
def test_crc32_of_a_run_of_zeros_is_that_of_the_bytes(prefix, zeros):
    assert crc32_zeros(zlib.crc32(prefix), zeros) == zlib.crc32(prefix + bytes(zeros))


def test_crc32_of_fd_sums_holes_and_leaves_the_position(tmp_path):
    src = tmp_path / "s"
    _sparse(src, 20 * MiB, [5 * MiB])
    fd = os.open(src, os.O_RDONLY)
    try:
        os.lseek(fd, 1234, os.SEEK_SET)
        assert crc32_of_fd(fd) == _plain_crc(src)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 1234  # a reader goes on where it was
    finally:
        os.close(fd)


# ------------------------------------------------------------ room


@pytest.fixture
def room():
    made = DiskRoom.create(8 * MiB, 2)
    if made is None:
        pytest.skip("no memfd here")
    made.measured(0, 0)
    return made


def test_a_copy_within_the_room_counts_the_blocks_it_holds(tmp_path, room):
    src = tmp_path / "dense"
    src.write_bytes(os.urandom(3 * MiB))
    with QDir.open(tmp_path / "q", create=True) as q:
        q.room = room
        done, _calls = _copy(q, src)
        assert room.used() == _allocated(tmp_path / "q" / done.name)
        twin = tmp_path / "twin"
        twin.mkdir()
        (twin / "dense").write_bytes(src.read_bytes())
        again, _calls = _copy(q, twin / "dense")  # the same content: the one copy
        assert again.name == done.name and room.used() == _allocated(tmp_path / "q" / done.name)


def test_a_copy_that_would_pass_the_bound_is_refused_before_it_is_read(tmp_path, room):
    src = tmp_path / "big"
    src.write_bytes(os.urandom(9 * MiB))
    with QDir.open(tmp_path / "q", create=True) as q:
        q.room = room
        with pytest.raises(NoRoom):
            _copy(q, src)
    assert _temps(tmp_path / "q") == [] and room.used() == 0
    assert room.wanted() >= 9 * MiB  # upkeep is told how much was wanted


def test_a_file_filled_while_it_is_copied_is_given_up_at_the_bound(tmp_path, room):
    src = tmp_path / "grows"
    _sparse(src, 12 * MiB, [0])  # a hole when the copy starts: it fits
    with QDir.open(tmp_path / "q", create=True) as q:
        q.room = room
        fd = os.open(src, os.O_RDONLY)
        try:
            job = q.start_copy(fd, src.name, link=False)
        finally:
            os.close(fd)
        with open(src, "r+b") as f:
            f.write(os.urandom(12 * MiB))  # its owner fills it now
        with pytest.raises(NoRoom):
            while job.advance(None) is None:
                pass
    assert _temps(tmp_path / "q") == [] and room.used() == 0  # nothing written stays


def test_the_ledger_is_shared_and_a_dead_writers_reservations_end(room):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a collector that keeps a copy and dies with another under way
        ok = room.take(2 * MiB) and room.take(MiB)
        room.release(MiB, kept=MiB)
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.close(r)
    os.waitpid(pid, 0)
    assert room.used() == 3 * MiB  # seen from another process: its slot still counts
    assert room.take(MiB)  # the next process to take a slot empties those of the dead
    assert room.used() == 2 * MiB  # its finished copy still counts, what was under way not
    assert room.take(6 * MiB) and not room.take(1)  # 8 MiB, the bound
