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
    """Streaming zlib crc32 of a whole file."""
    crc = 0
    for chunk in _chunks(fd):
        crc = zlib_ng.crc32(chunk, crc)
    return crc
