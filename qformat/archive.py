"""`.q` directories inside a tar archive, read in place.

``open_archive`` reads a tar's headers once (never its members' data),
refuses the whole archive at the first member that a `.q` directory could
not hold, and gives a ``TarStore`` for each directory in it that holds task
sets. A member is then read where it lies, through ``pread`` on the
archive's descriptor: nothing is unpacked to disk. A `.tar.gz` is first
decompressed into memory (a memfd), within ``archive-size``.

Refused, with one line naming the archive and the member: an absolute
name, a name with ``..``, a symlink or hardlink member, a device, FIFO or
other special member, a sparse member, a name that occurs twice, more than
``members`` members, an archive over ``archive-size``, and a member whose
data lies past the end of the archive. A tar made with ``tar chf q.tar .q``
(links followed: object copies are regular members) is what is expected.
"""

from __future__ import annotations

import errno
import io
import os
from typing import IO, TYPE_CHECKING, Any, NamedTuple

from zlib_ng import zlib_ng

from .errors import QFormatError
from .info import Info, Unwanted, Wanted, info_from_bytes
from .limits import DEFAULT_LIMITS, Limits, exceeded, show
from .names import check_plain_name, info_versions, parse_copy_name
from .files import MissingFile, open_regular
from .store import CopyProblem
from .stores import Identity, Store

if TYPE_CHECKING:
    import tarfile

SUFFIXES = (".tar", ".tar.gz", ".tgz")
GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20
MAX_HEADER_READ = 1 << 20  # one read of a header: a long name or pax record, not a member


class ArchiveError(QFormatError):
    """An archive, or a member of it, that a reader refuses."""


def looks_like_archive(path: str) -> bool:
    """Is ``path`` a regular file named as a tar archive?"""
    return path.endswith(SUFFIXES) and os.path.isfile(path)


class Member(NamedTuple):
    offset: int  # of its data in the (decompressed) archive
    size: int
    mtime: float


class _Window(io.RawIOBase):
    """Bytes ``[start, start+size)`` of ``fd``, read with pread; ``max_read``
    bounds one read (tarfile reads a long name or a pax header whole)."""

    def __init__(self, fd: int, start: int, size: int, max_read: int | None = None) -> None:
        self.fd, self.start, self.size, self.pos = fd, start, size, 0
        self.max_read = max_read

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, size: int = -1) -> bytes:
        if self.max_read is not None and (size < 0 or size > self.max_read):
            raise QFormatError(f"a header of more than {show('info-size', self.max_read)}")
        return super().read(size) or b""

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self.size - self.pos)
        if want <= 0:
            return 0
        view = memoryview(buffer)[:want]
        n = os.preadv(self.fd, [view], self.start + self.pos)
        self.pos += n
        return n


class Archive:
    """An open tar archive: its descriptor and where each member's data lies."""

    def __init__(self, path: str, fd: int, size: int) -> None:
        self.path, self.fd, self.size = path, fd, size
        self.directories: dict[str, dict[str, Member]] = {}

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_archive(path: str, limits: Limits = DEFAULT_LIMITS) -> list[TarStore]:
    """A store for each directory of the archive ``path`` that holds task sets
    (``.q/NAME`` members: one store, ``PATH:.q``); ArchiveError for an
    archive a reader refuses, or one that holds no task set."""
    try:
        fd = open_regular(path)
    except OSError as e:
        raise ArchiveError(f"cannot read: {e.strerror or e}", path) from None
    try:
        fd, size = _plain(fd, path, limits)
        archive = Archive(path, fd, size)
        _index(archive, limits)
    except BaseException:
        os.close(fd)
        raise
    stores = [TarStore(archive, d, names) for d, names in sorted(archive.directories.items())
              if info_versions(names)]
    if not stores:
        archive.close()
        raise ArchiveError("no task sets (*.info#N) in this archive", path)
    return stores


def _plain(fd: int, path: str, limits: Limits) -> tuple[int, int]:
    """The fd of the uncompressed tar and its size: ``fd`` itself, or for
    gzip a memfd holding the decompressed bytes (``fd`` is then closed)."""
    size = os.fstat(fd).st_size
    if os.pread(fd, 2, 0) != GZIP_MAGIC:
        if size > limits.archive_size:
            raise exceeded(f"{size} bytes", path, "archive-size", limits.archive_size)
        return fd, size
    out = os.memfd_create("q-archive", os.MFD_CLOEXEC)
    total = 0
    try:
        with os.fdopen(os.dup(fd), "rb") as raw, \
                _gzip().GzipFile(fileobj=raw, mode="rb") as gz:
            while chunk := gz.read(CHUNK):
                total += len(chunk)
                if total > limits.archive_size:
                    raise exceeded(f"more than {show('archive-size', limits.archive_size)} "
                                   "decompressed", path, "archive-size", limits.archive_size)
                _write_all(out, chunk)
    except (EOFError, _gzip().BadGzipFile, zlib_ng.error) as e:  # type: ignore[misc]
        os.close(out)
        raise ArchiveError(f"corrupt gzip data: {e or 'ends early'}", path) from None
    except BaseException:
        os.close(out)
        raise
    os.close(fd)
    return out, total


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _index(archive: Archive, limits: Limits) -> None:
    """Read every header, check every member, note where each file's data lies."""
    import tarfile  # only when an archive is read: every q-view run imports this module
    raw = _Window(archive.fd, 0, archive.size, MAX_HEADER_READ)
    seen: set[str] = set()
    count = 0
    try:
        # unbuffered: a buffer would allocate what a forged header's size asks
        with tarfile.open(fileobj=raw, mode="r:") as tar:  # type: ignore[arg-type]
            # header by header, so that a count over the limit stops the scan
            member = tar.next()
            while member is not None:
                count += 1
                if count > limits.members:
                    raise exceeded(f"more than {limits.members} members", archive.path,
                                   "members", limits.members)
                _add(archive, member, seen)
                tar.members.clear()  # type: ignore[attr-defined]  # ours is the index
                member = tar.next()
    except tarfile.TarError as e:
        raise ArchiveError(f"not a tar archive (plain or gzip-compressed): {e}",
                           archive.path) from None
    except QFormatError as e:
        if e.path is None:
            raise ArchiveError(f"{e.message} after {count} members", archive.path) from None
        raise


