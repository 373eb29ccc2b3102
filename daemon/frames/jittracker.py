"""JIT code seen whole: jitdump files and CPython's perf trampolines.

The collector's side of JIT code, per process:

- a jitdump (``jit-PID.dump``, found because the JIT mmaps it executable,
  so the task's maps name it) is read incrementally, bounded (``limit``
  bytes kept, whole records only) and only when its owner, checked on the
  opened descriptor, is the task's user. Its code placements give names
  (through the `.q` copy) and, where the JIT wrote unwinding information,
  CFI for the unwinder. It is read where samples need it, inside the
  sample handler, so reading has a time budget of its own (a token
  bucket, ``CopyBudget``): what does not fit waits for a later drain;
- CPython's fixed trampoline stub (3.12 ``-X perf``, and 3.13's trampolines
  before their jitdump records arrive) is recognized from the bytes read
  out of the process at the address, never from a name.

Why samples are resolved here, at sample time, into synthetic addresses
(qformat.jitdump): `.stack` and `.hist` carry no time, and JIT addresses are
reused, so only the collector, which knows each sample's time, can tell
which of two code loads at one address a sample hit. A synthetic address
names one placement (the ordinal of its record in the kept dump) and the
offset into it; the viewer needs the `.q` copy and nothing else.

CPython buffers its dump through stdio (4 KiB in 3.13.0), so the records of
a program's hot functions often reach the file only when the buffer fills
or the program exits. A sample whose JIT frames are not yet known is held
(``MAX_PENDING`` per collector, with its time), resolved when the dump has
caught up (every checkpoint, and when the process ends), and written with
its raw addresses if it never does (the viewer then names a raw address
after the code loaded there last). Unwinding cannot wait (the stack copy
is gone after the sample): until a placement's CFI is known, the stub rule
(bytes checked in the live process) carries the walk through CPython's
trampolines.
"""

from __future__ import annotations

import os
import sys
import time
import weakref
from typing import TYPE_CHECKING, Callable, NamedTuple, TextIO, TypeGuard

from qtools.qformat import QDir
from qtools.qformat.info import JitdumpRef
from qtools.qformat.jit.jitaddr import synthetic_address

from ..machine.host import LIVE, Host
from ..messages import write_line
from ..sets.objects import CopyBudget
from .jitread import (DEFAULT_LIMIT, DumpReader, is_dump_path, loads, open_dump, said_once,
                      task_owner)
from ..machine.tasks import Process
from ..unwind.jitcfi import MAX_STUB, TEXT_OFFSET, code_cfi, match_stub
from ..unwind.objcfi import ObjectCFI
from ..unwind.regs import ArchRegs

if TYPE_CHECKING:  # the decoder itself is imported only for a process with a dump
    from qtools.qformat.jit.jitdump import Placement, UnwindingInfo

REFRESH_SECONDS = 0.25
# Time reading jitdumps, which runs inside the sample handler: a share of
# the collector's time on average, and at most a burst in one drain (a
# ring holds about 60 ms of samples with 16 KiB stacks at 997 Hz).
READ_SHARE = 0.1
READ_BURST = 0.05
MAX_PENDING = 20000  # samples held for their JIT records, per collector
MAX_STUB_CACHE = 1 << 16
MAX_ENDED_REFS = 4096


class _Pending(NamedTuple):
    """A sample held until its process's JIT records up to its time are read."""

    proc: Process
    add: Callable[[int, int, tuple[int, ...] | None, list[tuple[int, int]]], None]
    time: int
    ip_is_user: bool
    ip: int
    weight: int
    kernel: list[int]
    user: list[int]
    arcs: list[tuple[int, int]]
    stacks: bool


class JitProcess:
    """What the tracker knows about one process's JIT code."""

    def __init__(self) -> None:
        self.maps_version = -1
        self.dump: DumpReader | None = None
        self.version = 0
        self.stubs: dict[int, tuple[ObjectCFI, int] | None] = {}
        #: executable mappings without a file (where JIT code lives), from the maps
        self.ranges: tuple[tuple[int, int], ...] = ()
        self.last_read = 0.0
        self.read_until = 0  # CLOCK_MONOTONIC ns when the last read began: records before are in
        self.pending = 0
        self.refused: set[str] = set()

    def close(self) -> None:
        if self.dump is not None:
            self.dump.close()


