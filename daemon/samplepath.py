"""The sample path of one CPU's collector: each sample told kernel or
user, its process's set found, its stack unwound, its mappings noted,
its weight credited (cgroup, task counters) and tallied.

Kernel or user is told as perf does, never by an address constant:
frames after PERF_CONTEXT_KERNEL exist only for a sample taken in kernel
mode; without them the sample's cpumode says. The tally keeps the lowest
kernel address of each set (``SampleTally.note_kernel``: q:kernel-from).
"""

from __future__ import annotations

import time
from typing import Sequence

from .config import Options
from .decode import idle
from .decode.records import Sample, split_callchain
from .frames import UserFrames
from .frames.jittracker import JitTracker
from .kernel import abi
from .machine.cgroups import weigh
from .machine.host import Host
from .machine.tasks import Process
from .processes import Processes
from .sets.aggregate import CollectedSet, SetBook
from .sets.mappings import MappingNotes
from .sets.tally import NO_KERNEL

KERNEL_MODES = (abi.MISC_KERNEL, abi.MISC_GUEST_KERNEL)  # Sample.in_kernel, inlined
STATS_SECONDS = 1.0
_NO_FRAMES: tuple[int, ...] = ()
Recalled = tuple[CollectedSet, int, int, int, tuple[int, ...]]
"""(set, tid, cgroup, pc, user frames) of samples a drain counts alike."""


class SamplePath:
    """Where one collector's samples go: ``sample`` one by one, ``recalled``
    those a drain counted alike, ``idle`` the idle task's; ``samples``
    counts them all."""

    def __init__(self, opts: Options, book: SetBook, processes: Processes,
                 user_frames: UserFrames, mappings: MappingNotes, host: Host,
                 sampled_cgroups: bool, jit: JitTracker | None) -> None:
        self.kernel_only = opts.kernel_only
        self.stacks = opts.stacks
        self.book = book
        self._process = processes.process
        self.user_frames = user_frames
        self.mappings = mappings
        self.host = host
        # Without PERF_SAMPLE_CGROUP (a kernel before 5.7) a set's cgroup is
        # read from /proc/PID/cgroup at its first sample (so after each exec).
        self.sampled_cgroups = sampled_cgroups
        self.jit = jit
        self.samples = 0
        self.tick_samples = 0  # since the last take_tick

    def take_tick(self) -> int:
        """Samples since the last call (-v says them each second)."""
        n, self.tick_samples = self.tick_samples, 0
        return n

    def idle(self, seen: idle.IdleSeen) -> None:
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
        stacks = self.stacks
        for (ip, tid), (samples, weight) in seen.items():
            self.samples += samples
            self.tick_samples += samples
            ts.stats.idle_weight += weight
            tally.add_same(ip, weight, samples, (ip,) if stacks else None, tid, ip)

    def sample(self, s: Sample) -> None:
        """One sample, the handler of samples (routes.Handlers.sample)."""
        self.samples += 1
        self.tick_samples += 1
        weight = s.period or 1
        kernel: Sequence[int]
        user: Sequence[int]
        stack: tuple[int, ...] | None
        kernel, user = split_callchain(s.callchain) if s.callchain else (_NO_FRAMES, _NO_FRAMES)
        if kernel:
            low = min(kernel)
            if s.ip < low:
                low = s.ip
        else:
            low = s.ip if s.misc & abi.MISC_CPUMODE_MASK in KERNEL_MODES else NO_KERNEL
        in_kernel = low != NO_KERNEL
        if self.kernel_only or s.pid == 0:
            ts = self.book.kernel_set()
            ts.writer.dirty = True
            if s.pid == 0:  # with -k every pid lands here: keep the idle task's share apart
                ts.stats.idle_weight += weight
            # a sample without a callchain is a stack of its pc: .stack sums to .hist
            stack = (tuple(kernel) or (s.ip,)) if self.stacks else None
            ts.data.tally.add(s.ip, weight, stack, (), s.tid, low)
            return
        proc = self._process(s.pid, s.time)
        ts = self.book.process_set(proc)
        tally = ts.data.tally
        self._credit(proc, ts, s.cgroup, weight)
        user = self.user_frames.frames(proc, s, user)  # a tuple the unwinder may hand out again
        if not self.stacks:
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
                            self.stacks, tally.add)
        else:
            tally.add(s.ip, weight, stack, arcs, s.tid, low)

    def recalled(self, pending: dict[Recalled, list[int]]) -> None:
        """Samples a drain counted by (set, thread, cgroup, pc, user frames):
        [samples, weight] each, as ``sample`` would count them one by one.
        Each was taken in user mode without a callchain, and its frames are
        a walk the unwinder remembered, noted by its set already (so no
        mapping is met here), of a process whose set has its description."""
        for (ts, tid, cgroup, ip, user), (samples, weight) in pending.items():
            self.samples += samples
            self.tick_samples += samples
            ts.writer.dirty = True
            self._credit(ts.data.process, ts, cgroup, weight)  # type: ignore[arg-type]
            ts.data.tally.add_same(ip, weight, samples, user, tid)
        pending.clear()

    def stack_at(self, proc: Process, s: Sample) -> tuple[int, ...]:
        """The stack of a sample of ``proc`` (a switch's, unwound only now):
        its kernel and user frames, or its pc. The process's set, if it
        still has one, notes its kernel part and its mappings."""
        kernel, fp_user = split_callchain(s.callchain) if s.callchain else ([], [])
        user = self.user_frames.frames(proc, s, fp_user)
        stack = (tuple(kernel) + tuple(user)) or (s.ip,)
        ts = self.book.by_process.get(proc)
        if ts is not None:
            ts.data.tally.note_kernel(min(min(kernel), s.ip) if kernel else s.ip)
            self.mappings.note(proc, ts, user)
        return stack

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
        # the first look; none since (counters_last None) leaves the set's
        # counters unknown, not zero (SetStats.task_stats)
        ts.stats.counters_start, ts.stats.counters_last = self.host.task_counters(proc.pid), None
        ts.stats.counters_at = time.monotonic()
        if not self.sampled_cgroups:
            ts.stats.cgroup = self.host.task_cgroup(proc.pid)
