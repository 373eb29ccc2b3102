"""One CPU's collector: drain records, keep the task table, aggregate, checkpoint.

The loop knows nothing of syscalls: records come from an ``EventSource``
(the kernel, or a replay in tests), files go out through qformat.
"""

from __future__ import annotations

import operator
import sys
import time
from typing import Callable, Sequence, TextIO

from qtools.qformat import QDir

from . import drainloop
from .checkpoints import Checkpoints, WriteErrors
from .clock import SYSTEM, Clock
from .config import Options
from .drainloop import QUIET_RECORDS_PER_SECOND
from .decode.records import Lost, Sample, Switch, split_callchain
from .decode import idle
from .decode.drain import decode_drain, dispatch
from .decode.routes import Handlers
from .waits import Waits
from .frames import FramePointerFrames, UserFrames
from .frames.jitdump import JitTracker
from .kernel import abi
from .kernel.source import EventSource
from .machine import synthesize
from .machine.cgroups import CgroupTable, weigh
from .machine.host import Host
from .machine.tasks import Process, TaskTable
from .messages import Tally, say
from .processes import Processes
from .sets.aggregate import CollectedSet, SetBook
from .sets.checkpoint import RunInfo
from .sets.tally import NO_KERNEL
from .sets.kallsyms import KallsymsCopy
from .sets.mappings import MappingNotes
from .sets.objects import ObjectCopier
from .sets.starts import FunctionStarts

KERNEL_MODES = (abi.MISC_KERNEL, abi.MISC_GUEST_KERNEL)  # Sample.in_kernel, inlined
STATS_SECONDS = 1.0


class Flags:
    """Set from signal handlers, read by the loop."""

    __slots__ = ("stop", "checkpoint")

    def __init__(self) -> None:
        self.stop = False
        self.checkpoint = False


