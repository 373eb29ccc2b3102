"""The `.q` directory on disk: the only filesystem code of the format.

- ``QDir.open`` applies the safety rules of DESIGN 3.5 (no symlinked
  directory, owner and permissions checked when asked) and then works only
  through the directory's file descriptor, so a path swapped underneath
  cannot redirect a write.
- ``atomic_write`` makes every file appear whole (temporary file, fsync,
  rename, fsync of the directory); a reader never sees half a file, also
  after ``kill -9`` of the writer.
- ``claim_version`` hands out version numbers to concurrent writers by
  hard-linking a completely written `.info` to the new name: ``link(2)``
  fails where the name exists, so two writers never get the same number.
- ``store_object`` keeps one checksummed copy per content (DESIGN 3.4).
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterable, Iterator

from zlib_ng import gzip_ng, zlib_ng

from .errors import QFormatError
from .names import SetName, check_plain_name, copy_name, info_versions, parse_copy_name, \
    parse_name

TEMP_PREFIX = ".tmp-"
CHUNK = 1 << 20
FICLONE = 0x40049409  # _IOW(0x94, 9, int): reflink a whole file

Chunks = bytes | Iterable[bytes]


class UnsafeDirectory(QFormatError):
    """The output directory fails a safety rule; nothing was written."""


@dataclass(frozen=True)
class CopyProblem:
    """Why a copy cannot be trusted (``QDir.verify_copy``)."""

    name: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name}: {self.reason}"


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


class QDir:
    """An open `.q` directory."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd
        self._copies: dict[tuple[int, ...], str] = {}

    # ------------------------------------------------------------ opening

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = False,
             secure: bool = False, reader: bool = False) -> QDir:
        """Open the directory at ``path``.

        ``create`` makes it (mode 0755) when missing. ``secure`` applies the
        rules for a writer running with privileges: the directory must be
        owned by the effective user and not writable by group or others.
        A symlink is refused, as a writer never follows one, unless the
        directory is opened only to read (``reader``).
        """
        path = os.fspath(path)
        if reader:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as e:
                raise QFormatError(f"cannot open directory: {e.strerror}", path) from None
            return cls(path, fd)
        if create:
            try:
                os.mkdir(path, 0o755)
            except FileExistsError:
                pass
            except OSError as e:
                raise UnsafeDirectory(f"cannot create directory: {e.strerror}", path) from None
        try:
            before = os.lstat(path)
        except OSError as e:
            raise QFormatError(f"cannot open directory: {e.strerror}", path) from None
        if stat.S_ISLNK(before.st_mode):
            raise UnsafeDirectory("is a symlink; refusing to follow it", path)
        if not stat.S_ISDIR(before.st_mode):
            raise QFormatError("not a directory", path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise QFormatError(f"cannot open directory: {e.strerror}", path) from None
        st = os.fstat(fd)
        problem = None
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
            problem = "was replaced while being opened"
        elif secure and st.st_uid != os.geteuid():
            problem = f"is owned by uid {st.st_uid}, not by uid {os.geteuid()} that writes it"
        elif secure and st.st_mode & 0o022:
            problem = f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
        if problem:
            os.close(fd)
            raise UnsafeDirectory(problem, path)
        return cls(path, fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> QDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def join(self, name: str) -> str:
        return os.path.join(self.path, check_plain_name(name))

    # ------------------------------------------------------------ listing

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def exists(self, name: str) -> bool:
        try:
            os.stat(check_plain_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def lstat(self, name: str) -> os.stat_result:
        return os.stat(check_plain_name(name), dir_fd=self.fd, follow_symlinks=False)

    def remove(self, name: str) -> bool:
        """Unlink ``name``; False if it was not there."""
        try:
            os.unlink(check_plain_name(name), dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def open_read(self, name: str) -> int:
        """A read-only fd for the regular file ``name`` (an object copy may be a symlink)."""
        return open_regular(check_plain_name(name), dir_fd=self.fd)

    def versions(self, set_name: SetName) -> list[int]:
        """Versions of a set that have an `.info`, ascending."""
        prefix = f"{set_name}.info#"
        return info_versions(n for n in self.names() if n.startswith(prefix)).get(set_name, [])

    def latest_version(self, set_name: SetName) -> int | None:
        found = self.versions(set_name)
        return found[-1] if found else None

    # ------------------------------------------------------------ writing

    def _temp(self, mode: int) -> tuple[str, int]:
        while True:
            name = f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, mode, dir_fd=self.fd)
            except FileExistsError:
                continue
            return name, fd

    def _unlink_quietly(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass

    def sync(self) -> None:
        """fsync the directory, making renames and links durable."""
        os.fsync(self.fd)

    def _write_temp(self, data: Chunks, *, compress: bool, mode: int) -> str:
        tmp, fd = self._temp(mode)
        try:
            with os.fdopen(fd, "wb") as f:
                if compress:
                    with gzip_ng.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
                        _write_chunks(gz, data)
                else:
                    _write_chunks(f, data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            self._unlink_quietly(tmp)
            raise
        return tmp

    def atomic_write(self, name: str, data: Chunks, *, compress: bool = False,
                     mode: int = 0o644, sync: bool = True) -> None:
        """Replace ``name`` with ``data`` so that readers see old or new, whole.

        ``data`` is bytes or an iterable of byte chunks (streamed). With
        ``compress`` the file is written gzip-compressed (zlib-ng). ``sync``
        False leaves the directory fsync to the caller (batch writes).
        """
        check_plain_name(name)
        tmp = self._write_temp(data, compress=compress, mode=mode)
        try:
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self._unlink_quietly(tmp)
            raise
        if sync:
            self.sync()

    def claim_version(self, set_name: SetName, render: Callable[[int], bytes],
                      mode: int = 0o644, type_: str = "info") -> int:
        """Create ``SET.TYPE#N`` (``.info`` unless told) for a new N and return N.

        N starts one above the highest existing version of the `.info` and
        of TYPE. ``render(N)`` gives the complete file for version N; it is
        written to a temporary file and hard-linked to the name, which fails
        if another writer took N first; then the next N is tried.
        """
        prefixes = (f"{set_name}.info#", f"{set_name}.{type_}#")
        taken = [int(v) for name in self.names() if name.startswith(prefixes)
                 for v in [name.rpartition("#")[2]] if v.isdigit() and len(v) < 10]
        n = max(taken) + 1 if taken else 0
        while True:
            tmp = self._write_temp(render(n), compress=False, mode=mode)
            try:
                os.link(tmp, set_name.file(type_, n), src_dir_fd=self.fd,
                        dst_dir_fd=self.fd, follow_symlinks=False)
            except FileExistsError:
                n += 1
                continue
            finally:
                self._unlink_quietly(tmp)
            self.sync()
            return n

    def remove_stale_temps(self) -> int:
        """Remove temporary files left by writers that no longer run."""
        removed = 0
        for name in self.names():
            if not name.startswith(TEMP_PREFIX):
                continue
            pid_text = name[len(TEMP_PREFIX):].split("-", 1)[0]
            if not pid_text.isdigit() or _alive(int(pid_text)):
                continue
            self._unlink_quietly(name)
            removed += 1
        return removed

    # ------------------------------------------------------------ object copies

    def store_object(self, src_fd: int, basename: str, *, symlink_to: str | None = None) -> str:
        """Keep a copy of the open file ``src_fd``; return its copy name.

        The copy is ``.BASENAME.crc32.XXXXXXXX`` and is made once per
        content: a reflink where the filesystem can, else a hard link, else a
        byte copy; with ``symlink_to`` a symlink to that path instead (the
        crc is still of the content). A copy is never wider-readable than
        its source. Calling again for the same content is cheap and returns
        the same name.
        """
        st = os.fstat(src_fd)
        if not stat.S_ISREG(st.st_mode):
            raise QFormatError("not a regular file", basename)
        identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self._copies.get(identity) if st.st_size else None
        if known and self.exists(known):
            return known
        mode = stat.S_IMODE(st.st_mode) & 0o444 or 0o400
        if symlink_to is not None:
            name = copy_name(basename, crc32_of_fd(src_fd))
            if not self.exists(name):
                tmp = f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
                os.symlink(symlink_to, tmp, dir_fd=self.fd)
                self._publish(tmp, name)
        else:
            name = self._clone(src_fd, basename, st, mode) \
                or self._hard_link(src_fd, basename, st) \
                or self._copy(src_fd, basename, mode)
        if st.st_size:
            self._copies[identity] = name
        return name

    def _publish(self, tmp: str, name: str) -> None:
        """Give ``tmp`` its final name unless that exists already; drop ``tmp``."""
        try:
            os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        except FileExistsError:
            pass
        finally:
            self._unlink_quietly(tmp)
        self.sync()

    def _checksum_and_publish(self, tmp: str, basename: str) -> str:
        fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            name = copy_name(basename, crc32_of_fd(fd))
        finally:
            os.close(fd)
        self._publish(tmp, name)
        return name

    def _clone(self, src_fd: int, basename: str, st: os.stat_result, mode: int) -> str | None:
        if not st.st_size:
            return None  # /proc files report size 0 and cannot be cloned
        tmp, fd = self._temp(mode)
        try:
            fcntl.ioctl(fd, FICLONE, src_fd)
        except OSError:
            os.close(fd)
            self._unlink_quietly(tmp)
            return None
        os.close(fd)
        return self._checksum_and_publish(tmp, basename)

    def _hard_link(self, src_fd: int, basename: str, st: os.stat_result) -> str | None:
        # A hard link shares the inode: no setuid/setgid binary is kept alive
        # that way (a copy drops those bits), and a deleted file cannot be linked.
        if not st.st_size or st.st_nlink == 0 or st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            return None
        tmp = f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        try:
            os.link(f"/proc/self/fd/{src_fd}", tmp, dst_dir_fd=self.fd, follow_symlinks=True)
        except OSError:
            return None
        return self._checksum_and_publish(tmp, basename)

    def _copy(self, src_fd: int, basename: str, mode: int) -> str:
        tmp, fd = self._temp(mode)
        try:
            crc = 0
            for chunk in _chunks(src_fd):
                crc = zlib_ng.crc32(chunk, crc)
                _write_all(fd, chunk)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self._unlink_quietly(tmp)
            raise
        os.close(fd)
        name = copy_name(basename, crc)
        self._publish(tmp, name)
        return name

    # ------------------------------------------------------------ reading

    def verify_copy(self, name: str) -> CopyProblem | None:
        """Check an object copy against the crc in its name; None if good."""
        try:
            _base, expected = parse_copy_name(check_plain_name(name))
        except QFormatError as e:
            return CopyProblem(name, e.message)
        try:
            fd = self.open_read(name)
        except FileNotFoundError:
            return CopyProblem(name, "missing")
        except OSError as e:
            return CopyProblem(name, f"unreadable: {e.strerror}")
        try:
            actual = crc32_of_fd(fd)
        except OSError as e:
            return CopyProblem(name, f"unreadable: {e.strerror}")
        finally:
            os.close(fd)
        if actual != expected:
            return CopyProblem(name, f"content changed (crc32 {actual:08x}, not {expected:08x})")
        return None


def _write_chunks(f: object, data: Chunks) -> None:
    write = f.write  # type: ignore[attr-defined]
    if isinstance(data, (bytes, bytearray, memoryview)):
        write(data)
    else:
        for chunk in data:
            write(chunk)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != 0


def resolve_info(path: str | os.PathLike[str]) -> str:
    """Path of an `.info` file; a name without ``#N`` means its latest version.

    A file literally named as given is taken as it is (hand-made data).
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    q = parse_name(name)
    if q.type != "info":
        raise QFormatError("not an .info file", path)
    if q.version is not None:
        return path
    try:
        names = os.listdir(directory or ".")
    except OSError as e:
        raise QFormatError(f"cannot list directory: {e.strerror}", directory or ".") from None
    prefix = name + "#"
    versions = [int(n[len(prefix):]) for n in names
                if n.startswith(prefix) and n[len(prefix):].isdigit()]
    if versions:
        return os.path.join(directory, f"{name}#{max(versions)}")
    if name in names:
        return path
    raise QFormatError("no such .info file (no version of it exists)", path)

