"""The `.q` directory on disk: with files.py (opening a file anyone may
have made), the only filesystem code of the format.

- ``QDir.open`` applies the safety rules of docs/q-format.md 7.7 (no symlinked
  directory, owner and permissions checked when asked) and then works only
  through the directory's file descriptor, so a path swapped underneath
  cannot redirect a write.
- ``atomic_write`` makes every file appear whole (temporary file, fsync,
  rename, fsync of the directory); a reader never sees half a file, also
  after ``kill -9`` of the writer.
- ``claim_version`` hands out version numbers to concurrent writers by
  hard-linking a completely written `.info` to the new name: ``link(2)``
  fails where the name exists, so two writers never get the same number.
- ``store_object`` and ``start_copy`` keep one checksummed copy per
  content (docs/q-format.md 6), bounded in size and, through
  ``copies.CopyJob``, in time.
"""

from __future__ import annotations

import os
import stat
from typing import Callable, Iterable, NamedTuple, Protocol

from .copies import CopyJob, Room, Stored, identity_of, start_copy
from .errors import QFormatError
from .files import crc32_of_fd, open_regular
from .names import SetName, check_plain_name, info_versions, parse_copy_name, \
    parse_name
from .limits import show
from .writers import alive, writer_tag

TEMP_PREFIX = ".tmp-"
MAX_OBJECT_BYTES = 512 << 20  # the default limit of one object copy

Chunks = bytes | Iterable[bytes]


class UnsafeDirectory(QFormatError):
    """The output directory fails a safety rule; nothing was written."""


class CopyProblem(NamedTuple):
    """Why a copy cannot be trusted (``QDir.verify_copy``)."""

    name: str
    reason: str

    def __str__(self) -> str:
        return f"{self.name}: {self.reason}"


class CopyIndex(Protocol):
    """Copies by their source's identity, shared by several writers."""

    def get(self, identity: tuple[int, ...]) -> Stored | None: ...

    def add(self, identity: tuple[int, ...], stored: Stored) -> None: ...

    def names(self) -> set[str]: ...


