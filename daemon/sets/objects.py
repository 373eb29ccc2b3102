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
import sys
import time
from typing import Callable, NamedTuple, TextIO

from qtools.qformat import CopyJob, NoRoom, QDir, QFormatError, Stored, TooLarge

from ..machine.host import LIVE, Host
from ..machine.tasks import Mapping, ObjectKey, Process
from ..messages import write_line
from .notices import shared_notices
from .perfmaps import MapCopy, left_before, recopy_due

RETRY_SECONDS = 30.0
MAX_FAILED = 4096  # objects waiting to be tried again; past it the expired are forgotten


class Copy(NamedTuple):
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


def open_object(proc: Process, mapping: Mapping, host: Host) -> int | None:
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
        tries.append((lambda: host.open_mapped_file(proc.pid, mapping.start, mapping.end),
                      True))
        tries.append((lambda: host.open_in_root(proc.pid, obj.path), False))
    tries.append((lambda: host.open_plain(obj.path), False))
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


def _size(n: int) -> str:
    """Bytes as the options write them: 64M, 1.5G."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:g}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return str(n)


class CopyLimits(NamedTuple):
    """How much copying may cost: bytes per copy, and a collector's time."""

    object_size: int = 512 << 20  # an object over this is refused (--max-object-size)
    map_size: int = 64 << 20  # a perf map is kept up to this, marked truncated (--max-map-size)
    kallsyms_size: int = 256 << 20  # real ones are 2-20 MiB
    share: float = 0.25  # of a collector's time spent copying, on average at most
    burst: float = 1.0  # seconds of copying at once (a checkpoint, the end of the run)
    slice: float = 0.1  # seconds one call copies before going back to the rings


