"""Object copies in `.q`: how a file may be kept, and copies made a slice at a time.

The collector runs as root and copies files that local users can write.
So a copy must not stay theirs to change, and a huge or endless file must
neither fill the disk nor hold up the collector:

- ``may_link``: a hard link shares the inode, so only a file that nobody
  but root (or the writer's own user) can write may be linked.
- ``root_only``: a symlink is followed by its path later, so only a path
  that nobody but root can change may be linked to.
- ``CopyJob``: reads at most ``limit`` bytes, checksums them and writes them
  into a temporary file, in chunks, until a deadline; called again, it goes
  on where it stopped. A 512 MiB byte copy took 0.8 s here (0.2 s of CPU:
  read, crc32, write; several seconds on a loaded machine or a slow disk),
  so no caller waits for one in a single piece. The holes of a sparse file
  stay holes: only its data is read and written (a user's file of 480 MiB
  that holds 20 KiB costs `.q` 20 KiB), and the crc32 is still that of the
  whole content, zeros included, which a reader sees as before.
- ``Room``: where `.q` is bounded, the bytes a copy puts on the disk are
  taken from what is left before they are written, and a copy that would
  pass the bound is given up (``NoRoom``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time
from typing import NamedTuple, Protocol

from zlib_ng import zlib_ng

from .errors import QFormatError
from .files import crc32_zeros, data_extent
from .names import copy_name


class QDir(Protocol):
    """What a copy needs of the directory it goes into (``store.QDir``)."""

    fd: int

    def temp_name(self) -> str: ...

    def temp_file(self, mode: int) -> tuple[str, int]: ...

    def unlink_quietly(self, name: str) -> None: ...

    def publish(self, tmp: str, name: str) -> bool: ...

    def remember(self, identity: tuple[int, ...], stored: Stored) -> None: ...


CHUNK = 1 << 20
SYNC_EVERY = 16 << 20  # flush written data this often: no single fsync of a whole copy
MAX_SYMLINKS = 40  # as the kernel's path walk allows
FICLONE = 0x40049409  # _IOW(0x94, 9, int): reflink a whole file
BLOCK = 4096  # a file system's allocation unit, as far as room is counted


class TooLarge(QFormatError):
    """A file over its size limit, refused (not truncated)."""


class SourceUnreadable(QFormatError):
    """Reading the file being copied failed (not the writing of `.q`)."""


class NoRoom(QFormatError):
    """A copy that would take `.q` past its size bound, refused or given up."""


class Room(Protocol):
    """What is left of a bounded `.q`, shared by the writers that copy into it."""

    @property
    def limit(self) -> int:
        """The bound, in bytes (0: none)."""
        ...

    def collections(self) -> int:
        """How many times copies were removed from `.q` so far: a writer
        that remembers copies looks again whether they are there."""
        ...

    def take(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` for a copy under way; False if they would
        take `.q` past its bound (nothing is reserved then)."""
        ...

    def release(self, nbytes: int, kept: int = 0) -> None:
        """A copy's reservation of ``nbytes`` ends: ``kept`` of them stay in
        `.q` as a finished copy, the rest are free again."""
        ...


