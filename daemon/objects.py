"""Copies of mapped objects into `.q`, made once per content.

A file is reached through the task that maps it whenever possible
(/proc/PID/map_files, then /proc/PID/root/PATH): that finds deleted and
replaced binaries and files in other mount namespaces. Only when the task is
gone is the plain path tried, and then only if its device and inode are
those the kernel reported for the mapping.
"""

from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass
from typing import Callable

from qtools.qformat import QDir

from . import procfs
from .tasks import Mapping, ObjectKey, Process

RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class Copy:
    name: str | None  # the copy's file name in .q, None if none could be made
    build_id: str | None = None


NO_COPY = Copy(None)


def build_id(fd: int) -> str | None:
    """The GNU build-id note of an ELF file, as lowercase hex."""
    try:
        head = os.pread(fd, 64, 0)
        if len(head) < 52 or head[:4] != b"\x7fELF":
            return None
        is64, endian = head[4] == 2, "<" if head[5] == 1 else ">"
        if is64:
            phoff, = struct.unpack_from(endian + "Q", head, 32)
            phentsize, phnum = struct.unpack_from(endian + "HH", head, 54)
        else:
            phoff, = struct.unpack_from(endian + "I", head, 28)
            phentsize, phnum = struct.unpack_from(endian + "HH", head, 42)
        if phnum > 256 or phentsize < (56 if is64 else 32):
            return None
        table = os.pread(fd, phentsize * phnum, phoff)
        for i in range(phnum):
            off = i * phentsize
            if len(table) < off + phentsize:
                break
            if is64:
                p_type, _f, p_offset, _v, _p, p_filesz = struct.unpack_from(
                    endian + "IIQQQQ", table, off)
            else:
                p_type, p_offset, _v, _p, p_filesz = struct.unpack_from(
                    endian + "IIIII", table, off)
            if p_type == 4 and 0 < p_filesz <= 1 << 16:  # PT_NOTE
                found = _gnu_build_id(os.pread(fd, p_filesz, p_offset), endian)
                if found:
                    return found
    except (OSError, struct.error):
        return None
    return None


def _gnu_build_id(notes: bytes, endian: str) -> str | None:
    off = 0
    while off + 12 <= len(notes):
        namesz, descsz, type_ = struct.unpack_from(endian + "III", notes, off)
        name_end = off + 12 + ((namesz + 3) & ~3)
        desc_end = name_end + ((descsz + 3) & ~3)
        if desc_end > len(notes):
            return None
        if type_ == 3 and notes[off + 12:off + 12 + namesz].rstrip(b"\0") == b"GNU":
            return notes[name_end:name_end + descsz].hex()
        off = desc_end
    return None


def open_object(proc: Process, mapping: Mapping) -> int | None:
    """The file behind ``mapping``, checked to be the one the kernel reported.

    Through the task while it lives (/proc/PID/map_files, then its own view
    of the path), then the plain path. A path may name another file by now:
    one put there to make a daemon running as root copy a secret, or a FIFO
    to hang it. So every candidate must be a regular file with the mapping's
    device and inode (or build-id); with neither known, only map_files is
    taken."""
    obj = mapping.obj
    tries: list[tuple[Callable[[], int | None], bool]] = []  # (open, the kernel's own link)
    if not proc.ended:
        tries.append((lambda: procfs.open_mapped_file(proc.pid, mapping.start, mapping.end),
                      True))
        tries.append((lambda: procfs.open_in_root(proc.pid, obj.path), False))
    tries.append((lambda: procfs.open_plain(obj.path), False))
    for attempt, trusted in tries:
        fd = attempt()
        if fd is None:
            continue
        if _is_object(fd, obj, trusted):
            return fd
        os.close(fd)
    return None


def _is_object(fd: int, obj: ObjectKey, trusted: bool) -> bool:
    if obj.ino:
        st = os.fstat(fd)
        return st.st_ino == obj.ino and (os.major(st.st_dev), os.minor(st.st_dev)) == obj.dev
    if obj.build_id:
        return build_id(fd) == obj.build_id.hex()
    return trusted


def _names(path: str, fd: int) -> bool:
    """Does ``path``, as this process sees it, name the file open as ``fd``?"""
    try:
        st, mine = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


class ObjectCopier:
    """Makes and remembers the copy of each object a task set needs."""

    def __init__(self, qdir: QDir, symlink: bool = False) -> None:
        self.qdir = qdir
        self.symlink = symlink
        self._done: dict[ObjectKey, Copy] = {}
        self._failed: dict[ObjectKey, float] = {}

    def known(self, obj: ObjectKey) -> Copy | None:
        return self._done.get(obj)

    def copy(self, proc: Process, mapping: Mapping) -> Copy:
        """The copy for ``mapping``'s object, made now if needed.

        Raises OSError only for trouble writing `.q` (full disk...), so the
        caller can retry at the next checkpoint.
        """
        obj = mapping.obj
        done = self._done.get(obj)
        if done is not None:
            return done
        if obj.special or time.monotonic() < self._failed.get(obj, 0.0):
            return NO_COPY
        fd = open_object(proc, mapping)
        if fd is None:
            self._failed[obj] = time.monotonic() + RETRY_SECONDS
            return NO_COPY
        try:
            # A symlink only where the path still names this very file: a
            # deleted binary, a memfd or another mount namespace's file would
            # leave a dangling or, worse, a wrong link. Those are copied.
            link = obj.path if self.symlink and _names(obj.path, fd) else None
            name = self.qdir.store_object(fd, os.path.basename(obj.path), symlink_to=link)
            result = Copy(name, build_id(fd))
        finally:
            os.close(fd)
        self._done[obj] = result
        return result


    def copy_file(self, path: str, basename: str, owner: int | None = None) -> str | None:
        """Copy a regular file that is not a mapping (kallsyms, a JIT map),
        only if ``owner`` (when given) owns it; None if there is none."""
        fd = procfs.open_plain(path)
        if fd is None:
            return None
        try:
            if owner is not None and os.fstat(fd).st_uid != owner:
                return None
            return self.qdir.store_object(fd, basename)
        finally:
            os.close(fd)


class KallsymsCopy:
    """The run's copy of kallsyms, made again when the loaded kernel modules
    change, so that a module loaded after the start has its symbols too. (BPF
    programs come and go too often to follow; their addresses stay unknown.)"""

    def __init__(self, kallsyms: str = "/proc/kallsyms", modules: str = "/proc/modules") -> None:
        self.kallsyms = kallsyms
        self.modules = modules
        self.name: str | None = None
        self._modules: frozenset[tuple[str, str]] | None = None
        self._retry_at = 0.0

    def current(self, copier: ObjectCopier, report: bool = False) -> str | None:
        """The name of an up-to-date copy, or the last good one while a new
        one cannot be made (retried every RETRY_SECONDS). With ``report`` a
        failure to write raises OSError; otherwise it passes in silence (the
        start of the run has said it, and the sets' own writes say it again)."""
        modules = procfs.loaded_modules(self.modules)
        if (self.name is None or modules != self._modules) and \
                (report or time.monotonic() >= self._retry_at):
            try:
                name = copier.copy_file(self.kallsyms, "kallsyms")
            except OSError:
                self._retry_at = time.monotonic() + RETRY_SECONDS
                if report:
                    raise
                return self.name
            if name is not None:
                self.name, self._modules = name, modules
        return self.name