class CopyBudget:
    """Copying time as a token bucket: ``share`` seconds per second flow
    in, up to ``burst``; each call may copy until the earlier of ``slice``
    and what is left. So copies never hold up ring draining for more than a
    slice, and the last checkpoint of a run (and with it ``-t``) for more
    than the burst, whatever files users put in the way."""

    def __init__(self, share: float, burst: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.share = share
        self.burst = burst
        self.clock = clock
        self.tokens = burst
        self._at = clock()

    def deadline(self, slice_: float) -> float | None:
        """Until when the caller may copy now; None if the budget is spent."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self._at) * self.share)
        self._at = now
        if self.tokens <= 0:
            return None
        return now + min(slice_, self.tokens)

    def spend(self, seconds: float) -> None:
        self.tokens -= seconds


class _Pending(NamedTuple):
    """A copy under way, and what to do with it once made."""

    job: CopyJob
    label: str  # the file as the messages name it
    pid: int | None
    done: Callable[[Stored], None]


DEFAULT_COPY_LIMITS = CopyLimits()


class ObjectCopier:
    """Makes and remembers the copy of each object a task set needs, and of
    the perf maps and kallsyms its sets name.

    Copies are bounded (``CopyLimits``) in size and in time: one that does
    not finish within its slice stays pending and goes on at the next call, or
    from ``work`` between drains of the rings; and by the room left in a
    bounded `.q` (``QDir.room``): one that does not fit is refused, and
    tried again RETRY_SECONDS later, when upkeep may have made room. Each
    refusal is said once, naming the file and the pid, on ``out`` (one for
    want of room in a run).
    """

    def __init__(self, qdir: QDir, symlink: bool = False,
                 limits: CopyLimits = DEFAULT_COPY_LIMITS, out: TextIO | None = None,
                 host: Host = LIVE) -> None:
        self.qdir = qdir
        self.host = host  # where tasks' files are opened
        self.symlink = symlink
        self.limits = limits
        self.out = out
        self.budget = CopyBudget(limits.share, limits.burst)
        self._done: dict[ObjectKey, Copy] = {}
        self._failed: dict[object, float] = {}  # key -> when to try again
        self._refused: set[ObjectKey] = set()
        self._jobs: dict[object, _Pending] = {}
        self._files: dict[str, Stored] = {}  # the last copy of a plain file, by path
        self._maps: dict[int, MapCopy] = {}  # the perf map copy, by Process.serial
        self._collections = 0  # rounds of upkeep that removed copies, when last looked
        self.notices = shared_notices()

    def known(self, obj: ObjectKey) -> Copy | None:
        self._recheck()
        return self._done.get(obj)

    def _recheck(self) -> None:
        """Forget the copies upkeep collected since the last look: one no
        set had named yet for a while (a set left unwritten, a full disk)
        would otherwise be named by the next set and be missing."""
        room = self.qdir.room
        if room is None or room.collections() == self._collections:
            return
        self._collections = room.collections()
        there = self.qdir.exists
        self._done = {k: c for k, c in self._done.items() if c.name is None or there(c.name)}
        self._maps = {k: m for k, m in self._maps.items() if there(m.stored.name)}
        self._files = {k: f for k, f in self._files.items() if there(f.name)}

    def _no_room(self, label: str, pid: int | None) -> None:
        """Say, once a run, that copies are left out for want of room."""
        if not self.notices.first("no room left in .q"):
            return
        limit = self.qdir.room.limit if self.qdir.room is not None else 0
        write_line(self.out or sys.stderr,
                   f"q-syscollect: not copying {label}" + (f" (pid {pid})" if pid else "") +
                   f": it would take {self.qdir.path} past --max-size {_size(limit)}; copies "
                   "that do not fit are left out (their symbols are missing)")

    def say(self, text: str) -> None:
        """Print ``text`` once per run (``Notices``)."""
        if not self.notices.first(text):
            return
        write_line(self.out or sys.stderr, f"q-syscollect: {text}")

    def copy(self, proc: Process, mapping: Mapping) -> Copy:
        """The copy for ``mapping``'s object: made now, or NO_COPY while it
        is under way (a later call or ``work`` goes on with it), refused or
        cannot be made.

        Raises OSError only for trouble writing `.q` (full disk...), so the
        caller can retry at the next checkpoint.
        """
        obj = mapping.obj
        done = self.known(obj)
        if done is not None:
            return done
        if obj.special or obj in self._refused or time.monotonic() < self._failed.get(obj, 0.0):
            return NO_COPY
        if obj not in self._jobs:
            fd = open_object(proc, mapping, self.host)
            if fd is None:
                self._fail(obj)
                return NO_COPY
            try:
                found = build_id(fd)
                # A symlink only where the path, walked from our root, leads
                # to this very file along a way only root can change: a
                # deleted binary, a memfd or another mount namespace's file
                # would leave a dangling or, worse, a wrong link.
                started = self.qdir.start_copy(fd, os.path.basename(obj.path),
                                               limit=self.limits.object_size,
                                               symlink_to=obj.path if self.symlink else None)
            except TooLarge:
                self._refused.add(obj)
                self.say(f"not copying {obj.path} (pid {proc.pid}): larger than "
                         f"--max-object-size {_size(self.limits.object_size)}; its symbols "
                         "will be missing")
                return NO_COPY
            except NoRoom:
                self._fail(obj)
                self._no_room(obj.path, proc.pid)
                return NO_COPY
            finally:
                os.close(fd)

            def finished(stored: Stored, obj: ObjectKey = obj, found: str | None = found) -> None:
                self._done[obj] = Copy(stored.name, found)
            if isinstance(started, Stored):
                finished(started)
                return self._done[obj]
            self._jobs[obj] = _Pending(started, obj.path, proc.pid, finished)
        self._advance(obj)
        return self._done.get(obj, NO_COPY)

    def copy_file(self, path: str, basename: str, limit: int,
                  wait: bool = False, private: bool = False) -> Stored | None:
        """The latest copy of a plain file that is not a mapping (kallsyms):
        made now (at once with ``wait``), or the one before while a new one
        is under way; None if there is none."""
        self._recheck()
        if path not in self._jobs:
            fd = self.host.open_plain(path)
            if fd is None:
                return self._files.get(path)
            try:
                started = self.qdir.start_copy(fd, basename, limit=limit, link=False,
                                               private=private)
            except TooLarge:
                self.say(f"not copying {path}: larger than {_size(limit)}")
                return self._files.get(path)
            except NoRoom:
                self._no_room(path, None)
                return self._files.get(path)
            finally:
                os.close(fd)

            def finished(stored: Stored, path: str = path) -> None:
                self._files[path] = stored
            if isinstance(started, Stored):
                finished(started)
                return started
            self._jobs[path] = _Pending(started, path, None, finished)
        self._advance(path, wait)
        return self._files.get(path)

    def perf_map(self, proc: Process, closing: bool = False) -> Stored | None:
        """The copy of the task's JIT symbol map (/tmp/perf-PID.map), if it
        has one that its own user wrote: the daemon runs as root and /tmp
        is everybody's. The owner is the one recorded when the task was
        first seen (and at exec), so the map of a task gone by now is still
        taken, but not one someone else put there after it. A map over
        --max-map-size keeps its first part, marked truncated, and is not
        copied again; one that changed is copied again only as
        ``perfmaps.recopy_due`` says (``closing``: the set is written for the
        last time), the copy before named meanwhile."""
        self._recheck()
        kept = self._maps.get(proc.serial)
        if (kept is not None and kept.stored.truncated) or proc.serial in self._jobs:
            if proc.serial in self._jobs:
                self._advance(proc.serial)
            return self._kept_map(proc)
        if not proc.ended:
            live = self.host.owner(proc.pid)
            proc.uid = live if live is not None else proc.uid
        label = f"/tmp/perf-{proc.pid}.map"
        candidates = [lambda: self.host.open_plain(label)]
        if not proc.ended:  # the task's own /tmp first (another mount namespace)
            candidates.insert(0, lambda: self.host.open_in_root(proc.pid, label))
        for candidate in candidates:
            fd = candidate()
            if fd is None:
                continue
            try:
                st = os.fstat(fd)
                uid = st.st_uid
                if proc.uid is None:
                    self.say(f"not using {label}: the owner of pid {proc.pid} was never seen")
                    return self._kept_map(proc)
                if uid != proc.uid:
                    self.say(f"not using {label}: owned by uid {uid}, not by uid {proc.uid} "
                             f"that ran pid {proc.pid}")
                    continue
                if left_before(st, proc.began):
                    self.say(f"not using {label}: last written before the program of pid "
                             f"{proc.pid} began (an earlier one left it)")
                    continue
                if not recopy_due(kept, st.st_size, time.monotonic(), closing):
                    return self._kept_map(proc)
                # Not linked: the file grows while the JIT runs.
                started = self.qdir.start_copy(fd, f"perf-{proc.pid}.map",
                                               limit=self.limits.map_size, truncate=True,
                                               link=False)
            except NoRoom:
                self._no_room(label, proc.pid)
                return self._kept_map(proc)
            finally:
                os.close(fd)

            def finished(stored: Stored, proc: Process = proc, label: str = label,
                         size: int = st.st_size) -> None:
                self._maps[proc.serial] = MapCopy(stored, size, time.monotonic())
                if stored.truncated:
                    self.say(f"{label} (pid {proc.pid}) is larger than --max-map-size "
                             f"{_size(self.limits.map_size)}: keeping its first "
                             f"{_size(self.limits.map_size)}, marked truncated")
            if isinstance(started, Stored):
                finished(started)
            else:
                self._jobs[proc.serial] = _Pending(started, label, proc.pid, finished)
                self._advance(proc.serial)
            return self._kept_map(proc)
        return self._kept_map(proc)

    def _kept_map(self, proc: Process) -> Stored | None:
        kept = self._maps.get(proc.serial)
        return kept.stored if kept is not None else None

    def _fail(self, key: object) -> None:
        """Try ``key`` again in RETRY_SECONDS: the objects of processes
        gone by then are forgotten, not kept for each short-lived binary."""
        now = time.monotonic()
        if len(self._failed) >= MAX_FAILED:
            self._failed = {k: t for k, t in self._failed.items() if t > now}
        self._failed[key] = now + RETRY_SECONDS

    def forget(self, proc: Process) -> None:
        """``proc`` ended and its sets are written: its perf map copy is
        named no more (a later process of the pid has another serial)."""
        self._maps.pop(proc.serial, None)
        pending = self._jobs.pop(proc.serial, None)
        if pending is not None:
            pending.job.close()

    def _advance(self, key: object, wait: bool = False) -> None:
        pending = self._jobs[key]
        deadline = None if wait else self.budget.deadline(self.limits.slice)
        if deadline is None and not wait:
            return
        began = time.monotonic()
        try:
            stored = pending.job.advance(deadline)
        except TooLarge:
            del self._jobs[key]
            if isinstance(key, ObjectKey):
                self._refused.add(key)
            self.say(f"not copying {pending.label}" +
                     (f" (pid {pending.pid})" if pending.pid else "") +
                     ": it grew larger than its limit while being copied")
            return
        except NoRoom:
            del self._jobs[key]
            self._fail(key)
            self._no_room(pending.label, pending.pid)
            return
        except QFormatError:  # the source cannot be read (any more): later
            del self._jobs[key]
            self._fail(key)
            return
        except OSError:
            del self._jobs[key]
            raise
        finally:
            self.budget.spend(time.monotonic() - began)
        if stored is not None:
            del self._jobs[key]
            pending.done(stored)

    @property
    def copying(self) -> bool:
        """Are copies under way (``work`` has more to do)?"""
        return bool(self._jobs)

    def work(self) -> None:
        """Go on with copies under way, as far as the budget allows (between
        drains of the rings). Trouble writing `.q` is left to the next
        checkpoint to say."""
        for key in list(self._jobs):
            if self.budget.deadline(self.limits.slice) is None:
                return
            try:
                self._advance(key)
            except OSError:
                pass

    def close(self) -> None:
        """Give up the copies still under way (the end of the run), saying so."""
        for pending in self._jobs.values():
            pending.job.close()
            self.say(f"gave up copying {pending.label}" +
                     (f" (pid {pending.pid})" if pending.pid else "") +
                     ": not finished when the run ended")
        self._jobs.clear()

