"""Per-CPU aggregation of samples into task sets.

Every process incarnation collects its own ``SampleTally`` (address
histogram, stack weights, call arcs). At a checkpoint a tally with enough
samples becomes a task set of its own (``PROG-pidN-cpuN``); one that ended with few
samples is folded into its program's aggregate set (``PROG-cpuN``), so a
fork-heavy load cannot create unbounded files. Memory follows the code
footprint: a set is forgotten once its final state has been written.

A ``CollectedSet`` is three small parts: what the set is (``SetData``: name,
tally of samples by address, stack, arc and thread, process, pids, canonical
layout), how it is written
(``SetWriter``: version, dirty, promoted, finished, fold) and what is
counted about it (``SetStats``: times, lost records, counters, idle weight).

Different processes of one program map its objects at different addresses
(ASLR), so folding rebases every address onto one canonical layout per
aggregate set (``CanonicalLayout``).

Distinct stacks per set and slice are capped (``MAX_STACKS``): any user can
make millions, and each costs memory until the slice ends. Stacks beyond
the cap are folded into one remainder weight, written as the `.stack` line
``WEIGHT -``; the histogram keeps every sample exactly.

Times come from ``clock.Clock``: a set's end is its start plus monotonic
time elapsed, so a stepped wall clock cannot make it end before it began.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Callable, NamedTuple

from qtools.qformat import SetName, sanitize_prog

from ..clock import SYSTEM, Clock, Stamp
from ..machine.cgroups import weigh
from ..machine.procfs import counters_delta
from ..machine.tasks import Mapping, ObjectKey, Process
from .tally import MAX_STACKS, SampleTally

if TYPE_CHECKING:
    from .starts import StartOf

SYNTHETIC_BASE = 0x4000_0000_0000_0000  # never a user or kernel address
PROMOTE_WAIT_NS = 1_000_000_000
"""A task with this much off-CPU or wait time gets a set of its own, as one
with --min-samples samples does: a thread that mostly sleeps is worth seeing."""
MAX_PIDS = 256
"""Pids an aggregate lists (q:pids); more are counted. Each is about 6 bytes
of its `.info`, rewritten at every checkpoint: at 1,024 the lists of a
fork-heavy machine's aggregates were a sixth of its `.q`'s growth over its
first ten minutes, and told no more than which program a pid ran."""
# An idle CPU's kernel set is written at every third checkpoint: the
# upkeep takes a set not rewritten for three intervals plus a minute (plus
# the rotation interval) as abandoned (Config.stale_after).
IDLE_CHECKPOINTS = 3
MAX_UNWRITTEN = 128  # ended tasks kept apart while .q cannot be written; then folded
MAX_AGGREGATES = 1024
OTHER_PROGRAMS = "q-other-programs"
"""Aggregate sets per CPU and slice, one per program name: anyone can run a
program under a million names (a symlink each). Tasks of programs past the
bound fold into the set named OTHER_PROGRAMS, which no command name can
sanitize to (16 characters, none of them a trailing ``_``)."""
MAX_FOLDED_THREADS = 64
"""Threads an aggregate set's `.threads` names apart; those of any further
folded tasks share TID 0 (their stacks kept), so a program run thousands of
times costs memory for its code, not for each run."""


class CanonicalLayout:
    """One address layout for the objects of many processes of a program.

    An object keeps the addresses of the first process that brought it in;
    later processes' addresses inside it are moved there by file offset. If
    that place is taken, the object gets a range above ``SYNTHETIC_BASE``.
    """

    def __init__(self) -> None:
        self.by_object: dict[ObjectKey, list[Mapping]] = defaultdict(list)
        self.ranges: list[Mapping] = []
        self._next = SYNTHETIC_BASE

    def translate(self, address: int, proc: Process) -> int:
        """``address`` of ``proc`` in this layout: a user address (the caller
        knows which are), or one in no mapping, which stays as it is."""
        m = proc.maps.find(address)
        if m is None:
            return address
        offset = address - m.start + m.pgoff
        for c in self.by_object[m.obj]:
            if c.pgoff <= offset < c.pgoff + (c.end - c.start):
                return c.start + offset - c.pgoff
        if not any(r.start < m.end and m.start < r.end for r in self.ranges):
            placed = m
        else:
            placed = Mapping(self._next, self._next + (m.end - m.start), m.pgoff, m.obj)
            self._next += (m.end - m.start + 0xFFFF) & ~0xFFFF
        self.by_object[m.obj].append(placed)
        self.ranges.append(placed)
        return placed.start + offset - placed.pgoff

    def mappings(self) -> set[Mapping]:
        return set(self.ranges)


class SetData:
    """What a set is: its name, its samples, and whose samples they are."""

    __slots__ = ("name", "tally", "process", "layout", "pids", "pids_dropped")

    def __init__(self, name: SetName, tally: SampleTally, process: Process | None = None,
                 layout: CanonicalLayout | None = None, pids: list[int] | None = None) -> None:
        self.name = name
        self.tally = tally
        self.process = process  # task sets; None for aggregates and the kernel
        self.layout = layout  # aggregate sets only
        self.pids: list[int] = [] if pids is None else pids
        self.pids_dropped = 0

    def add_pid(self, pid: int) -> None:
        if pid in self.pids:
            return
        if len(self.pids) < MAX_PIDS:
            self.pids.append(pid)
        else:
            self.pids_dropped += 1


class SetWriter:
    """How a set is written: where it stands on the way to `.q`."""

    __slots__ = ("version", "promoted", "dirty", "idle_dirty", "idle_skips", "finished", "fold")

    def __init__(self, promoted: bool = False) -> None:
        self.version: int | None = None  # claimed at its first write
        self.promoted = promoted  # has (or will get at the next write) files of its own
        self.dirty = True  # changed since its last write
        self.idle_dirty = False  # changed since its last write by idle weight alone
        self.idle_skips = 0  # checkpoints that left its idle weight unwritten
        self.finished = False  # ended; forget it once written
        self.fold = False  # to be folded into its program's set (could not be written)


class Slice(NamedTuple):
    """One CPU's time slice as its collector began it (at its start, a
    --rotate cut, or a restart): when, and the records its ring had lost
    by then. A set's losses are told as numbers among its slice's
    (q:lost-from, q:slice-start), so a reader counts each loss once."""

    start: float  # Unix seconds, to the millisecond: the slice's name in every set
    lost: int


class SetStats:
    """What is counted about a set besides its samples: its times, the
    records lost meanwhile, the task's (or CPU's) counters, idle weight."""

    __slots__ = ("start", "end_time", "clock_step", "slice", "lost_at_start", "lost_at_end",
                 "counters_start", "counters_last", "counters_at", "counters_folded",
                 "idle_weight", "cgroup_weights", "cgroup")

    def __init__(self, start: Stamp, lost_at_start: int = 0,
                 slice_: Slice | None = None) -> None:
        self.start = start
        self.end_time: float | None = None  # Unix seconds: start.wall + monotonic time elapsed
        self.clock_step: float | None = None  # wall clock minus derived time at the end, if a step
        self.slice = slice_ if slice_ is not None else Slice(round(start.wall, 3), 0)
        self.lost_at_start = lost_at_start  # the CPU's lost records when the set began
        self.lost_at_end: int | None = None  # ... and when it ended (None: still open)
        #: task (or CPU) counters when the set began, at the last look (None:
        #: not looked at again since), and when that was
        self.counters_start: dict[str, float] | None = None
        self.counters_last: dict[str, float] | None = None
        self.counters_at = 0.0  # monotonic time
        self.counters_folded: dict[str, float] = {}  # aggregates: of folded tasks
        self.idle_weight = 0  # kernel sets: weight of the idle task's (pid 0) samples
        self.cgroup_weights: dict[int, int] = {}  # cgroup id -> sample weight
        self.cgroup: str | None = None  # the path written (machine/cgroups.py says which)

    def task_stats(self) -> dict[str, float] | None:
        """Counters over the set's life (process-wide, not per CPU)."""
        if self.counters_folded:
            return dict(self.counters_folded)
        if self.counters_start is None or self.counters_last is None:
            return None
        return counters_delta(self.counters_start, self.counters_last)

    def end(self, clock: Clock) -> None:
        """The set ends now (or, ended already, its data changes now)."""
        self.end_time = clock.wall_after(self.start)
        self.clock_step = clock.step(self.start)


