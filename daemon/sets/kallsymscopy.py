"""The run's copy of kallsyms, and copies of it kept across runs.

Reading /proc/kallsyms is the dearest thing a run does once: the kernel
formats each of its symbols anew at every read (about 40 ms of CPU here,
a fifth of a short run's start-up). The text changes with the boot (KASLR),
the loaded modules and the reader's view of addresses (kptr_restrict, the
user), and with BPF programs, which a run does not follow either. So a
copy made by the same user in the same boot, with the same modules and
view, younger than ``CACHE_MAX_AGE`` seconds, is reused from the user's
cache directory rather than read again.
"""

from __future__ import annotations

import mmap
import os
import stat
import time
import zlib

from qtools.qformat import QFormatError, TooLarge, parse_copy_name
from qtools.common.cachedir import cache_dir, open_cache_dir

from ..machine.host import Host
from .objects import RETRY_SECONDS, ObjectCopier

SHARED_NAME_BYTES = 4096  # KallsymsCopy's name, as the supervisor tells its collectors
CACHE_MAX_AGE = 3600.0
"""Seconds a cached copy is reused: the BPF programs loaded since are missing from it."""

_PREFIX = "kallsyms-"


class KallsymsCache:
    """Copies of kallsyms in one directory, by key; never raises. The
    directory and each entry must be this user's and writable by nobody
    else, checked on what was opened: a root collector must not take kernel
    symbols from a file another user could have written."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory

    @staticmethod
    def default() -> KallsymsCache:
        return KallsymsCache(cache_dir("kallsyms"))

    def _dir_fd(self, create: bool) -> int | None:
        if self.directory is None:
            return None
        return open_cache_dir(self.directory, create)

    def open(self, key: str, limit: int) -> int | None:
        """A descriptor of the entry for ``key``: a regular file of at most
        ``limit`` bytes, younger than CACHE_MAX_AGE; else None."""
        dir_fd = self._dir_fd(create=False)
        if dir_fd is None:
            return None
        try:
            fd = os.open(_PREFIX + key, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return None
        finally:
            os.close(dir_fd)
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and _ours(st) and 0 < st.st_size <= limit
                and 0 <= time.time() - st.st_mtime <= CACHE_MAX_AGE):
            os.close(fd)
            return None
        return fd

    def store(self, key: str, src_fd: int, limit: int) -> None:
        """Keep the file ``src_fd`` (read from its start) as the entry for
        ``key``, replacing the others: one boot's are of no use in the next."""
        dir_fd = self._dir_fd(create=True)
        if dir_fd is None:
            return
        tmp = f".{_PREFIX}{os.getpid()}.tmp"
        try:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
            try:
                offset = 0
                while offset < limit:
                    sent = os.sendfile(out, src_fd, offset, min(1 << 20, limit - offset))
                    if not sent:
                        break
                    offset += sent
            finally:
                os.close(out)
            if offset >= limit:
                os.unlink(tmp, dir_fd=dir_fd)
                return
            os.rename(tmp, _PREFIX + key, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            for name in os.listdir(dir_fd):
                if name.startswith(_PREFIX) and name != _PREFIX + key:
                    os.unlink(name, dir_fd=dir_fd)
        except OSError:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
        finally:
            os.close(dir_fd)


def _ours(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def cache_key(host: Host, modules: frozenset[tuple[str, str]] | None) -> str | None:
    """What a copy of kallsyms depends on, as a file name; None when the
    boot is not known (no entry can be trusted to be of this boot).
    ``modules`` None: a kernel without /proc/modules (built without module
    support), whose symbols change only with the boot."""
    boot = host.boot_id()
    if boot is None:
        return None
    listed = "\n".join(sorted(f"{name} {address}" for name, address in modules or ()))
    crc = zlib.crc32(listed.encode()) if modules is not None else 0
    view = host.sysctl_int("kernel.kptr_restrict")
    return f"{boot}-{os.geteuid()}-{view}-{'m' if modules is not None else 'n'}{crc:08x}"


class KallsymsCopy:
    """The run's copy of kallsyms, made again when the loaded kernel modules
    change, so that a module loaded after the start has its symbols too. (BPF
    programs come and go too often to follow; their addresses stay unknown.)"""

    def __init__(self, kallsyms: str = "/proc/kallsyms", modules: str = "/proc/modules",
                 cache: KallsymsCache | None = None) -> None:
        self.kallsyms = kallsyms
        self.modules = modules
        self.cache = cache  # for the copy made with ``report``, at the run's start
        self.name: str | None = None
        self._modules: frozenset[tuple[str, str]] | None = None
        self._retry_at = 0.0
        # The supervisor copies kallsyms after its collectors are sampling
        # (a copy takes a while) and tells them the name here: memory
        # shared across their fork, the name followed by a NUL, written
        # before the first byte that marks it complete.
        self._shared = mmap.mmap(-1, SHARED_NAME_BYTES)
        self._pending_modules: frozenset[tuple[str, str]] | None = None
        self._collections = 0  # rounds of upkeep that removed copies, when last looked

    def expect(self, host: Host) -> None:
        """Before forking the collectors that will ``adopt`` the copy made
        after the fork: the modules as they are now (a copy made later
        holds at least these; a change after this moment is copied again)."""
        self._pending_modules = host.loaded_modules(self.modules)

    def publish(self) -> None:
        """Tell the collectors forked since ``expect`` the name of the copy."""
        if self.name is None:
            return
        data = self.name.encode() + b"\0"
        if len(data) < SHARED_NAME_BYTES:
            self._shared[1:1 + len(data)] = data
            self._shared[0] = 1

    def _adopt(self) -> None:
        if self.name is not None or self._shared[0] != 1:
            return
        name = bytes(self._shared[1:]).partition(b"\0")[0].decode(errors="replace")
        try:
            parse_copy_name(name)
        except QFormatError:
            return
        self.name, self._modules = name, self._pending_modules

    def current(self, copier: ObjectCopier, report: bool = False) -> str | None:
        """The name of an up-to-date copy, or the last good one while a new
        one cannot be made (retried every RETRY_SECONDS). With ``report`` a
        failure to write raises OSError; otherwise it passes in silence (the
        start of the run has said it, and the sets' own writes say it again)."""
        self._adopt()
        self._recheck(copier)
        modules = copier.host.loaded_modules(self.modules)
        if (self.name is None or modules != self._modules) and \
                (report or time.monotonic() >= self._retry_at):
            key = cache_key(copier.host, modules) if report and self.cache else None
            try:
                name = self._cached(copier, key)
                if name is None:
                    stored = copier.copy_file(self.kallsyms, "kallsyms",
                                              copier.limits.kallsyms_size, wait=report,
                                              private=True)
                    name = stored.name if stored else None
                    if name is not None and key is not None:
                        self._keep(copier, name, key)
            except OSError:
                self._retry_at = time.monotonic() + RETRY_SECONDS
                if report:
                    raise
                return self.name
            if name is not None:
                self.name, self._modules = name, modules
        return self.name

    def _recheck(self, copier: ObjectCopier) -> None:
        """Copy again if upkeep collected the copy (sets left unwritten
        longer than its grace, a full disk): no set may name a missing one."""
        room = copier.qdir.room
        if room is None or self.name is None or room.collections() == self._collections:
            return
        self._collections = room.collections()
        if not copier.qdir.exists(self.name):
            self.name = None

    def _cached(self, copier: ObjectCopier, key: str | None) -> str | None:
        """The cache's entry for ``key``, copied into `.q` now: its name there."""
        if key is None or self.cache is None:
            return None
        limit = copier.limits.kallsyms_size
        fd = self.cache.open(key, limit)
        if fd is None:
            return None
        try:
            return copier.qdir.store_object(fd, "kallsyms", limit=limit, link=False,
                                            private=True)
        except (TooLarge, QFormatError):
            return None
        finally:
            os.close(fd)

    def _keep(self, copier: ObjectCopier, name: str, key: str) -> None:
        """Put the copy just made into the cache, from `.q`."""
        assert self.cache is not None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=copier.qdir.fd)
        except OSError:
            return
        try:
            self.cache.store(key, fd, copier.limits.kallsyms_size)
        finally:
            os.close(fd)
