"""User stacks through DWARF CFI: the collector's side of the unwinder.

Each sample's copied user stack (REGS_USER + STACK_USER) is unwound at once,
so only addresses reach `.stack`. Unwind tables are loaded per object
content, read into memory (never mapped: see unwind/filebytes.py) from the
object's copy in `.q`, or from the task's own file while the copy is under
way or refused, and shared by every process that maps it; each process
keeps its own rule cache, dropped when its maps change.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from qtools.qformat import QDir

from ..decode.records import Sample
from ..machine.tasks import Mapping, ObjectKey, Process
from ..sets.objects import ObjectCopier, open_object
from ..unwind import ObjectCFI, Unwinder
from ..unwind.regs import sample_positions
from ..unwind.rules import Rule
from ..unwind.procspace import new_serial
from .jittracker import JitTracker

class ProcessSpace:
    """The unwinder's view of one process (the AddressSpace protocol)."""

    __slots__ = ("proc", "tables", "rule_cache", "maps_version", "jit_version", "jit", "serial",
                 "own")

    def __init__(self, proc: Process, tables: CfiTables, jit: JitTracker | None = None,
                 version: tuple[int, int] | None = None) -> None:
        self.proc = proc
        self.tables = tables
        self.rule_cache: dict[int, Rule] = {}
        self.serial = new_serial()  # a new space for new maps: never cleared
        self.own = False  # one of the collector's own processes: not unwound
        # what it was made for: the process's maps and JIT code as they were then
        self.maps_version, self.jit_version = version if version is not None else \
            (proc.maps_version, 0)
        self.jit = jit

    def current(self, proc: Process) -> bool:
        """Made for ``proc``'s maps and JIT code as they are now."""
        jit = proc.jit
        return self.maps_version == proc.maps_version and jit is not None \
            and self.jit_version == jit.version

    def find(self, ip: int) -> tuple[ObjectCFI | None, int, int] | None:
        m = self.proc.maps.find(ip)
        if m is not None and (not m.obj.special or m.obj.path == "[vdso]"):
            return self.tables.cfi_for(self.proc, m), m.start, m.pgoff
        # JIT code: a jitdump placement, or a CPython trampoline (checked by its bytes)
        hit = self.jit.find(self.proc, ip, m is not None) if self.jit is not None else None
        if hit is not None:
            return hit
        if m is None:
            return None
        return self.tables.cfi_for(self.proc, m), m.start, m.pgoff


MAX_CFI_OBJECTS = 1024
"""Objects whose unwind tables are kept loaded (each the call-frame
sections read from the object and the rows parsed so far). A machine that
builds and runs new binaries all day maps a new object with each; past the
bound the first loaded quarter is let go (loaded again if still in use),
so the collector's memory stays bounded."""

MAX_CFI_BYTES = 256 << 20
"""Bytes of call-frame sections kept for those objects (libLLVM's are
5.7 MiB, most libraries' a few KiB): past it the first loaded are let go
until a quarter of it is free, so objects made with huge sections cannot
fill the collector's memory."""