class CpuCollector:
    def __init__(self, opts: Options, run: RunInfo, source: EventSource, qdir: QDir,
                 copier: ObjectCopier, user_frames: UserFrames | None = None,
                 out: TextIO | None = None, kallsyms: KallsymsCopy | None = None,
                 clock: Clock = SYSTEM, host: Host | None = None) -> None:
        self.opts = opts
        self.source = source
        self.layout = source.layout
        self.copier = copier
        # the machine's processes, files and counters: the copier's unless told
        self.host = host if host is not None else copier.host
        self.user_frames = user_frames or FramePointerFrames()
        self.jit: JitTracker | None = getattr(self.user_frames, "jit", None)
        if self.jit is not None:
            self.jit.out = out or sys.stderr
            self.jit.host = self.host
        self.out = out or sys.stderr
        self.clock = clock
        self.book = SetBook(opts.cpu, opts.min_samples, opts.max_stacks, clock,
                            opts.min_stack_share)
        self.processes = Processes(self.host, self.book, copier, self.jit)
        self.table: TaskTable = self.processes.table
        self.write_errors = WriteErrors(self.out, qdir.path, opts.cpu)
        self.mappings = MappingNotes(self.table, self.host, copier, self.write_errors.report)
        self.cgroups = CgroupTable()
        # Without PERF_SAMPLE_CGROUP (a kernel before 5.7) a set's cgroup is
        # read from /proc/PID/cgroup at its first sample (so after each exec).
        self.sampled_cgroups = bool(self.layout.sample_type & abi.SAMPLE_CGROUP)
        self.waits = Waits(self, opts.off_cpu_min_ns)
        self.offcpu = self.waits.offcpu
        self.handlers = Handlers(
            sample=self.on_sample, mmap=self.table.on_mmap, comm=self.table.on_comm,
            task=self.table.on_task, lost=self.on_lost, switch=self.on_switch,
            cgroup=self.cgroups.on_cgroup, sched_switch=self.waits.on_sched_switch,
            sched_waking=self.waits.on_sched_waking)
        self._routes = dispatch(self.handlers)  # record class -> handler
        tables = getattr(self.user_frames, "tables", None)  # DWARF stacks' CFI
        starts = FunctionStarts(
            qdir, copier.limits.kallsyms_size, None if tables is None else tables.loaded,
            None if tables is None else tables.cfi_for) if opts.min_stack_share else None
        self.checkpoints = Checkpoints(opts, run, qdir, copier, self.book, self.processes,
                                       self.waits, self.cgroups, self.sampled_cgroups,
                                       self.host, self.jit, kallsyms, starts, clock, self.out,
                                       self.write_errors)
        self.samples = 0
        self.read_until = 0  # ns (CLOCK_MONOTONIC, as the records' times): see step
        self.lost = 0
        self.damaged = 0  # records that could not be decoded
        self.switches = 0  # SWITCH records (none yet: no event asks for them)
        self._tick_samples = 0
        self._tick_lost = 0
        self.busy_records = 0  # records of the last drain other than the idle task's samples
        self.sideband_seen = False  # ... and whether a few of them were not samples

    # ------------------------------------------------------------ tasks

    def seed(self, snapshot: synthesize.Snapshot | None = None) -> None:
        """Install the tasks that exist before collection starts, as records
        synthesized from the host: ``snapshot``, which the supervisor took
        once for all its collectors just before forking them, or the host
        as it is now."""
        if snapshot is None:
            snapshot = synthesize.snapshot(self.host, time.monotonic_ns(),
                                           with_cgroups=self.sampled_cgroups)
        if self.sampled_cgroups:
            for rec in snapshot.cgroups:
                self.cgroups.apply(rec)
        self.processes.seed(snapshot.processes)

    # ------------------------------------------------------------ records

    def step(self) -> int:
        """Drain what the source holds; returns the number of records.

        Each record goes to its kind's handler (the ``Handlers`` made in
        __init__; ``on_*`` here, of the task table, the cgroups' or the
        waits'), in time order; the idle
        task's samples, told apart undecoded, go to ``_idle`` first."""
        # Every record of an event before this moment is in a ring now: the
        # horizon up to which a checkpoint may count waits still going
        # (counting to the checkpoint's own time would count a wait whose
        # end is still unread past that end).
        self.read_until = time.monotonic_ns()
        raw = self.source.read()
        # most of an idle machine's samples, taken apart undecoded (_idle)
        decoded, idle_seen, damaged = decode_drain(raw, self.layout)
        self.damaged += damaged
        if idle_seen:
            self._idle(idle_seen)
        decoded.sort(key=_ORDER)  # by the time each was taken
        self.busy_records = len(decoded)
        self.sideband_seen = len(decoded) <= QUIET_RECORDS_PER_SECOND * 8 and \
            any(type(rec) is not Sample for rec in decoded)  # asked only of a quiet drain
        route = self._routes.get
        # A sample whose walk the unwinder remembers, of a set that has
        # described its process and noted that stack's mappings, is counted
        # by what the set keeps of it (``_recalled``); such samples are
        # handed over before the next record of any other kind, so each set
        # sees its samples in the order they came, alike ones at once.
        recall = self.user_frames.recall
        procs, by_process = self.table.procs, self.book.by_process
        quick = self.opts.stacks and not self.opts.kernel_only
        pending: dict[Recalled, list[int]] = {}
        for rec in decoded:
            if rec.__class__ is Sample:
                s: Sample = rec  # type: ignore[assignment]
                if quick and not s.callchain and not s.branches and s.pid \
                        and s.misc & abi.MISC_CPUMODE_MASK not in KERNEL_MODES:
                    proc = procs.get(s.pid)
                    ts = by_process.get(proc) if proc is not None else None
                    if proc is not None and ts is not None and ts.data.tally.samples:
                        user = recall(proc, s)
                        if user and ts.noted.holds(user, proc.maps_version):
                            key: Recalled = (ts, s.tid, s.cgroup, s.ip, user)
                            seen = pending.get(key)
                            if seen is None:
                                pending[key] = [1, s.period or 1]
                            else:
                                seen[0] += 1
                                seen[1] += s.period or 1
                            continue
                if pending:
                    self._recalled(pending)
                self._sample(s)
                continue
            if pending:
                self._recalled(pending)
            handler = route(type(rec))
            if handler is not None:
                handler(rec)
        if pending:
            self._recalled(pending)
        if self.offcpu.accrued:
            self.waits.take(None)  # now, while their processes' sets are still here
        self.source.release()
        return len(raw)

    def on_lost(self, rec: Lost) -> None:
        self.lost += rec.lost
        self._tick_lost += rec.lost
        self.book.lost = self.lost
        if self.opts.off_cpu:  # switch records among them: say so (q:switch-records-lost)
            for ts in self.book.open_sets():
                ts.data.tally.switch_lost += rec.lost

    def on_switch(self, rec: Switch) -> None:
        """A switch-in (its sample_id names the thread coming in) ends that
        thread's wait, whichever CPU it comes back on (--off-cpu)."""
        self.switches += 1
        if not rec.out and rec.sid is not None:
            self.offcpu.switch_in(rec.sid.tid, rec.sid.time)

    def _idle(self, seen: idle.IdleSeen) -> None:
        """The idle task's samples of one drain, by (pc, tid): into the
        kernel set by their pc alone, their weight its idle weight.

        Told from the record's fixed prefix (``decode/idle.py``),
        never decoded: their call chains (the same dozen frames of the idle
        loop, sample after sample) are not kept, so an idle CPU costs a
        probe and a dict update per sample. They touch no task and no
        other set, so taking them ahead of the drain's time order changes
        nothing."""
        ts = self.book.kernel_set()
        ts.writer.idle_dirty = True  # written with other changes, or now and then (Book.plan)
        tally = ts.data.tally
        stacks = self.opts.stacks
        for (ip, tid), (samples, weight) in seen.items():
            self.samples += samples
            self._tick_samples += samples
            ts.stats.idle_weight += weight
            tally.add_same(ip, weight, samples, (ip,) if stacks else None, tid, ip)

    def _sample(self, s: Sample) -> None:
        self.samples += 1
        self._tick_samples += 1
        weight = s.period or 1
        kernel: Sequence[int]
        user: Sequence[int]
        stack: tuple[int, ...] | None
        kernel, user = split_callchain(s.callchain) if s.callchain else (_NO_FRAMES, _NO_FRAMES)
        # Kernel or user told as perf does, never by an address constant:
        # frames after PERF_CONTEXT_KERNEL exist only for a sample taken in
        # kernel mode; without them the sample's cpumode says.
        if kernel:
            low = min(kernel)
            if s.ip < low:
                low = s.ip
        else:
            low = s.ip if s.misc & abi.MISC_CPUMODE_MASK in KERNEL_MODES else NO_KERNEL
        in_kernel = low != NO_KERNEL
        if self.opts.kernel_only or s.pid == 0:
            ts = self.book.kernel_set()
            ts.writer.dirty = True
            if s.pid == 0:  # with -k every pid lands here: keep the idle task's share apart
                ts.stats.idle_weight += weight
            # a sample without a callchain is a stack of its pc: .stack sums to .hist
            stack = (tuple(kernel) or (s.ip,)) if self.opts.stacks else None
            ts.data.tally.add(s.ip, weight, stack, (), s.tid, low)
            return
        proc = self.processes.process(s.pid, s.time)
        ts = self.book.process_set(proc)
        tally = ts.data.tally
        self._credit(proc, ts, s.cgroup, weight)
        user = self.user_frames.frames(proc, s, user)  # a tuple the unwinder may hand out again
        if not self.opts.stacks:
            stack = None
        elif proc.own:  # the collector's own: by its pc, as the idle task (docs/q-format.md 5.3)
            stack = (s.ip,)
        else:
            stack = (tuple(kernel) + tuple(user) if kernel else tuple(user)) or (s.ip,)
        arcs = [(b.source, b.target) for b in s.branches if b.is_call] if s.branches else []
        self.mappings.note(proc, ts, user if user or in_kernel else [s.ip], arcs)
        if self.jit is not None and user and self.jit.has_dump(proc):
            tally.note_kernel(low)
            tally.count_thread(s.tid, weight)  # now: the JIT tracker may hold the sample
            # by thread with its addresses as sampled (JIT code unnamed there)
            tally.add_thread("cpu", s.tid, stack or (s.ip,), weight)
            self.jit.sample(proc, s.time, s.ip, weight, list(kernel), list(user), arcs,
                            self.opts.stacks, tally.add)
        else:
            tally.add(s.ip, weight, stack, arcs, s.tid, low)

    on_sample = _sample  # the handler of samples (routes.Handlers.sample)

    def _recalled(self, pending: dict[Recalled, list[int]]) -> None:
        """Samples step counted by (set, thread, cgroup, pc, user frames):
        [samples, weight] each, as ``_sample`` would count them one by one.
        Each was taken in user mode without a callchain, and its frames are
        a walk the unwinder remembered, noted by its set already (so no
        mapping is met here), of a process whose set has its description."""
        for (ts, tid, cgroup, ip, user), (samples, weight) in pending.items():
            self.samples += samples
            self._tick_samples += samples
            ts.writer.dirty = True
            self._credit(ts.data.process, ts, cgroup, weight)  # type: ignore[arg-type]
            ts.data.tally.add_same(ip, weight, samples, user, tid)
        pending.clear()

    def _credit(self, proc: Process, ts: CollectedSet, cgroup: int, weight: int) -> None:
        """What a process set's samples add besides their stacks: their
        cgroup's weight; the set's description at its first sample, its
        task's counters now and then (it may end any time: keep up)."""
        stats = ts.stats
        if cgroup:
            weights = stats.cgroup_weights
            if cgroup in weights:  # the common case, inlined
                weights[cgroup] += weight
            else:
                weigh(weights, cgroup, weight)
        if ts.data.tally.samples == 0:
            self._describe(proc, ts)
        elif stats.counters_start is not None and not proc.ended:
            now = time.monotonic()
            if now - stats.counters_at >= STATS_SECONDS:
                stats.counters_at = now
                stats.counters_last = self.host.task_counters(proc.pid) or stats.counters_last

    def _describe(self, proc: Process, ts: CollectedSet) -> None:
        if proc.ended:
            return
        if proc.cmdline is None:
            proc.cmdline = self.host.cmdline(proc.pid)
            proc.exe = proc.exe or self.host.exe(proc.pid)
        ts.stats.counters_start = ts.stats.counters_last = self.host.task_counters(proc.pid)
        ts.stats.counters_at = time.monotonic()
        if not self.sampled_cgroups:
            ts.stats.cgroup = self.host.task_cgroup(proc.pid)

    # ------------------------------------------------------------ checkpoints

    def checkpoint(self, final: bool = False, complete: bool = False) -> bool:
        """Write every changed set; True if everything reached the disk
        (``Checkpoints.write``)."""
        return self.checkpoints.write(self.read_until, final, complete)

    def rotate(self) -> bool:
        """Close this time slice: write every set as closed, start new ones."""
        return self.checkpoints.rotate(self.read_until)

    def say(self, text: str) -> None:
        say(self.out, text)

    def tally(self) -> Tally:
        return Tally(self.samples, self.lost, self.damaged, self.checkpoints.sets_created,
                     self.checkpoints.given_up)

    def say_tick(self, seconds: float) -> None:
        """-v: what the last ``seconds`` collected."""
        damaged = f"; {self.damaged} damaged records so far" if self.damaged else ""
        self.say(f"collected {self._tick_samples} samples ({self._tick_lost} lost) "
                 f"in {seconds:.5f} seconds{damaged}")
        self._tick_samples = self._tick_lost = 0

    # ------------------------------------------------------------ in time (drainloop.py)

    def run(self, flags: Flags, clock: Callable[[], float] = time.monotonic,
            drain_interval: float = 0.5, heartbeat: Callable[[], None] | None = None,
            quiet_interval: float | None = None) -> bool:
        """Collect until ``flags.stop``; then write a final checkpoint
        (``drainloop.run``)."""
        return drainloop.run(self, flags, clock, drain_interval, heartbeat, quiet_interval)

    def start_counters(self) -> None:
        """The CPU's counters as collection starts (with ``cpu_stats``)."""
        self.checkpoints.start_counters()

    def finish(self) -> bool:
        """The last drain and the final checkpoint; True if all was written."""
        self.step()
        self.write_errors.last_chance = True
        ok = self.checkpoint(final=True)
        self.checkpoints.give_up_unwritten()  # the last chance to write them has passed
        return ok


_ORDER = operator.attrgetter("order")
_NO_FRAMES: tuple[int, ...] = ()
Recalled = tuple[CollectedSet, int, int, int, tuple[int, ...]]
"""(set, tid, cgroup, pc, user frames) of samples step counts alike."""