class NotedAddresses:
    """The collector's cache: addresses whose mapping the set's tally holds,
    valid under one version of the process's maps."""

    __slots__ = ("addresses", "maps_version", "stacks")

    def __init__(self) -> None:
        self.addresses: set[int] = set()
        self.maps_version = -1
        #: id -> stack tuple of stacks whose addresses are all noted (held: their ids stay theirs)
        self.stacks: dict[int, tuple[int, ...]] = {}

    def holds(self, stack: object, maps_version: int) -> bool:
        """Whether ``stack`` is a tuple seen here before whose addresses are
        all noted, under this version of the process's maps: the unwinder
        hands out one tuple for every sample of a walk it remembers."""
        return self.stacks.get(id(stack)) is stack and self.maps_version == maps_version


NOTED_STACKS = 1024
"""Stacks a set's NotedAddresses holds, at most (cleared when full)."""


class CollectedSet:
    """A set of files in `.q` as one CPU's collector keeps it (one task, one
    program's short-lived tasks, or the kernel): what it is, how it is
    written, what is counted about it."""

    __slots__ = ("data", "writer", "stats", "noted")

    def __init__(self, data: SetData, writer: SetWriter, stats: SetStats) -> None:
        self.data = data
        self.writer = writer
        self.stats = stats
        self.noted = NotedAddresses()


