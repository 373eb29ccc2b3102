"""Per-CPU aggregation of samples into task sets.

Every process incarnation collects its own ``Profile`` (address histogram,
stack weights, call arcs). At a checkpoint a profile with enough samples
becomes a task set of its own (``PROG-pidN-cpuN``); one that ended with few
samples is folded into its program's aggregate set (``PROG-cpuN``), so a
fork-heavy load cannot create unbounded files. Memory follows the code
footprint: a set is forgotten once its final state has been written.

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
from dataclasses import dataclass, field
from typing import Iterable

from qtools.qformat import SetName, sanitize_prog

from .clock import SYSTEM, Clock, Stamp
from .procfs import counters_delta
from .sketch import DistinctCount
from .tasks import Mapping, ObjectKey, Process

NO_KERNEL = 1 << 64  # Profile.kernel_from of a profile without kernel addresses: above all
SYNTHETIC_BASE = 0x4000_0000_0000_0000  # never a user or kernel address
MAX_PIDS = 1024
MAX_UNWRITTEN = 128  # ended tasks kept apart while .q cannot be written; then folded
MAX_STACKS = 200_000
"""Distinct stacks kept per set and time slice. A stack costs about 0.5 KB
(the tuple, its addresses, the dict slot), so a set at the cap holds about
100 MB; reaching it takes 200,000 samples of one task in one slice (over
3 minutes of CPU at 997 Hz), and real programs show tens of thousands."""


@dataclass
class Profile:
    """Samples of one task set, in event units."""

    hist: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))
    stacks: defaultdict[tuple[int, ...], int] = field(default_factory=lambda: defaultdict(int))
    arcs: defaultdict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    samples: int = 0
    mappings: set[Mapping] = field(default_factory=set)
    max_stacks: int = MAX_STACKS
    folded_weight: int = 0  # weight of the stacks beyond max_stacks: the remainder line
    folded_samples: int = 0
    folded_stacks: DistinctCount | None = None  # made when the first stack is folded
    # Lowest address taken in kernel mode (cpumode, PERF_CONTEXT_KERNEL): at or
    # above it every address held is the kernel's (q:kernel-from)
    kernel_from: int = NO_KERNEL

    def add(self, ip: int, weight: int, stack: tuple[int, ...] | None,
            arcs: Iterable[tuple[int, int]] = ()) -> None:
        self.samples += 1
        self.hist[ip] += weight
        if stack:
            self._add_stack(stack, weight, 1)
        for arc in arcs:
            self.arcs[arc] += 1

    def _add_stack(self, stack: tuple[int, ...], weight: int, samples: int) -> None:
        stacks = self.stacks
        if stack in stacks or len(stacks) < self.max_stacks:
            stacks[stack] += weight
            return
        self.folded_weight += weight
        self.folded_samples += samples
        if self.folded_stacks is None:
            self.folded_stacks = DistinctCount()
        self.folded_stacks.add(stack)

    @property
    def total(self) -> int:
        return sum(self.hist.values())

    def merge(self, other: Profile, rebase: CanonicalLayout | None = None,
              proc: Process | None = None) -> None:
        kernel_from = other.kernel_from  # kernel addresses are never rebased
        tr = (lambda a: a) if rebase is None or proc is None else \
            (lambda a: a if a >= kernel_from else rebase.translate(a, proc))
        for a, w in other.hist.items():
            self.hist[tr(a)] += w
        # How many samples a stack stood for is not kept: a stack folded here
        # counts its share of the other profile's samples by weight.
        per_sample = other.total / other.samples if other.samples else 1.0
        for s, w in other.stacks.items():
            self._add_stack(tuple(tr(a) for a in s), w, max(1, round(w / per_sample)))
        for (f, t), n in other.arcs.items():
            self.arcs[(tr(f), tr(t))] += n
        self.samples += other.samples
        self.kernel_from = min(self.kernel_from, other.kernel_from)
        self.folded_weight += other.folded_weight
        self.folded_samples += other.folded_samples
        if other.folded_stacks is not None:
            if self.folded_stacks is None:
                self.folded_stacks = DistinctCount()
            self.folded_stacks.merge(other.folded_stacks)
        if rebase is None:
            self.mappings |= other.mappings


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


@dataclass(eq=False)
class TaskSet:
    """A set of files in `.q`: one task, one program's short-lived tasks, or the kernel."""

    name: SetName
    profile: Profile = field(default_factory=Profile)
    process: Process | None = None
    layout: CanonicalLayout | None = None  # aggregate sets only
    promoted: bool = False  # has (or will get at the next write) files of its own
    version: int | None = None
    pids: list[int] = field(default_factory=list)
    pids_dropped: int = 0
    start: Stamp = field(default_factory=SYSTEM.stamp)
    end_time: float | None = None  # Unix seconds: start.wall + monotonic time elapsed
    clock_step: float | None = None  # wall clock minus derived time at the end, if a step
    lost_at_start: int = 0
    lost_at_end: int | None = None
    dirty: bool = True
    finished: bool = False  # ended; forget it once written
    fold: bool = False  # to be folded into its program's set (could not be written)
    noted: set[int] = field(default_factory=set)  # addresses whose mapping is in the profile
    noted_version: int = -1  # the process's maps_version those were noted under
    stats_start: dict[str, float] | None = None  # task (or CPU) counters when the set began
    stats_last: dict[str, float] | None = None  # ... at the last look
    stats_at: float = 0.0  # monotonic time of that look
    stats_folded: dict[str, float] = field(default_factory=dict)  # aggregates: folded tasks
    idle_weight: int = 0  # kernel sets: weight of the idle task's (pid 0) samples

    def task_stats(self) -> dict[str, float] | None:
        """Counters over the set's life (process-wide, not per CPU)."""
        if self.stats_folded:
            return dict(self.stats_folded)
        if self.stats_start is None or self.stats_last is None:
            return None
        return counters_delta(self.stats_start, self.stats_last)

    @property
    def start_time(self) -> float:
        return self.start.wall

    def end(self, clock: Clock) -> None:
        """The set ends now (or, ended already, its data changes now)."""
        self.end_time = clock.wall_after(self.start)
        self.clock_step = clock.step(self.start)

    def add_pid(self, pid: int) -> None:
        if pid in self.pids:
            return
        if len(self.pids) < MAX_PIDS:
            self.pids.append(pid)
        else:
            self.pids_dropped += 1