def _add(archive: Archive, m: tarfile.TarInfo, seen: set[str]) -> None:
    def refuse(reason: str) -> ArchiveError:
        return ArchiveError(f"member {m.name}: {reason}; refused", archive.path)

    if m.name.startswith("/"):
        raise refuse("an absolute name")
    parts = [p for p in m.name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise refuse("a name with '..'")
    name = "/".join(parts)
    if m.issym() or m.islnk():
        raise refuse("a link (make the archive with tar -h, which stores the files)")
    if m.ischr() or m.isblk() or m.isfifo():
        raise refuse("a device or FIFO")
    if not (m.isreg() or m.isdir()) or m.issparse():
        raise refuse("not a regular file or directory")
    if name in seen:
        raise refuse("a name that occurs twice")
    seen.add(name)
    if m.isdir() or not parts:
        return
    if m.offset_data + m.size > archive.size:
        raise refuse("its data lies past the end of the archive")
    directory = "/".join(parts[:-1])
    archive.directories.setdefault(directory, {})[parts[-1]] = \
        Member(m.offset_data, m.size, float(m.mtime))


class TarStore(Store):
    """One directory of an archive: its members read in place."""

    def __init__(self, archive: Archive, directory: str, members: dict[str, Member]) -> None:
        self.archive = archive
        self.directory = directory
        self.members = members
        self.label = f"{archive.path}:{directory}" if directory else archive.path

    @property
    def is_archive(self) -> bool:
        return True

    def path(self, name: str) -> str:
        return f"{self.label}/{name}" if self.directory else f"{self.label}:{name}"

    def names(self) -> list[str]:
        return list(self.members)

    def exists(self, name: str) -> bool:
        return name in self.members

    def mtime(self, name: str) -> float:
        return self.members[name].mtime

    def _member(self, name: str) -> Member:
        try:
            return self.members[check_plain_name(name)]
        except QFormatError as e:
            raise e.located(self.path(name)) from None
        except KeyError:
            raise MissingFile("missing (its .info names it)", self.path(name)) from None

    def open_member(self, name: str, expect: Identity = None) -> IO[bytes]:
        m = self._member(name)
        return io.BufferedReader(_Window(self.archive.fd, m.offset, m.size),  # type: ignore[return-value]
                                 1 << 16)

    def read_info(self, name: str, objects: bool = True, limits: Limits = DEFAULT_LIMITS,
                  wanted: Wanted | None = None) -> tuple[Info, Identity]:
        m = self._member(name)
        path = self.path(name)
        if m.size > limits.info_size:
            raise exceeded(f"{m.size} bytes", path, "info-size", limits.info_size)
        data = os.pread(self.archive.fd, m.size, m.offset)
        if wanted is not None and not wanted(data):
            raise Unwanted(path)
        return info_from_bytes(data, path, objects, limits), None

    def open_copy(self, name: str, max_size: int | None = None
                  ) -> tuple[int, None] | tuple[None, CopyProblem]:
        """The copy's bytes in a memfd (memory, not disk), its crc checked:
        symbol readers take a path, and ``/proc/self/fd/N`` is one."""
        try:
            _base, expected = parse_copy_name(check_plain_name(name))
        except QFormatError as e:
            return None, CopyProblem(name, e.message)
        m = self.members.get(name)
        if m is None:
            return None, CopyProblem(name, "missing")
        if max_size is not None and m.size > max_size:
            return None, CopyProblem(name, f"{m.size} bytes, over the limit of "
                                     f"{show('copy-size', max_size)} (copy-size; raise it "
                                     "with --limits copy-size=N)")
        out = os.memfd_create(name[:200], os.MFD_CLOEXEC)
        crc = 0
        try:
            window = _Window(self.archive.fd, m.offset, m.size)
            buf = bytearray(CHUNK)
            while n := window.readinto(buf):
                crc = zlib_ng.crc32(memoryview(buf)[:n], crc)
                _write_all(out, memoryview(buf)[:n])
            os.lseek(out, 0, os.SEEK_SET)
        except OSError as e:
            os.close(out)
            if e.errno == errno.ENOMEM:
                return None, CopyProblem(name, "no memory to hold it")
            return None, CopyProblem(name, f"unreadable: {e.strerror}")
        if crc != expected:
            os.close(out)
            return None, CopyProblem(name, f"content changed (crc32 {crc:08x}, "
                                     f"not {expected:08x})")
        return out, None

    def close(self) -> None:
        self.archive.close()


def _gzip() -> Any:
    """zlib-ng's gzip reader, imported for a compressed archive only (with
    shutil and its compressors, 2 ms of every view's start-up)."""
    from zlib_ng import gzip_ng
    return gzip_ng