class CfiTables:
    """ObjectCFI per object content, made on first use; at most ``limit``."""

    def __init__(self, qdir: QDir, copier: ObjectCopier, vdso: bytes | None,
                 limit: int = MAX_CFI_OBJECTS, byte_limit: int = MAX_CFI_BYTES) -> None:
        self.qdir = qdir
        self.copier = copier
        self.vdso = ObjectCFI.from_bytes(vdso) if vdso else None
        self.limit = max(4, limit)
        self.byte_limit = byte_limit
        self.kept = 0  # bytes read for the tables loaded
        self._tables: dict[ObjectKey, ObjectCFI | None] = {}

    def __len__(self) -> int:
        return len(self._tables)

    def loaded(self, obj: ObjectKey) -> ObjectCFI | None:
        """The tables of ``obj`` if they were made (None: not, or none)."""
        return self._tables.get(obj)

    def cfi_for(self, proc: Process, m: Mapping) -> ObjectCFI | None:
        obj = m.obj
        if obj in self._tables:
            return self._tables[obj]
        if obj.path == "[vdso]":
            cfi = self.vdso
        elif obj.special:
            cfi = None  # JIT or anonymous code: frame pointers through it
        else:
            cfi = self._load(proc, m)
        if len(self._tables) >= self.limit or self.kept > self.byte_limit:
            self._let_go()
        self._tables[obj] = cfi
        self.kept += cfi.bytes_read if cfi is not None else 0
        return cfi

    def _let_go(self) -> None:
        """Let the first loaded tables go, down to three quarters of both
        limits. Dropped, not closed: an unwind under way may still hold one."""
        count_goal = self.limit - self.limit // 4
        byte_goal = self.byte_limit - self.byte_limit // 4
        for key in list(self._tables):
            if len(self._tables) <= count_goal and self.kept <= byte_goal:
                return
            cfi = self._tables.pop(key)
            self.kept -= cfi.bytes_read if cfi is not None else 0

    def _load(self, proc: Process, m: Mapping) -> ObjectCFI | None:
        try:
            copy = self.copier.copy(proc, m)
        except OSError:
            copy = None  # .q is full: read the task's own mapping instead
        fd = None
        if copy is not None and copy.name:
            try:
                fd = self.qdir.open_read(copy.name)
            except OSError:
                fd = None
        if fd is None:
            fd = open_object(proc, m, self.copier.host)
        if fd is None:
            return None
        try:
            return ObjectCFI.from_fd(fd)
        finally:
            os.close(fd)


class DwarfFrames:
    """User frames by DWARF CFI (the collector's UserFrames seam)."""

    name = "dwarf"

    def __init__(self, qdir: QDir, copier: ObjectCopier, vdso: bytes | None,
                 own_pids: set[int], supervisor: int, arch: str | None = None,
                 own_cmdline: list[str] | None = None) -> None:
        self.unwinder = Unwinder(arch or os.uname().machine)
        regs = self.unwinder.arch
        self._ip_pos = sample_positions(regs, self.unwinder.regs_mask)[regs.ip]
        self.tables = CfiTables(qdir, copier, vdso)
        #: JIT code per process (jitdump files, CPython trampolines)
        self.jit = JitTracker(regs, qdir=qdir)
        self.own_pids = own_pids
        self.supervisor = supervisor
        #: the supervisor's command line, which its forks keep until they exec
        self.own_cmdline = own_cmdline

    @property
    def regs_mask(self) -> int:
        return self.unwinder.regs_mask

    def frames(self, proc: Process, sample: Sample, fp_user: Sequence[int]) -> Sequence[int]:
        regs = sample.regs
        if not regs:
            return fp_user  # a kernel thread, or idle: no user context
        space = proc.unwind
        if space.__class__ is not ProcessSpace or not space.current(proc):
            jit = self.jit.state(proc)  # finds a jitdump the new maps name
            space = proc.unwind = ProcessSpace(proc, self.tables, self.jit,
                                               (proc.maps_version, jit.version))
            # The collector's own processes (the supervisor, and what it forked
            # without exec: collectors, which a collector forked before its
            # siblings meets as processes with the supervisor's command line;
            # the command it runs execs one of its own): their deep interpreter
            # stacks are not what anybody profiles, and cost most.
            space.own = proc.own = proc.pid in self.own_pids or (
                proc.ppid == self.supervisor and self.own_cmdline is not None
                and proc.cmdline == self.own_cmdline)
        if space.own:
            return (regs[self._ip_pos],)
        return self.unwinder.unwind(space, regs, sample.stack).frames

    def recall(self, proc: Process, sample: Sample) -> tuple[int, ...] | None:
        """``frames`` of a sample whose walk the unwinder remembers, or None:
        then ``frames`` must take it (no walk remembered for it, a space to
        make first, the collector's own process, or one with a jitdump,
        whose samples the JIT tracker may hold)."""
        space = proc.unwind
        if space.__class__ is not ProcessSpace or not space.current(proc) or space.own \
                or not self.jit.without_dump(proc):
            return None
        result = self.unwinder.recall(space, sample.regs, sample.stack)
        return None if result is None else result.frames