class QDir:
    """An open `.q` directory."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd
        self._copies: dict[tuple[int, ...], Stored] = {}
        #: the copies other writers of the run made (q-syscollect's collectors)
        self.shared: CopyIndex | None = None
        #: what is left under the directory's size bound (q-syscollect --max-size)
        self.room: Room | None = None

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

    def temp_name(self) -> str:
        """A fresh temporary name: ``.tmp-PID.START-RANDOM``, START being
        the writer's start time (clock ticks after boot), so that a reused
        pid does not make a dead writer's leftovers look alive."""
        return f"{TEMP_PREFIX}{writer_tag()}-{os.urandom(6).hex()}"

    def temp_file(self, mode: int) -> tuple[str, int]:
        while True:
            name = self.temp_name()
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, mode, dir_fd=self.fd)
            except FileExistsError:
                continue
            return name, fd

    def unlink_quietly(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass

    def sync(self) -> None:
        """fsync the directory, making renames and links durable."""
        os.fsync(self.fd)

    def _write_temp(self, data: Chunks, *, compress: bool, mode: int) -> str:
        tmp, fd = self.temp_file(mode)
        try:
            with os.fdopen(fd, "wb") as f:
                if compress:
                    from zlib_ng import gzip_ng  # only for compressed files: not at start
                    with gzip_ng.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
                        _write_chunks(gz, data)
                else:
                    _write_chunks(f, data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            self.unlink_quietly(tmp)
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
            self.unlink_quietly(tmp)
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
                self.unlink_quietly(tmp)
            self.sync()
            return n

    def remove_stale_temps(self) -> int:
        """Remove temporary files left by writers that no longer run: whose
        pid is gone, a zombie, or now another process (its start time
        differs from the one in the name)."""
        removed = 0
        for name in self.names():
            if not name.startswith(TEMP_PREFIX):
                continue
            tag = name[len(TEMP_PREFIX):].split("-", 1)[0]
            pid_text, _, start_text = tag.partition(".")
            if not pid_text.isdigit() or (start_text and not start_text.isdigit()):
                continue
            if alive(int(pid_text), int(start_text) if start_text else None):
                continue
            self.unlink_quietly(name)
            removed += 1
        return removed

    # ------------------------------------------------------------ object copies

    def start_copy(self, src_fd: int, basename: str, *, limit: int = MAX_OBJECT_BYTES,
                   truncate: bool = False, link: bool = True,
                   symlink_to: str | None = None, private: bool = False) -> Stored | CopyJob:
        """Begin keeping a copy of the open file ``src_fd`` (see
        ``copies.start_copy`` for how and the limits): the finished copy if
        this content is known already, else a job to ``advance``.

        The copy is ``.BASENAME.crc32.XXXXXXXX``, made once per content."""
        identity = identity_of(os.fstat(src_fd))
        known = self._copies.get(identity) if identity[2] else None
        if known is None and self.shared is not None and identity[2]:
            known = self.shared.get(identity)
        if known and self.exists(known.name):
            return known
        job = start_copy(self, src_fd, basename, limit, truncate=truncate, link=link,
                         symlink_to=symlink_to, private=private, room=self.room)
        if identity[2]:
            job.identity = identity
        return job

    def remember(self, identity: tuple[int, ...], stored: Stored) -> None:
        """A copy made for this file state: asked again, it is returned at
        once (by the other writers of the run too, through ``shared``)."""
        self._copies[identity] = stored
        if self.shared is not None:
            self.shared.add(identity, stored)

    def store_object(self, src_fd: int, basename: str, *, symlink_to: str | None = None,
                     limit: int = MAX_OBJECT_BYTES, link: bool = True,
                     private: bool = False) -> str:
        """Keep a copy of the open file ``src_fd`` now, whatever it takes
        (up to ``limit`` bytes: more raise ``TooLarge``); return its name.

        A reflink where the filesystem can, else a hard link where nobody
        but root can change the file, else a byte copy; with ``symlink_to``
        a symlink to that path where only root can change it (the crc is
        still of the content). A copy is never wider-readable than its
        source. Calling again for the same content is cheap and returns the
        same name. ``link`` and ``private`` are as for ``start_copy``."""
        started = self.start_copy(src_fd, basename, limit=limit, symlink_to=symlink_to,
                                  link=link, private=private)
        if isinstance(started, Stored):
            return started.name
        done = started.advance(None)
        assert done is not None  # narrowing: without a deadline a copy runs to its end
        return done.name

    def publish(self, tmp: str, name: str) -> bool:
        """Give ``tmp`` its final name unless that exists already; drop
        ``tmp``. False if the name was there (the same content, copied before)."""
        new = False
        try:
            os.link(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
            new = True
        except FileExistsError:
            pass
        finally:
            self.unlink_quietly(tmp)
        self.sync()
        return new

    # ------------------------------------------------------------ reading

    def verify_copy(self, name: str, max_size: int | None = None) -> CopyProblem | None:
        """Check an object copy against the crc in its name; None if good
        (see ``open_copy``)."""
        fd, problem = self.open_copy(name, max_size)
        if fd is not None:
            os.close(fd)
        return problem

    def open_copy(self, name: str,
                  max_size: int | None = None) -> tuple[int, None] | tuple[None, CopyProblem]:
        """An fd of the object copy ``name`` whose content has the crc its name
        says, or why there is none; read what was checked through the fd.

        A copy is a file of the directory, or a symlink that ``--symlink``
        made: that one is followed only to a regular file owned by root that
        nobody else can write (anyone could otherwise point an archive's
        copy at a file of theirs, or at one they may change later). Checked
        on the opened descriptor. ``max_size`` bounds the bytes checksummed.
        """
        try:
            _base, expected = parse_copy_name(check_plain_name(name))
        except QFormatError as e:
            return None, CopyProblem(name, e.message)
        try:
            linked = stat.S_ISLNK(self.lstat(name).st_mode)
            fd = open_regular(name, dir_fd=self.fd, follow=linked)
        except FileNotFoundError:
            return None, CopyProblem(name, "missing")
        except OSError as e:
            return None, CopyProblem(name, f"unreadable: {e.strerror}")
        problem = None
        try:
            st = os.fstat(fd)
            if linked and st.st_uid != 0:
                problem = f"a symlink to a file owned by uid {st.st_uid}, not root: refused"
            elif linked and st.st_mode & 0o022:
                problem = ("a symlink to a file writable by group or others "
                           f"(mode {stat.S_IMODE(st.st_mode):04o}): refused")
            elif max_size is not None and st.st_size > max_size:
                problem = (f"{st.st_size} bytes, over the limit of "
                           f"{show('copy-size', max_size)} (copy-size; raise it with "
                           "--limits copy-size=N)")
            elif (actual := crc32_of_fd(fd)) != expected:
                problem = f"content changed (crc32 {actual:08x}, not {expected:08x})"
        except OSError as e:
            problem = f"unreadable: {e.strerror}"
        if problem is not None:
            os.close(fd)
            return None, CopyProblem(name, problem)
        return fd, None


def _write_chunks(f: object, data: Chunks) -> None:
    write = f.write  # type: ignore[attr-defined]
    if isinstance(data, (bytes, bytearray, memoryview)):
        write(data)
    else:
        for chunk in data:
            write(chunk)


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