class SetBook:
    """All task sets of one CPU and the rules that route samples to them."""

    def __init__(self, cpu: int, min_samples: int = 100, max_stacks: int = MAX_STACKS,
                 clock: Clock = SYSTEM, min_stack_share: float = 0.0) -> None:
        self.cpu = cpu
        self.min_samples = min_samples
        self.max_stacks = max_stacks
        self.min_stack_share = min_stack_share
        self.clock = clock
        self.by_process: dict[Process, CollectedSet] = {}
        self.aggregates: dict[str, CollectedSet] = {}
        self.kernel: CollectedSet | None = None
        self.closing: list[CollectedSet] = []  # closed sets of an earlier slice not yet written
        self.dropped = 0  # closed sets given up while .q could not be written
        self.lost = 0  # records this CPU's ring dropped so far
        self.slice = Slice(round(clock.wall(), 3), 0)

    def kernel_set(self) -> CollectedSet:
        if self.kernel is None:
            self.kernel = self._new(SetData(SetName("kernel", self.cpu), self._tally()),
                                    promoted=True)
        return self.kernel

    def process_set(self, proc: Process) -> CollectedSet:
        ts = self.by_process.get(proc)
        if ts is None:
            ts = self._new(SetData(SetName(sanitize_prog(proc.comm), self.cpu, proc.pid),
                                   self._tally(), process=proc, pids=[proc.pid]))
            self.by_process[proc] = ts
        ts.writer.dirty = True
        return ts

    def _new(self, data: SetData, promoted: bool = False) -> CollectedSet:
        return CollectedSet(data, SetWriter(promoted=promoted),
                            SetStats(self.clock.stamp(), self.lost, self.slice))

    def open_sets(self) -> list[CollectedSet]:
        """Every set still collecting on this CPU."""
        out = list(self.by_process.values()) + list(self.aggregates.values())
        return out + ([self.kernel] if self.kernel is not None else [])

    def process_ended(self, proc: Process) -> bool:
        """Note that ``proc`` ended; False if it never had a sample here."""
        ts = self.by_process.get(proc)
        if ts is None:
            return False
        ts.stats.end(self.clock)
        ts.stats.lost_at_end = self.lost
        ts.writer.dirty = True
        return True

    def _tally(self) -> SampleTally:
        return SampleTally(max_stacks=self.max_stacks, min_share=self.min_stack_share)

    def _aggregate_for(self, proc: Process) -> CollectedSet:
        prog = sanitize_prog(proc.comm)
        agg = self.aggregates.get(prog)
        if agg is None and len(self.aggregates) >= MAX_AGGREGATES:
            prog = OTHER_PROGRAMS
            agg = self.aggregates.get(prog)
        if agg is None:
            tally = SampleTally(max_stacks=self.max_stacks, max_threads=MAX_FOLDED_THREADS,
                                min_share=self.min_stack_share)
            agg = self._new(SetData(SetName(prog, self.cpu), tally, layout=CanonicalLayout()),
                            promoted=True)
            self.aggregates[prog] = agg
        return agg

    def plan(self, final: bool, complete: bool = False,
             starts: Callable[[CollectedSet], StartOf | None] | None = None,
             object_lines: Callable[[CollectedSet], StartOf] | None = None
             ) -> tuple[list[CollectedSet], list[Process]]:
        """Decide what to write now (``complete``: every change, the
        kernel set's idle weight too, as a checkpoint asked for by signal).
        ``starts`` tells where the functions of a set's addresses begin, for
        folding rare ones (``SampleTally.fold_rare``); ``object_lines``,
        where the collector's own sets put their rare functions.

        Returns the sets to write and the processes whose data was folded
        into an aggregate (the caller may forget them).
        """
        folded: list[Process] = []
        self._bound_unwritten()
        for proc, ts in list(self.by_process.items()):
            w = ts.writer
            if w.version is None:  # named now: a stub may have learnt its name since
                ts.data.name = SetName(sanitize_prog(proc.comm), self.cpu, proc.pid)
            if not w.promoted and (ts.data.tally.samples >= self.min_samples
                                   or ts.data.tally.waits >= PROMOTE_WAIT_NS):
                w.promoted = True
            if w.promoted and not w.fold:
                if (proc.ended or final) and not w.finished:
                    self._finish(ts)
                continue
            if proc.ended or final or w.fold:
                self._fold(proc, ts)
                folded.append(proc)
        if final:  # written open before and unchanged since: rewritten, closed
            for a in [*self.aggregates.values(), self.kernel]:
                if a is not None and not a.writer.finished:
                    self._finish(a)
        sets = list(self.closing)
        sets += [ts for ts in self.by_process.values() if ts.writer.promoted and ts.writer.dirty]
        sets += [a for a in self.aggregates.values() if a.writer.dirty]
        if self.kernel is not None and self._kernel_due(complete):
            sets.append(self.kernel)
        now = self.clock.mono()
        for ts in sets:
            own = ts.data.process is not None and ts.data.process.own  # kept by function
            ts.data.tally.fold_rare(starts(ts) if starts is not None else None, now, own,
                                    object_lines(ts) if own and object_lines is not None
                                    else None)
        return sets, folded

    def _kernel_due(self, complete: bool) -> bool:
        """Is the kernel set to be written? When it changed, yes. When
        only time passed on an idle CPU (the idle task's weight, the CPU's
        counters), at every IDLE_CHECKPOINTS-th checkpoint, or when asked:
        rewriting its files each minute for that alone was a large part of
        what an idle machine's collector cost. The end of a slice writes it
        (final: _finish)."""
        w = self.kernel.writer  # type: ignore[union-attr]
        if w.dirty or complete and w.idle_dirty:
            return True
        if not w.idle_dirty:
            return False
        w.idle_skips += 1
        return w.idle_skips >= IDLE_CHECKPOINTS

    def _finish(self, ts: CollectedSet) -> None:
        """Close ``ts``: its next write says so, even if nothing else changed."""
        ts.writer.finished = True
        ts.writer.dirty = True
        if ts.stats.end_time is None:
            ts.stats.end(self.clock)
        if ts.stats.lost_at_end is None:  # a closed set rewritten later claims no later loss
            ts.stats.lost_at_end = self.lost

    def _fold(self, proc: Process, ts: CollectedSet) -> None:
        """Move a task's samples into its program's aggregate set."""
        agg = self._aggregate_for(proc)
        data = agg.data
        if data.layout is None:
            raise RuntimeError(f"aggregate set {data.name} has no canonical layout")
        data.tally.merge(ts.data.tally, data.layout, proc)
        data.tally.mappings = data.layout.mappings()
        data.add_pid(proc.pid)
        if ts.stats.slice == agg.stats.slice:  # the aggregate was open while its tasks ran
            agg.stats.lost_at_start = min(agg.stats.lost_at_start, ts.stats.lost_at_start)
        folded = agg.stats.counters_folded
        for k, v in (ts.stats.task_stats() or {}).items():
            folded[k] = round(folded.get(k, 0) + v, 6)
        for cid, weight in ts.stats.cgroup_weights.items():
            weigh(agg.stats.cgroup_weights, cid, weight)
        agg.stats.cgroup = agg.stats.cgroup or ts.stats.cgroup
        if proc.ended:
            agg.stats.end(self.clock)
        agg.writer.dirty = True
        del self.by_process[proc]

    def _bound_unwritten(self) -> None:
        """While .q cannot be written, ended tasks' sets wait in memory; past
        MAX_UNWRITTEN the oldest are folded into their program's set (bounded
        by code, not by the number of tasks). Closed sets of earlier slices
        beyond the bound are dropped, the oldest first."""
        waiting = [ts for p, ts in self.by_process.items() if p.ended and ts.writer.dirty]
        if len(waiting) > MAX_UNWRITTEN:
            waiting.sort(key=lambda ts: ts.stats.end_time or 0.0)
            for ts in waiting[:len(waiting) - MAX_UNWRITTEN]:
                ts.writer.fold = True
        if len(self.closing) > MAX_UNWRITTEN:
            self.dropped += len(self.closing) - MAX_UNWRITTEN
            self.closing = self.closing[-MAX_UNWRITTEN:]

    def start_slice(self) -> None:
        """After a final write: the next samples go to new sets (new versions).

        Closed sets the write could not place are kept for the next try.
        """
        leftovers = [ts for ts in self.by_process.values()
                     if ts.writer.finished and ts.writer.dirty]
        leftovers += [a for a in self.aggregates.values() if a.writer.dirty]
        if self.kernel is not None and self.kernel.writer.dirty:
            leftovers.append(self.kernel)
        self.closing = [ts for ts in self.closing if ts.writer.dirty] + leftovers
        self.by_process = {p: ts for p, ts in self.by_process.items()
                           if not ts.writer.finished}
        self.aggregates = {}
        self.kernel = None
        self.slice = Slice(round(self.clock.wall(), 3), self.lost)

    def written(self, ts: CollectedSet) -> Process | None:
        """``ts`` reached the disk; drop it if it is finished. Returns its
        process when that can be forgotten too."""
        ts.writer.dirty = ts.writer.idle_dirty = False
        ts.writer.idle_skips = 0
        if ts in self.closing:
            self.closing.remove(ts)
        proc = ts.data.process
        if ts.writer.finished and proc is not None:
            if self.by_process.get(proc) is ts:
                del self.by_process[proc]
            return proc
        return None