def _blocks(n: int) -> int:
    """``n`` bytes as the whole blocks they take on a disk."""
    return -(-n // BLOCK) * BLOCK


def expected_bytes(st: os.stat_result, limit: int) -> int:
    """What a byte copy of a file in state ``st`` puts on the disk, as far as
    that state tells: its allocated blocks (holes stay holes; blocks
    reserved past its end are not copied), within ``limit``, and a block
    for the file system's own; for a file that does not say its size
    (/proc) a first chunk."""
    if not st.st_size:
        return CHUNK
    return min(st.st_blocks * 512, _blocks(st.st_size), _blocks(limit)) + BLOCK


class Stored(NamedTuple):
    """A finished copy: its file name in `.q`, and whether it holds only
    the first ``limit`` bytes of a longer file."""

    name: str
    truncated: bool = False


def identity_of(st: os.stat_result) -> tuple[int, ...]:
    """A file's state (device, inode, size, mtime, ctime): another
    identity, maybe another content; the same, the same content."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def may_link(fd: int, st: os.stat_result) -> bool:
    """May the file open as ``fd`` be kept as a hard link to it?

    Only if nobody but root or this process's user can change it later
    (owner, no group or other write bit, no ACL that could grant one), it is
    not setuid or setgid (a link would keep such a binary alive), and it
    still has a name to link."""
    if not st.st_size or st.st_nlink == 0:
        return False
    if st.st_uid not in (0, os.geteuid()):
        return False
    if st.st_mode & (stat.S_ISUID | stat.S_ISGID | 0o022):
        return False
    try:
        os.getxattr(fd, "system.posix_acl_access")
    except OSError as e:
        return e.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP)
    return False


def _trusted_dir(st: os.stat_result) -> bool:
    """Only root can change which entries this directory holds: owned by
    root and not writable by others, or writable but sticky (as /tmp), where
    a root-owned entry cannot be renamed or removed by anyone else."""
    if st.st_uid != 0 or not stat.S_ISDIR(st.st_mode):
        return False
    return not st.st_mode & 0o022 or bool(st.st_mode & stat.S_ISVTX)


def root_only(path: str, target: os.stat_result) -> bool:
    """Does ``path`` lead to the file ``target`` along a way only root can change?

    Walked one component at a time on opened descriptors (O_PATH, O_NOFOLLOW,
    each relative to the one before), so what is checked is what is walked:
    every directory and symlink on the way owned by root in a directory only
    root can change (see ``_trusted_dir``), and the file itself owned by root
    and writable by nobody else. Symlinks are followed (merged-/usr systems
    reach /lib through one) under the same rules."""
    if not path.startswith("/"):
        return False
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    parts = [p for p in path.split("/") if p not in ("", ".")]
    links = 0
    cur = os.open("/", flags | os.O_DIRECTORY)
    try:
        if not _trusted_dir(os.fstat(cur)):
            return False
        while parts:
            part = parts.pop(0)
            try:
                nxt = os.open(part, flags, dir_fd=cur)
            except OSError:
                return False
            st = os.fstat(nxt)
            if st.st_uid != 0:
                os.close(nxt)
                return False
            if stat.S_ISLNK(st.st_mode):
                os.close(nxt)
                links += 1
                try:
                    text = os.readlink(part, dir_fd=cur)  # cur is root's: the same link
                except OSError:
                    return False
                if links > MAX_SYMLINKS or not text:
                    return False
                parts[:0] = [p for p in text.split("/") if p not in ("", ".")]
                if text.startswith("/"):
                    os.close(cur)
                    cur = os.open("/", flags | os.O_DIRECTORY)
                continue
            os.close(cur)
            cur = nxt
            if not parts:
                return (stat.S_ISREG(st.st_mode) and not st.st_mode & 0o022
                        and (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino))
            if not _trusted_dir(st):
                return False
        return False
    finally:
        os.close(cur)


class CopyJob:
    """One copy into `.q` under way.

    Reads at most ``limit`` bytes of its own descriptor of the source, takes
    their crc32 and, with a temporary file to write, copies them there
    (a reflink or hard link has the bytes already: only the crc is taken).
    ``advance`` works until a deadline and returns None if it is not done;
    called again it goes on where it stopped. Bytes past ``limit`` make the
    copy fail with ``TooLarge``, or with ``truncate`` end it there, marked
    truncated: an append-only text file such as a JIT's perf map keeps its
    whole lines within the first ``limit`` bytes, which no longer change
    (a file with no line end there keeps ``limit`` bytes).

    A regular file is read a run of data at a time (``data_extent``): a
    hole is summed as its zeros (``crc32_zeros``) and left a hole in the
    copy. With a ``room``, the blocks a byte copy writes are reserved
    before they are written (``taken``, of which ``used`` are on the disk),
    and a copy that finds no room is given up with ``NoRoom``.
    """

    def __init__(self, qdir: QDir, src_fd: int, basename: str, limit: int, *,
                 truncate: bool = False, tmp: str | None = None, write_fd: int | None = None,
                 symlink_to: str | None = None, room: Room | None = None,
                 taken: int = 0) -> None:
        self.qdir = qdir
        self.basename = basename
        self.limit = limit
        self.truncate = truncate
        self.tmp = tmp
        self.write_fd = write_fd
        self.symlink_to = symlink_to
        self.room = room
        self.taken = taken  # bytes of room reserved, released when the job ends
        self.used = 0  # bytes the copy takes on the disk so far
        # A dup shares the source's file position, which looking for data
        # moves: every read is at an offset.
        self.read_fd = os.dup(src_fd)
        st = os.fstat(self.read_fd)
        # /proc files say size 0 and must be read in order from a fresh
        # descriptor; real files are read at offsets, a run of data at a time.
        self.positional = st.st_size > 0
        self.data_end = 0 if self.positional else sys.maxsize  # of the run of data being read
        self.offset = 0
        self.written = 0
        self.synced = 0
        self.crc = 0
        self.line_end: tuple[int, int] | None = None  # (offset, crc) after the last b"\n"
        self.closed = False
        self.identity: tuple[int, ...] | None = None  # the source's state, set by QDir
        self.linked = False  # tmp is a hard link to the source (start_copy)

    def _read(self, buf: bytearray, size: int) -> int:
        view = memoryview(buf)[:size]
        try:
            if self.positional:
                return os.preadv(self.read_fd, [view], self.offset)
            # A file of /proc (kallsyms) gives a page a read: fill the chunk,
            # so that it is summed and written in one go, not page by page.
            got = 0
            while got < size:
                n = os.readv(self.read_fd, [view[got:]])
                if not n:
                    break
                got += n
            return got
        except OSError as e:
            raise SourceUnreadable(f"cannot read: {e.strerror}", self.basename) from None

    def advance(self, deadline: float | None = None) -> Stored | None:
        """Go on until done (the copy) or ``deadline`` (monotonic seconds:
        None) passes; at least one chunk is done per call. Raises
        ``TooLarge``, ``SourceUnreadable``, or OSError for `.q` itself; the
        job is then closed."""
        if self.closed:
            raise ValueError("copy job already closed")
        try:
            return self._advance(deadline)
        except BaseException:
            self.close()
            raise

    def _skip_hole(self) -> None:
        """Go to the next run of data, summing the hole before it as zeros
        (none is written: the copy has the hole too)."""
        try:
            size = os.fstat(self.read_fd).st_size
            start, self.data_end = data_extent(self.read_fd, self.offset, size)
        except OSError as e:
            raise SourceUnreadable(f"cannot read: {e.strerror}", self.basename) from None
        start = min(start, self.limit)
        self.crc = crc32_zeros(self.crc, start - self.offset)
        self.offset = start

    def _advance(self, deadline: float | None) -> Stored | None:
        buf = bytearray(CHUNK)
        while True:
            if self.offset >= self.data_end and self.offset < self.limit:
                self._skip_hole()
            if self.offset >= self.limit:
                if not self._read(bytearray(1), 1):
                    return self._finish(False)
                if not self.truncate:
                    raise TooLarge(f"larger than the limit of {self.limit} bytes", self.basename)
                if self.write_fd is not None and self.line_end is not None:
                    self.offset, self.crc = self.line_end
                    os.ftruncate(self.write_fd, self.offset)
                return self._finish(True)
            want = min(CHUNK, self.limit - self.offset, self.data_end - self.offset)
            if want <= 0:  # only a hole followed
                return self._finish(False)
            n = self._read(buf, want)
            if not n:
                return self._finish(False)
            chunk = memoryview(buf)[:n]
            line_end = buf.rfind(b"\n", 0, n) + 1 if self.truncate else 0
            if line_end:
                head = zlib_ng.crc32(chunk[:line_end], self.crc)
                self.line_end = (self.offset + line_end, head)
                self.crc = zlib_ng.crc32(chunk[line_end:], head)
            else:
                self.crc = zlib_ng.crc32(chunk, self.crc)
            if self.write_fd is not None:
                self._write(chunk)
            self.offset += n
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _write(self, chunk: memoryview) -> None:
        """Write ``chunk`` at its offset, within the room reserved for it."""
        assert self.write_fd is not None
        if self.room is not None:
            self._take(self.used + _blocks(len(chunk)) + BLOCK - self.taken)
        _write_all(self.write_fd, chunk, self.offset)
        self.written += len(chunk)
        if self.written - self.synced >= SYNC_EVERY:
            os.fdatasync(self.write_fd)
            self.synced = self.written
        if self.room is not None:
            self.used = os.fstat(self.write_fd).st_blocks * 512
            self._take(self.used - self.taken)  # blocks of the file system's own, if any

    def _take(self, nbytes: int) -> None:
        if nbytes <= 0 or self.room is None:
            return
        if not self.room.take(nbytes):
            raise NoRoom("no room left in .q under its size bound", self.basename)
        self.taken += nbytes

    def _finish(self, truncated: bool) -> Stored:
        if self.write_fd is not None:
            os.ftruncate(self.write_fd, self.offset)  # its length, where a hole ends it
            os.fsync(self.write_fd)
            if self.room is not None:
                self.used = os.fstat(self.write_fd).st_blocks * 512
        name = copy_name(self.basename, self.crc)
        if self.symlink_to is not None:
            self.tmp = self.qdir.temp_name()
            os.symlink(self.symlink_to, self.tmp, dir_fd=self.qdir.fd)
        if self.tmp is None:  # finished or given up already
            raise RuntimeError(f"copy of {self.basename} is closed")
        tmp, self.tmp = self.tmp, None
        taken, self.taken = self.taken, 0
        self.close()
        new = False
        try:
            new = self.qdir.publish(tmp, name)
        finally:
            if self.room is not None and taken:
                self.room.release(taken, min(self.used, taken) if new else 0)
        stored = Stored(name, truncated)
        if self.identity is not None:
            if self.linked:
                self.identity = self._linked_identity(name)
            self.qdir.remember(self.identity, stored)
        return stored

    def _linked_identity(self, name: str) -> tuple[int, ...]:
        """The source's state now that ``name`` links to it: linking and
        unlinking changed its ctime (not its content), and the next one
        to ask sees the ctime of now."""
        assert self.identity is not None
        try:
            st = os.stat(name, dir_fd=self.qdir.fd, follow_symlinks=False)
        except OSError:
            return self.identity
        if (st.st_dev, st.st_ino) != self.identity[:2]:
            return self.identity  # the name was another copy's already
        return identity_of(st)

    def close(self) -> None:
        """Give the copy up (or release a finished one): descriptors closed,
        the temporary file removed."""
        if self.closed:
            return
        self.closed = True
        if self.room is not None and self.taken:
            self.room.release(self.taken)
            self.taken = 0
        for fd in (self.read_fd, self.write_fd):
            if fd is not None:
                os.close(fd)
        if self.tmp is not None:
            self.qdir.unlink_quietly(self.tmp)
            self.tmp = None


def start_copy(qdir: QDir, src_fd: int, basename: str, limit: int, *, truncate: bool = False,
               link: bool = True, symlink_to: str | None = None,
               private: bool = False, room: Room | None = None) -> CopyJob:
    """Begin keeping the open file ``src_fd`` in ``qdir``.

    A symlink where ``symlink_to`` is a path only root can change and it
    leads to this file; else a reflink where the filesystem can; else a hard
    link where ``link`` is true and ``may_link`` allows; else a byte copy,
    owned by this process's user and never wider-readable than the source.
    Whole-file ways are only taken for a file within ``limit`` (links not
    for one that may be cut). A file already over ``limit`` is refused with
    ``TooLarge`` unless ``truncate``. A ``private`` copy is readable by its
    owner only, whatever the source's mode: /proc/kallsyms is mode 0444 but
    shows real kernel addresses only to privileged readers, and its copy
    must not hand them to everyone.

    With a ``room``, a copy that brings bytes of its own to `.q` (a reflink,
    a byte copy) reserves them first: those its source says it holds
    (``expected_bytes``) before anything is read, so that a copy that could
    not fit is refused with ``NoRoom`` at once; more as it writes them.
    """
    st = os.fstat(src_fd)
    if not stat.S_ISREG(st.st_mode):
        raise QFormatError("not a regular file", basename)
    if st.st_size > limit and not truncate:
        raise TooLarge(f"{st.st_size} bytes, over the limit of {limit}", basename)
    mode = 0o400 if private else stat.S_IMODE(st.st_mode) & 0o444 or 0o400
    if 0 < st.st_size <= limit:
        if symlink_to is not None and not truncate and st.st_uid == 0 \
                and root_only(symlink_to, st):
            return CopyJob(qdir, src_fd, basename, limit, symlink_to=symlink_to)
        cloned = _clone(qdir, src_fd, mode, limit)
        if cloned is not None:
            tmp, fd = cloned
            try:
                used = os.fstat(fd).st_blocks * 512
                if room is not None and not room.take(used):
                    qdir.unlink_quietly(tmp)
                    raise NoRoom("no room left in .q under its size bound", basename)
                try:
                    job = CopyJob(qdir, fd, basename, limit, tmp=tmp, room=room,
                                  taken=used if room is not None else 0)
                except BaseException:
                    qdir.unlink_quietly(tmp)
                    if room is not None:
                        room.release(used)
                    raise
                job.used = used
                return job
            finally:
                os.close(fd)
        if link and not truncate and may_link(src_fd, st):  # a link would grow
            linked = _hard_link(qdir, src_fd)
            if linked is not None:
                job = CopyJob(qdir, src_fd, basename, limit, truncate=truncate, tmp=linked)
                job.linked = True
                return job
    expected = expected_bytes(st, limit)
    if room is not None and not room.take(expected):
        raise NoRoom("no room left in .q under its size bound", basename)
    try:
        tmp, fd = qdir.temp_file(mode)
    except BaseException:
        if room is not None:
            room.release(expected)
        raise
    try:
        return CopyJob(qdir, src_fd, basename, limit, truncate=truncate, tmp=tmp, write_fd=fd,
                       room=room, taken=expected if room is not None else 0)
    except BaseException:
        os.close(fd)
        qdir.unlink_quietly(tmp)
        if room is not None:
            room.release(expected)
        raise


def _clone(qdir: QDir, src_fd: int, mode: int, limit: int) -> tuple[str, int] | None:
    """A reflink of the source as a temporary file, and a descriptor to read
    it; None where the filesystem cannot, or the file grew past ``limit``."""
    tmp, fd = qdir.temp_file(mode)
    try:
        fcntl.ioctl(fd, FICLONE, src_fd)
        if os.fstat(fd).st_size > limit:
            raise OSError(errno.EFBIG, "grew past the limit")
        read_fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=qdir.fd)
    except OSError:
        os.close(fd)
        qdir.unlink_quietly(tmp)
        return None
    os.close(fd)
    return tmp, read_fd


def _hard_link(qdir: QDir, src_fd: int) -> str | None:
    tmp = qdir.temp_name()
    try:
        os.link(f"/proc/self/fd/{src_fd}", tmp, dst_dir_fd=qdir.fd, follow_symlinks=True)
    except OSError:
        return None
    return tmp


def _write_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n