class JitTracker:
    """JIT code per process: lookups for the unwinder, resolution of sample
    frames into synthetic addresses, and the `.q` copy of each dump."""

    def __init__(self, arch: ArchRegs, limit: int = DEFAULT_LIMIT,
                 out: TextIO | None = None, qdir: QDir | None = None,
                 host: Host = LIVE, clock: Callable[[], float] = time.monotonic) -> None:
        self.arch = arch
        self.host = host  # the collector sets its own
        self.limit = limit
        self.clock = clock
        self.budget = CopyBudget(READ_SHARE, READ_BURST, clock)  # shared by every dump read
        self.out = out or sys.stderr
        self.qdir = qdir
        #: the last copy of each ended process's dump, for the sets its samples are folded into
        self._ended_refs: dict[int, JitdumpRef] = {}
        self._pending: list[_Pending] = []

    # ------------------------------------------------------------ per process

    def state(self, proc: Process) -> JitProcess:
        st = proc.jit
        if st is None:
            st = proc.jit = JitProcess()
            weakref.finalize(proc, st.close)
        if st.maps_version != proc.maps_version:
            st.maps_version = proc.maps_version
            st.stubs.clear()
            st.ranges = tuple((m.start, m.end) for m in proc.maps
                              if m.obj.special and m.obj.path != "[vdso]")
            if st.dump is None and not proc.ended:
                self._discover(proc, st)
        return st

    def _discover(self, proc: Process, st: JitProcess) -> None:
        dumps = [m for m in proc.maps if is_dump_path(m.obj.path)]
        if not dumps:
            return
        mine = [m for m in dumps if m.obj.path.endswith(f"jit-{proc.pid}.dump")]
        m = (mine or dumps)[0]
        if m.obj.path in st.refused:
            return
        fd, why = open_dump(proc, m, task_owner(proc), self.host)
        if fd is None:
            if why:
                st.refused.add(m.obj.path)
                self._say(proc, m.obj.path, why)
            return
        st.dump = DumpReader(m.obj.path, fd, self.limit, os.fstat(fd).st_mode & 0o777)
        self._refresh(proc, st, force=True)

    def _refresh(self, proc: Process, st: JitProcess, force: bool = False) -> None:
        """Read what the dump gained, as far as the budget allows now."""
        dump = st.dump
        if dump is None or dump.stopped:
            return
        now = self.clock()
        if not force and now - st.last_read < REFRESH_SECONDS:
            return
        deadline = self.budget.deadline(READ_BURST)
        if deadline is None:  # spent: a later drain goes on
            return
        st.last_read = now
        began = time.monotonic_ns()
        try:
            added = dump.read_more(deadline, self.clock)
        finally:
            self.budget.spend(self.clock() - now)
        if not dump.behind:
            st.read_until = began
        if added:
            st.version += 1
        if dump.problem:
            self._say(proc, dump.path, dump.problem)

    def _say(self, proc: Process, path: str, text: str) -> None:
        line = f"q-syscollect: jitdump {path} (pid {proc.pid}): {text}"
        if said_once(line):
            write_line(self.out, line)

    def has_dump(self, proc: Process) -> bool:
        st = proc.jit  # asked for every sample: the state itself when it is current
        if not _current(st, proc):
            st = self.state(proc)
        return st.dump is not None

    @staticmethod
    def without_dump(proc: Process) -> bool:
        """``not has_dump(proc)``, known without reading anything: the
        process's JIT state is current for its maps and names no jitdump."""
        st = proc.jit
        return _current(st, proc) and st.dump is None

    # ------------------------------------------------------------ unwinding

    def find(self, proc: Process, ip: int,
             mapped: bool) -> tuple[ObjectCFI | None, int, int] | None:
        """(cfi, start, TEXT_OFFSET) for JIT code at ``ip``, or None. ``mapped``:
        ``ip`` lies in an executable mapping without a file (where JIT code is)."""
        st = self.state(proc)
        p = self._latest(proc, st, ip)
        if p is not None and p.unwind is not None:
            return self._cfi(p.unwind, p.size), p.addr, TEXT_OFFSET
        if mapped:
            stub = self._stub(proc, st, ip)
            if stub is not None:
                return stub[0], stub[1], TEXT_OFFSET
        if p is not None:
            return None, p.addr, TEXT_OFFSET
        return None

    def _latest(self, proc: Process, st: JitProcess, ip: int) -> Placement | None:
        if st.dump is None:
            return None
        p = st.dump.index.at(ip)
        if p is None:
            self._refresh(proc, st)
            p = st.dump.index.at(ip)
        return p

    def _cfi(self, unwind: UnwindingInfo, size: int) -> ObjectCFI:
        return code_cfi(self.arch, size, unwind.eh_frame, unwind.eh_frame_hdr)

    def _stub(self, proc: Process, st: JitProcess, ip: int) -> tuple[ObjectCFI, int] | None:
        if ip in st.stubs:
            return st.stubs[ip]
        found = None
        start = max(0, ip - MAX_STUB)
        window = None if proc.ended else \
            self.host.read_memory(proc.pid, start, ip + MAX_STUB - start)
        if window:
            hit = match_stub(self.arch, window, start, ip)
            if hit is not None:
                found = (hit[0].cfi(), hit[1])
        if len(st.stubs) >= MAX_STUB_CACHE:
            st.stubs.clear()
        st.stubs[ip] = found
        return found

    # ------------------------------------------------------------ samples

    def sample(self, proc: Process, time_: int, ip: int, weight: int, kernel: list[int],
               user: list[int], arcs: list[tuple[int, int]], stacks: bool,
               add: Callable[[int, int, tuple[int, ...] | None, list[tuple[int, int]]], None]
               ) -> None:
        """Add one sample through ``add(ip, weight, stack, arcs)``, its JIT
        frames replaced by synthetic addresses; held while one is unknown."""
        st = self.state(proc)
        item = _Pending(proc, add, time_, not kernel, ip, weight, kernel, user, arcs, stacks)
        ranges = st.ranges
        if st.dump is None or not any(lo <= a < hi for a in (user if stacks else user[:1])
                                      for lo, hi in ranges):
            self._emit(item, None)
            return
        if time_ >= st.read_until:
            # code loaded at this address since the last read would replace what we know
            self._refresh(proc, st, force=True)
        if self._try(item, st):
            return
        if len(self._pending) >= MAX_PENDING:
            self._emit(self._pending.pop(0), None)
        self._pending.append(item)
        st.pending += 1

    def _try(self, item: _Pending, st: JitProcess) -> bool:
        frames = self._resolve(item, st, final=_given_up(st))
        if frames is None:
            return False
        self._emit(item, frames)
        return True

    def _resolve(self, item: _Pending, st: JitProcess, final: bool) -> list[int] | None:
        """The user frames with JIT addresses made synthetic; None while an
        address in JIT memory has no placement yet (unless ``final``)."""
        dump = st.dump
        if dump is None:
            return item.user
        index = dump.index
        ranges = st.ranges
        out = []
        for i, a in enumerate(item.user if item.stacks else item.user[:1]):
            if not any(lo <= a < hi for lo, hi in ranges):
                out.append(a)  # in a file's mapping: not JIT code
                continue
            key = a if i == 0 else a - 1  # a return address belongs to the call before it
            p = index.at(key, item.time)
            if p is None:
                if not final:
                    return None
                out.append(a)
            else:
                out.append(synthetic_address(p.ordinal, a - p.addr))
        if not item.stacks:
            out += item.user[1:]
        return out

    def _emit(self, item: _Pending, user: list[int] | None) -> None:
        user = item.user if user is None else user
        ip = user[0] if item.ip_is_user and user else item.ip
        stack = tuple(item.kernel + user) if item.stacks and (item.kernel or user) else None
        item.add(ip, item.weight, stack, item.arcs)

    def resolve_pending(self, final_for: Process | None = None, final_all: bool = False) -> None:
        """Re-read the dumps of held samples and add those now resolvable;
        those of ``final_for`` (an ended process), of any ended process, or
        with ``final_all`` (the end of a run or time slice) in any case."""
        if not self._pending:
            return
        keep: list[_Pending] = []
        read: set[int] = set()
        for item in self._pending:
            st = self.state(item.proc)
            if id(st) not in read:
                read.add(id(st))
                self._refresh(item.proc, st, force=True)
            final = final_all or item.proc is final_for or item.proc.ended or _given_up(st)
            frames = self._resolve(item, st, final)
            if frames is None:
                keep.append(item)
            else:
                st.pending -= 1
                self._emit(item, frames)
        self._pending = keep

    def process_ended(self, proc: Process) -> None:
        st = proc.jit
        if st is None:
            return
        self.resolve_pending(final_for=proc)
        if st.dump is not None and self.qdir is not None:
            self._refresh(proc, st, force=True)
            dump = st.dump
            if not dump.stopped and (dump.behind or dump.unread()):  # never read: it closes now
                dump.stop(f"not read past offset {dump.parser.offset} when its process ended "
                          "(the collector's time for jitdumps was spent); keeping "
                          f"{loads(len(dump.placements.items))} before it")
                self._say(proc, dump.path, dump.problem or "")
            if dump.parser.pending and not dump.stopped:  # the writer died mid-record
                dump.stop(f"ends inside a record at offset {dump.parser.offset}; keeping "
                           f"{loads(len(dump.placements.items))} before it")
                self._say(proc, dump.path, dump.problem or "")
            try:
                ref = self.copy(proc, self.qdir)
            except OSError:
                ref = None  # .q is full: the checkpoint says so
            if ref is not None:
                if len(self._ended_refs) >= MAX_ENDED_REFS:
                    self._ended_refs.pop(next(iter(self._ended_refs)))
                self._ended_refs[proc.pid] = ref
            st.close()

    def refs(self, proc: Process | None, pids: list[int], qdir: QDir) -> list[JitdumpRef]:
        """The ``q:jitdump`` forms of a set: its process's, or those of the
        ended processes folded into it."""
        if proc is not None:
            ref = self.copy(proc, qdir)
            return [ref] if ref is not None else []
        return [self._ended_refs[p] for p in pids if p in self._ended_refs]

    # ------------------------------------------------------------ the .q copy

    def copy(self, proc: Process, qdir: QDir) -> JitdumpRef | None:
        """Store what is kept of the process's dump (when it changed) and
        describe it for ``q:jitdump``. Raises OSError for trouble writing."""
        st = proc.jit
        dump = st.dump if st is not None else None
        if dump is None or not dump.kept:
            return None
        if dump.copied is None or dump.copied[0] != len(dump.kept):
            fd = os.memfd_create("jitdump", os.MFD_CLOEXEC)
            try:
                os.fchmod(fd, dump.mode)
                view = memoryview(dump.kept)
                while view:
                    view = view[os.write(fd, view):]
                name = qdir.store_object(fd, f"jit-{proc.pid}.dump")
            finally:
                os.close(fd)
            dump.copied = (len(dump.kept), name)
        return JitdumpRef(file=dump.copied[1], pid=proc.pid, path=dump.path,
                          code_loads=len(dump.placements.items),
                          truncated=1 if dump.problem or dump.behind else None)


def _given_up(st: JitProcess) -> bool:
    """Reading the process's dump stopped: no record its samples wait for will come."""
    return st.dump is not None and st.dump.stopped


def _current(st: JitProcess | None, proc: Process) -> TypeGuard[JitProcess]:
    """``st`` was found for ``proc``'s maps as they are now."""
    return st is not None and st.maps_version == proc.maps_version
