"""Opening and reading a file anyone may have made: a regular file only
(a FIFO or device planted where a file is expected would block or feed
forever), inside a `.q` directory no symlink followed, reads capped.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import BinaryIO, Iterator

from zlib_ng import zlib_ng

from .errors import QFormatError
from .names import check_plain_name

CHUNK = 1 << 20


def _chunks(fd: int) -> Iterator[memoryview]:
    """The whole content of ``fd`` from offset 0, in chunks of one reused buffer.

    Regular files are read with preadv (the fd's position is left alone);
    others (/proc files) sequentially from where a fresh fd starts: a seq_file
    pread at an offset makes the kernel regenerate everything before it.
    """
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    regular = stat.S_ISREG(os.fstat(fd).st_mode) and os.fstat(fd).st_size > 0
    offset = 0
    while True:
        n = os.preadv(fd, [buf], offset) if regular else os.readv(fd, [buf])
        if not n:
            return
        yield view[:n]
        offset += n


def open_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None,
                 follow: bool = True) -> int:
    """A read-only fd for ``path``, which must be a regular file (symlinks to
    one are fine unless ``follow`` is false: object copies may be symlinks).
    A FIFO, device or socket planted where a file is expected would otherwise
    block the reader forever or feed it an endless stream; O_NONBLOCK keeps
    the open itself from blocking."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(path, flags if follow else flags | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


class MissingFile(QFormatError):
    """A file an `.info` names is not there."""


def open_in_directory(directory: str, name: str,
                      expect: tuple[int, int] | None = None) -> tuple[int, tuple[int, int]]:
    """A read-only fd for the regular file ``name`` in ``directory``, and the
    directory's (st_dev, st_ino).

    The path to the directory is the user's; inside it no symlink is
    followed: ``name`` is one plain component (checked) opened with
    O_NOFOLLOW relative to the directory's fd, which for a single component
    is all that openat2's RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS would add.
    With ``expect`` (the identity returned when the set's `.info` was
    opened) a directory replaced in between is refused, so an `.info` and
    its data files come from one directory.
    """
    try:
        dir_fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise QFormatError(f"cannot open directory: {e.strerror}", directory) from None
    path = os.path.join(directory, name)
    try:
        st = os.fstat(dir_fd)
        identity = (st.st_dev, st.st_ino)
        if expect is not None and identity != expect:
            raise QFormatError("its directory was replaced while being read", path)
        try:
            fd = open_regular(check_plain_name(name), dir_fd=dir_fd, follow=False)
        except QFormatError as e:
            raise e.located(path) from None
        except FileNotFoundError:
            raise MissingFile("missing (its .info names it)", path) from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise QFormatError("a symlink, not a regular file: links inside a .q "
                                   "directory are not followed", path) from None
            raise QFormatError(f"cannot read: {e.strerror}", path) from None
    finally:
        os.close(dir_fd)
    return fd, identity


def read_at_most(f: BinaryIO, limit: int, chunk: int = 1 << 16) -> bytes:
    """Up to ``limit`` bytes of ``f``, read in chunks: ``f.read(limit)`` would
    allocate the whole limit at once (and a /proc sysctl read with a huge
    count fails with ENOMEM, the kernel allocating it too)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        data = f.read(min(chunk, limit - size))
        if not data:
            break
        parts.append(data)
        size += len(data)
    return b"".join(parts)


def crc32_of_fd(fd: int) -> int:
    """Streaming zlib crc32 of a whole file; the holes of a sparse file are
    summed as the zeros they read as, without reading them."""
    crc = 0
    for piece in _pieces(fd):
        crc = crc32_zeros(crc, piece) if isinstance(piece, int) else zlib_ng.crc32(piece, crc)
    return crc


def _pieces(fd: int) -> Iterator[memoryview | int]:
    """The whole content of ``fd`` as ``_chunks`` gives it, but a hole of a
    sparse regular file as the number of zero bytes it holds. The position
    of ``fd`` is left where it was (seeking for data moves it)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not st.st_size:
        yield from _chunks(fd)
        return
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    position = os.lseek(fd, 0, os.SEEK_CUR)
    try:
        offset = 0
        while True:
            start, end = data_extent(fd, offset, os.fstat(fd).st_size)
            if start > offset:
                yield start - offset
                offset = start
            if start >= end:  # only a hole followed: the end, unless the file grew
                end = offset + CHUNK
            n = os.preadv(fd, [view[:min(CHUNK, end - offset)]], offset)
            if not n:
                return
            yield view[:n]
            offset += n
    finally:
        os.lseek(fd, position, os.SEEK_SET)


def data_extent(fd: int, offset: int, size: int) -> tuple[int, int]:
    """The next run of data of the regular file ``fd`` (``size`` bytes long)
    at or after ``offset``: (start, end). Bytes between ``offset`` and
    ``start`` are a hole, zeros that take no disk; (size, size) where only a
    hole follows. Where the file system cannot tell, everything is data.
    Moves the position of ``fd`` (read at offsets)."""
    try:
        start = os.lseek(fd, offset, os.SEEK_DATA)
        return start, max(start, os.lseek(fd, start, os.SEEK_HOLE))
    except OSError as e:
        if e.errno == errno.ENXIO:  # nothing but a hole past offset
            return max(offset, size), max(offset, size)
        if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return offset, max(offset, size)
        raise


_ZERO_CRCS = [zlib_ng.crc32(b"\0")]  # the crc32 of 2**i zero bytes, at i


def crc32_zeros(crc: int, n: int) -> int:
    """The crc32 of what ``crc`` summed followed by ``n`` zero bytes, in
    log(n) steps: a hole of terabytes is summed without a byte read."""
    if n <= 0:
        return crc
    zeros = 0
    for i in range(n.bit_length()):
        while len(_ZERO_CRCS) <= i:
            half = _ZERO_CRCS[-1]
            _ZERO_CRCS.append(zlib_ng.crc32_combine(half, half, 1 << (len(_ZERO_CRCS) - 1)))
        if n >> i & 1:
            zeros = zlib_ng.crc32_combine(zeros, _ZERO_CRCS[i], 1 << i)
    return zlib_ng.crc32_combine(crc, zeros, n)