class SetBook:
    """All task sets of one CPU and the rules that route samples to them."""

    def __init__(self, cpu: int, min_samples: int = 100, max_stacks: int = MAX_STACKS,
                 clock: Clock = SYSTEM) -> None:
        self.cpu = cpu
        self.min_samples = min_samples
        self.max_stacks = max_stacks
        self.clock = clock
        self.by_process: dict[Process, TaskSet] = {}
        self.aggregates: dict[str, TaskSet] = {}
        self.kernel: TaskSet | None = None
        self.closing: list[TaskSet] = []  # closed sets of an earlier slice not yet written
        self.dropped = 0  # closed sets given up while .q could not be written
        self.lost = 0  # records this CPU's ring dropped so far

    def kernel_set(self) -> TaskSet:
        if self.kernel is None:
            self.kernel = TaskSet(SetName("kernel", self.cpu), promoted=True,
                                  lost_at_start=self.lost, start=self.clock.stamp(),
                                  profile=self._profile())
        return self.kernel

    def process_set(self, proc: Process) -> TaskSet:
        ts = self.by_process.get(proc)
        if ts is None:
            ts = TaskSet(SetName(sanitize_prog(proc.comm), self.cpu, proc.pid), process=proc,
                         lost_at_start=self.lost, pids=[proc.pid], start=self.clock.stamp(),
                         profile=self._profile())
            self.by_process[proc] = ts
        ts.dirty = True
        return ts

    def process_ended(self, proc: Process) -> bool:
        """Note that ``proc`` ended; False if it never had a sample here."""
        ts = self.by_process.get(proc)
        if ts is None:
            return False
        ts.end(self.clock)
        ts.lost_at_end = self.lost
        ts.dirty = True
        return True

    def _profile(self) -> Profile:
        return Profile(max_stacks=self.max_stacks)

    def _aggregate_for(self, proc: Process) -> TaskSet:
        prog = sanitize_prog(proc.comm)
        agg = self.aggregates.get(prog)
        if agg is None:
            agg = TaskSet(SetName(prog, self.cpu), layout=CanonicalLayout(), promoted=True,
                          lost_at_start=self.lost, start=self.clock.stamp(),
                          profile=self._profile())
            self.aggregates[prog] = agg
        return agg

    def plan(self, final: bool) -> tuple[list[TaskSet], list[Process]]:
        """Decide what to write now.

        Returns the sets to write and the processes whose data was folded
        into an aggregate (the caller may forget them).
        """
        folded: list[Process] = []
        self._bound_unwritten()
        for proc, ts in list(self.by_process.items()):
            if ts.version is None:  # named now: a stub may have learnt its name since
                ts.name = SetName(sanitize_prog(proc.comm), self.cpu, proc.pid)
            if not ts.promoted and ts.profile.samples >= self.min_samples:
                ts.promoted = True
            if ts.promoted and not ts.fold:
                if (proc.ended or final) and not ts.finished:
                    self._finish(ts)
                continue
            if proc.ended or final or ts.fold:
                self._fold(proc, ts)
                folded.append(proc)
        if final:  # written open before and unchanged since: rewritten, closed
            for a in [*self.aggregates.values(), self.kernel]:
                if a is not None and not a.finished:
                    self._finish(a)
        sets = list(self.closing)
        sets += [ts for ts in self.by_process.values() if ts.promoted and ts.dirty]
        sets += [a for a in self.aggregates.values() if a.dirty]
        if self.kernel is not None and self.kernel.dirty:
            sets.append(self.kernel)
        return sets, folded

    def _finish(self, ts: TaskSet) -> None:
        """Close ``ts``: its next write says so, even if nothing else changed."""
        ts.finished = True
        ts.dirty = True
        if ts.end_time is None:
            ts.end(self.clock)

    def _fold(self, proc: Process, ts: TaskSet) -> None:
        """Move a task's samples into its program's aggregate set."""
        agg = self._aggregate_for(proc)
        assert agg.layout is not None
        agg.profile.merge(ts.profile, agg.layout, proc)
        agg.profile.mappings = agg.layout.mappings()
        agg.add_pid(proc.pid)
        for k, v in (ts.task_stats() or {}).items():
            agg.stats_folded[k] = round(agg.stats_folded.get(k, 0) + v, 6)
        if proc.ended:
            agg.end(self.clock)
        agg.dirty = True
        del self.by_process[proc]

    def _bound_unwritten(self) -> None:
        """While .q cannot be written, ended tasks' sets wait in memory; past
        MAX_UNWRITTEN the oldest are folded into their program's set (bounded
        by code, not by the number of tasks). Closed sets of earlier slices
        beyond the bound are dropped, the oldest first."""
        waiting = [ts for p, ts in self.by_process.items() if p.ended and ts.dirty]
        if len(waiting) > MAX_UNWRITTEN:
            waiting.sort(key=lambda ts: ts.end_time or 0.0)
            for ts in waiting[:len(waiting) - MAX_UNWRITTEN]:
                ts.fold = True
        if len(self.closing) > MAX_UNWRITTEN:
            self.dropped += len(self.closing) - MAX_UNWRITTEN
            self.closing = self.closing[-MAX_UNWRITTEN:]

    def start_slice(self) -> None:
        """After a final write: the next samples go to new sets (new versions).

        Closed sets the write could not place are kept for the next try.
        """
        leftovers = [ts for ts in self.by_process.values() if ts.finished and ts.dirty]
        leftovers += [a for a in self.aggregates.values() if a.dirty]
        if self.kernel is not None and self.kernel.dirty:
            leftovers.append(self.kernel)
        self.closing = [ts for ts in self.closing if ts.dirty] + leftovers
        self.by_process = {p: ts for p, ts in self.by_process.items() if not ts.finished}
        self.aggregates = {}
        self.kernel = None

    def written(self, ts: TaskSet) -> Process | None:
        """``ts`` reached the disk; drop it if it is finished. Returns its
        process when that can be forgotten too."""
        ts.dirty = False
        if ts in self.closing:
            self.closing.remove(ts)
        if ts.finished and ts.process is not None:
            if self.by_process.get(ts.process) is ts:
                del self.by_process[ts.process]
            return ts.process
        return None
