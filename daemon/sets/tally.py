"""What a set counts of its samples: addresses, stacks, arcs, threads.

``SampleTally`` is the data behind a set's `.hist`, `.stack`, `.edge` and
`.threads` files: the `.threads` file holds its samples by thread and stack,
the threads' names, and with ``--off-cpu`` their waits (docs/q-format.md 5.8).
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import defaultdict
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from qtools.qformat import rest_thread

from ..machine.tasks import Mapping, Process
from .sketch import DistinctCount

if TYPE_CHECKING:
    from .starts import StartOf

MAX_STACKS = 200_000
"""Distinct stacks kept per set and time slice. A stack costs about 0.5 KB
(the tuple, its addresses, the dict slot), so a set at the cap holds about
100 MB; reaching it takes 200,000 samples of one task in one slice (over
3 minutes of CPU at 997 Hz), and real programs show tens of thousands."""
OTHER_TASKS = "other-tasks"
"""The name of TID 0 in a set that folded more tasks' threads than it names."""
NO_KERNEL = 1 << 64
"""``SampleTally.kernel_from`` of a tally without kernel addresses: above all."""
MAX_THREADS = 4096
"""Threads counted apart per set; the samples of any more share one
"other threads" count, and their `.threads` lines TID 0. Bounds memory when
a program makes threads by the million."""
RECUR_SECONDS = 60.0
"""With --min-stack-share, a stack (or rare `.hist` address) is also folded
once it has been met less than once per this many seconds since it was first
seen: a set sampled a few times a second needs 1/SHARE of its samples,
many minutes, before the share alone folds what it met once, and its
`.stack` grows all that while (fold_rare)."""
FOLD_TIMES = 64
"""The folds whose time a tally keeps, to age what they saw; a stack first
seen before the oldest is taken as that old (younger than it is: kept)."""


class Rebase(Protocol):
    """Where a process's user addresses go in a tally of several processes
    (``aggregate.CanonicalLayout``)."""

    def translate(self, address: int, proc: Process) -> int: ...


class SampleTally:
    """The samples of one set, in event units: address histogram, stack
    weights, call arcs, and the mappings its addresses fall in."""

    __slots__ = ("hist", "stacks", "arcs", "samples", "mappings", "max_stacks", "folded_weight",
                 "folded_samples", "folded_stacks", "threads", "other_threads", "max_threads",
                 "by_thread", "solo", "split", "thread_names", "waits", "switches",
                 "switch_lost", "kernel_from", "min_share", "epoch", "born", "address_born",
                 "moved_weight", "at_start", "object_lines", "fold_epochs", "fold_times")

    def __init__(self, max_stacks: int = MAX_STACKS, max_threads: int = MAX_THREADS,
                 min_share: float = 0.0) -> None:
        self.hist: defaultdict[int, int] = defaultdict(int)
        self.stacks: defaultdict[tuple[int, ...], int] = defaultdict(int)
        self.arcs: defaultdict[tuple[int, int], int] = defaultdict(int)
        self.samples = 0
        self.mappings: set[Mapping] = set()
        self.max_stacks = max_stacks
        self.folded_weight = 0  # weight of the stacks beyond max_stacks: the remainder line
        self.folded_samples = 0
        self.folded_stacks: DistinctCount | None = None  # made when the first stack is folded
        self.threads: dict[int, list[int]] = {}  # tid -> [samples, weight]
        self.other_threads = [0, 0]  # beyond max_threads
        self.max_threads = max_threads
        # (kind, tid, stack) -> weight: `.threads` lines; "cpu" in event units,
        # S/D/W in ns. Capped with the stacks: beyond, the stack is left out (-).
        # While every sample came from one thread (``solo``), that thread's "cpu"
        # lines are the set's stacks and are not kept twice (``thread_stacks``
        # gives them); the first sample of another thread writes them out here.
        self.by_thread: defaultdict[tuple[str, int, tuple[int, ...]], int] = defaultdict(int)
        self.solo: int | None = None  # the thread of every sample so far, while not ``split``
        self.split = False  # "cpu" lines are kept in by_thread
        self.thread_names: dict[int, str] = {}
        self.waits = 0  # ns of S/D/W: a set with waits is written even without samples
        self.switches = 0  # switches out of its threads on this CPU (--off-cpu)
        self.switch_lost = 0  # records the rings lost while it was open (--off-cpu)
        # Lowest address taken in kernel mode (cpumode, PERF_CONTEXT_KERNEL): at or
        # above it every address held is the kernel's (q:kernel-from)
        self.kernel_from = NO_KERNEL
        # --min-stack-share: a stack is kept while it has carried at least this
        # share of the set's weight since it was first seen (fold_rare); 0: all
        self.min_share = min_share
        self.epoch = 0  # the set's weight at the last fold_rare
        self.born: dict[tuple[int, ...], int] = {}  # stack -> epoch first seen
        # ... and the `.hist` addresses as the folds first saw them, and the
        # weight moved from rare addresses to their function's start
        self.address_born: dict[int, int] = {}
        self.moved_weight = 0
        self.at_start: set[int] = set()  # addresses found to be a function's first: not asked again
        # kept by function: the lines that stand for their object's rare
        # functions (q:other-functions), never judged themselves
        self.object_lines: set[int] = set()
        # the epoch and monotonic time of the last FOLD_TIMES folds given a
        # time: how long ago a stack born at an epoch was first seen
        self.fold_epochs = array("q")
        self.fold_times = array("d")

    def note_kernel(self, low: int) -> None:
        """A sample (or a wait's stack) held kernel addresses down to
        ``low`` (NO_KERNEL: none): ``kernel_from`` stays the lowest."""
        if low < self.kernel_from:
            self.kernel_from = low

    def add(self, ip: int, weight: int, stack: tuple[int, ...] | None,
            arcs: Iterable[tuple[int, int]] = (), tid: int | None = None,
            kernel_low: int = NO_KERNEL) -> None:
        """One sample; ``tid`` None: its thread is counted apart (``count_thread``);
        ``kernel_low``: its lowest kernel address (``note_kernel``)."""
        if kernel_low < self.kernel_from:  # note_kernel, inline: this runs for every sample
            self.kernel_from = kernel_low
        if not self.split and (tid is None or (tid != self.solo and
                                               (self.solo is not None or self.samples))):
            self._split()
        self.samples += 1
        self.hist[ip] += weight
        if stack:
            stacks = self.stacks
            if stack in stacks:  # _add_stack's common case, inline
                stacks[stack] += weight
            else:
                self._add_stack(stack, weight, 1)
        if arcs:
            for arc in arcs:
                self.arcs[arc] += 1
        if tid is not None:  # count_thread, inline: this runs for every sample
            slot = self.threads.get(tid) or self._thread_slot(tid)
            slot[0] += 1
            slot[1] += weight
            if self.split:
                self.add_thread("cpu", tid, stack or (ip,), weight)
            else:
                self.solo = tid

    def add_same(self, ip: int, weight: int, samples: int, stack: tuple[int, ...] | None,
                 tid: int, kernel_low: int = NO_KERNEL) -> None:
        """``samples`` samples of one pc, stack and thread, ``weight`` in all:
        as many ``add`` calls, in one."""
        self.note_kernel(kernel_low)
        if not self.split and tid != self.solo and (self.solo is not None or self.samples):
            self._split()
        self.samples += samples
        self.hist[ip] += weight
        if stack:
            self._add_stack(stack, weight, samples)
        self.count_thread(tid, weight, samples)
        if self.split:
            self.add_thread("cpu", tid, stack or (ip,), weight)
        else:
            self.solo = tid

    def add_thread(self, kind: str, tid: int, stack: tuple[int, ...], weight: int) -> None:
        """A `.threads` weight: a sample's (``cpu``) or a wait's (S, D, W, ns)."""
        if kind == "cpu" and not self.split:
            self._split()
        key = (kind, tid, stack)
        ts = self.by_thread
        if key not in ts:
            # Threads past max_threads (-k, where every task's samples land
            # in the kernel set) share TID 0: lines by stack, not by thread.
            if tid not in self.threads and len(self.threads) >= self.max_threads:
                tid = 0
                key = (kind, 0, stack)
            if key not in ts and len(ts) >= self.max_stacks + self.max_threads:
                key = (kind, tid, ())
        ts[key] += weight
        if kind != "cpu":
            self.waits += weight

    def _solo_lines(self) -> Iterable[tuple[tuple[str, int, tuple[int, ...]], int]]:
        """The one thread's "cpu" lines, as add_thread would have kept them:
        its stacks (and the remainder past max_stacks), or its pcs when the
        run keeps no stacks."""
        tid = self.solo
        if tid is None or self.split:
            return
        if self.stacks or self.folded_weight:
            for s, w in self.stacks.items():
                yield ("cpu", tid, s), w
            if self.folded_weight:
                yield ("cpu", tid, ()), self.folded_weight
        else:
            for ip, w in self.hist.items():
                yield ("cpu", tid, (ip,)), w

    def _split(self) -> None:
        """From now on, "cpu" lines are kept in by_thread: those of the one
        thread so far first."""
        lines = list(self._solo_lines())
        self.split = True
        for key, w in lines:
            self.by_thread[key] += w

    @property
    def thread_stacks(self) -> dict[tuple[str, int, tuple[int, ...]], int]:
        """(kind, tid, stack) -> weight of every `.threads` line."""
        if self.split or self.solo is None:
            return self.by_thread
        lines = dict(self.by_thread)
        for key, w in self._solo_lines():
            lines[key] = lines.get(key, 0) + w
        return lines

    def cpu_rest(self) -> int | None:
        """The thread whose "cpu" lines `.threads` may leave out (q:cpu-rest,
        ``rest_thread``): while one thread had every sample, that one, whose
        lines are the stacks themselves."""
        if self.solo is not None and not self.split:
            return self.solo
        return rest_thread(self.stacks, self.folded_weight, self.by_thread)

    def written_thread_lines(self, cpu_rest: int | None
                             ) -> dict[tuple[str, int, tuple[int, ...]], int]:
        """The `.threads` weights to write with ``cpu_rest`` left out: the
        one thread's lines are not made only to be left out again."""
        if cpu_rest is not None and cpu_rest == self.solo and not self.split:
            return self.by_thread
        return self.thread_stacks

    @property
    def has_thread_lines(self) -> bool:
        return bool(self.by_thread) or (self.solo is not None and not self.split)

    def thread_ids(self) -> set[int]:
        """The tids its `.threads` lines name."""
        tids = {key[1] for key in self.by_thread}
        if self.solo is not None and not self.split:
            tids.add(self.solo)
        return tids

    def wait_ns(self, kinds: tuple[str, ...]) -> int:
        """ns of the waits of these kinds (S, D, W: never "cpu")."""
        return sum(w for (kind, _tid, _s), w in self.by_thread.items() if kind in kinds)

    def count_thread(self, tid: int, weight: int, samples: int = 1) -> None:
        slot = self.threads.get(tid) or self._thread_slot(tid)
        slot[0] += samples
        slot[1] += weight

    def _thread_slot(self, tid: int) -> list[int]:
        if len(self.threads) >= self.max_threads:
            return self.other_threads
        slot = self.threads[tid] = [0, 0]
        return slot

    def _add_stack(self, stack: tuple[int, ...], weight: int, samples: int) -> None:
        stacks = self.stacks
        if stack in stacks:
            stacks[stack] += weight
            return
        if len(stacks) < self.max_stacks:
            stacks[stack] = weight
            if self.min_share:
                self.born[stack] = self.epoch
            return
        self._to_remainder(stack, weight, samples)

    def _to_remainder(self, stack: tuple[int, ...], weight: int, samples: int) -> None:
        """``weight`` of ``stack`` counted in the remainder line, not as a stack."""
        self.folded_weight += weight
        self.folded_samples += samples
        if self.folded_stacks is None:
            self.folded_stacks = DistinctCount()
        self.folded_stacks.add(stack)

    @property
    def total(self) -> int:
        return sum(self.hist.values())

    def fold_rare(self, start_of: StartOf | None = None, now: float | None = None,
                  by_function: bool = False, object_line: StartOf | None = None) -> int:
        """Fold into the remainder line every stack that is rare (``_rarity``)
        and was first seen before the last fold, so that each has had a
        whole interval to recur; returns how many were folded.

        The share is lossy counting (Manku and Motwani) by weight: a stack
        whose share of everything the set has counted is above ``min_share``
        is not folded for it, and one that is kept has lost less than
        ``min_share`` of that total to the remainder (its weight before it
        was last folded). Given ``now`` (monotonic seconds), a stack met
        less than once per RECUR_SECONDS since it was first seen goes too,
        so a set sampled a few times a second holds what recurs plus what
        it met in about the last minute, not in its last 1/``min_share``
        samples; a kept stack has then lost less than one sample per
        RECUR_SECONDS besides. The weights' sum and each thread's total
        stay exact.

        With ``start_of``, rare `.hist` addresses go the same way, to the
        first address of their function, where ``start_of`` knows it
        (``_fold_rare_addresses``); ``by_function``, every address as it
        is first judged, with the stacks of one frame at it (a set whose
        stacks are all of one frame: the collector's own); with
        ``object_line`` too, a function that is rare by the rule of the
        stacks then goes to its object's one line of rare functions."""
        if not self.min_share:
            return 0
        total, last, born = self.total, self.epoch, self.born
        seldom = self._seldom(total, now)
        under = self._rarity(total, seldom)
        rare = {s: w for s, w in self.stacks.items()
                if born.get(s, 0) < last and w < under(born.get(s, 0))}
        self.epoch = total
        if rare:
            per_sample = total / self.samples if self.samples else 1.0
            for s, w in rare.items():
                del self.stacks[s]
                born.pop(s, None)
                self._to_remainder(s, w, max(1, round(w / per_sample)))
            if self.split:  # the threads' "cpu" lines of those stacks lose their stack too
                lines = self.by_thread
                for key in [k for k in lines if k[0] == "cpu" and k[2] in rare]:
                    lines[("cpu", key[1], ())] += lines.pop(key)
        if start_of is not None:
            self._fold_rare_addresses(start_of, under, seldom, last, by_function, object_line)
        if now is not None:
            self._note_fold(total, now)
        return len(rare)

    def _rarity(self, total: int, seldom: Callable[[int], float] | None
                ) -> Callable[[int], float]:
        """The weight under which what was first seen after the fold at
        epoch ``b`` is rare now: ``min_share`` of the weight since, and
        with a clock, ``seldom``'s one sample per RECUR_SECONDS since that fold."""
        share = self.min_share
        if seldom is None:
            return lambda b: share * (total - b)
        known: dict[int, float] = {}

        def under(b: int) -> float:
            w = known.get(b)
            if w is None:
                w = known[b] = max(share * (total - b), seldom(b))
            return w
        return under

    def _seldom(self, total: int, now: float | None) -> Callable[[int], float] | None:
        """The weight of one sample per RECUR_SECONDS since the fold at
        epoch ``b`` (None without a clock): the time floor alone."""
        if now is None or not self.samples:
            return None
        rate = total / self.samples / RECUR_SECONDS  # weight a sample, per second
        return lambda b: rate * self._age(b, now)

    def _age(self, epoch: int, now: float) -> float:
        """Seconds since the fold that left the set at ``epoch``: at least
        how long ago what came after it was first seen. Before the oldest
        fold kept, that fold's age (less than the truth: it keeps more)."""
        if not self.fold_times:
            return 0.0
        i = max(0, bisect_right(self.fold_epochs, epoch) - 1)
        return max(0.0, now - self.fold_times[i])

    def _note_fold(self, total: int, now: float) -> None:
        self.fold_epochs.append(total)
        self.fold_times.append(now)
        if len(self.fold_times) > FOLD_TIMES:
            del self.fold_epochs[0]
            del self.fold_times[0]

    def _fold_rare_addresses(self, start_of: StartOf, under: Callable[[int], float],
                             seldom: Callable[[int], float] | None, last: int,
                             by_function: bool = False,
                             object_line: StartOf | None = None) -> None:
        """Move the weight of each rare `.hist` address (and the leaf of no
        stack kept) to its function's first address: the flat profile is
        unchanged, and the `.hist` holds the addresses that recur plus at
        most one line per function, not every instruction a long run ever
        sampled once. A kernel address is rare by the rule of the stacks
        (``under``); a user address by the time floor alone (``seldom``;
        None: never), so that the instructions of a busy program's hot
        functions, each a small share but met all the time, stay for
        ``q-view --annotate``. An address first seen since the last fold
        is only noted, to be judged at the next; ``by_function``, it is
        moved at once, and the stack of one frame at it with it.

        With ``object_line``, a function's first address that is rare by
        the rule of the stacks goes on to its object's line of rare
        functions (``object_lines``): a set kept by function otherwise
        holds every function its code ever met, and meets new ones all day."""
        hist, born, kernel, settled = self.hist, self.address_born, self.kernel_from, self.at_start
        leaves = {s[0] for s in self.stacks}
        moved: dict[int, int] = {}
        to_line: set[int] = set()  # of ``moved``: those that go to an object's line
        for a, w in hist.items():
            b = born.get(a)
            if b is None:
                if a in self.object_lines:
                    continue
                born[a] = last
                if not by_function:
                    continue
            elif a in settled:
                if object_line is not None and b < last and a not in leaves and w < under(b):
                    f = object_line(a)
                    if f is not None and f != a:
                        moved[a] = f
                        to_line.add(a)
                continue
            elif not (b < last and a not in leaves and w < (
                    under(b) if a >= kernel else seldom(b) if seldom is not None else 0)):
                continue
            f = start_of(a)
            if f == a:
                settled.add(a)
            elif f is not None:
                moved[a] = f
        for a, f in moved.items():
            w = hist.pop(a)
            del born[a]
            hist[f] += w
            if a in to_line:
                settled.discard(a)  # met again, it is judged as a new function
                self.object_lines.add(f)
                born.pop(f, None)
                settled.discard(f)
            elif f not in self.object_lines:
                born.setdefault(f, last)
                settled.add(f)
            self.moved_weight += w
            if a >= self.kernel_from:
                self.note_kernel(f)
        if not moved:
            return
        if by_function:
            self._move_stacks_of_one_frame(moved)
        if self.split and (by_function or not (self.stacks or self.folded_weight)):
            lines = self.by_thread  # the threads' lines of one frame (their pcs) follow
            for key in [k for k in lines if k[0] == "cpu" and len(k[2]) == 1
                        and k[2][0] in moved]:
                lines[("cpu", key[1], (moved[key[2][0]],))] += lines.pop(key)

    def _move_stacks_of_one_frame(self, moved: dict[int, int]) -> None:
        """The stacks (a,) as (f,), for each address a moved to f; a stack
        already at f keeps its age, so it is judged as before."""
        stacks, born = self.stacks, self.born
        for a, f in moved.items():
            w = stacks.pop((a,), None)
            if w is None:
                continue
            b = born.pop((a,), self.epoch)
            if (f,) in stacks:
                stacks[(f,)] += w
            else:
                stacks[(f,)] = w
                born[(f,)] = b

    def merge(self, other: SampleTally, rebase: Rebase | None = None,
              proc: Process | None = None) -> None:
        if not self.split:
            self._split()  # before other's stacks join this one's: its lines stay its own
        kernel_from = other.kernel_from  # kernel addresses are never rebased
        tr = (lambda a: a) if rebase is None or proc is None else \
            (lambda a: a if a >= kernel_from else rebase.translate(a, proc))
        for a, w in other.hist.items():
            self.hist[tr(a)] += w
        # How many samples a stack stood for is not kept: a stack folded here
        # counts its share of the other tally's samples by weight.
        per_sample = other.total / other.samples if other.samples else 1.0
        memo: dict[tuple[int, ...], tuple[int, ...]] = {}

        def rebased(s: tuple[int, ...]) -> tuple[int, ...]:
            """``s`` in this tally's layout, one tuple however often it comes."""
            t = memo.get(s)
            if t is None:
                t = memo[s] = tuple(tr(a) for a in s)
            return t
        for s, w in other.stacks.items():
            self._add_stack(rebased(s), w, max(1, round(w / per_sample)))
        for (f, t), n in other.arcs.items():
            self.arcs[(tr(f), tr(t))] += n
        self.samples += other.samples
        self.note_kernel(other.kernel_from)
        self.folded_weight += other.folded_weight
        self.moved_weight += other.moved_weight
        self.object_lines.update(tr(a) for a in other.object_lines)
        self.folded_samples += other.folded_samples
        if other.folded_stacks is not None:
            if self.folded_stacks is None:
                self.folded_stacks = DistinctCount()
            self.folded_stacks.merge(other.folded_stacks)
        for tid, (samples, weight) in other.threads.items():
            self.count_thread(tid, weight, samples)
        self.other_threads[0] += other.other_threads[0]
        self.other_threads[1] += other.other_threads[1]
        # Threads past max_threads (a program's thousands of short-lived
        # tasks folded here) share TID 0 and keep their stacks: the lines
        # grow with the code that ran, not with the number of tasks.
        apart = self.threads
        for (kind, tid, s), w in other.thread_stacks.items():
            if tid not in apart and tid:
                if len(apart) < self.max_threads:
                    apart[tid] = [0, 0]  # a thread with waits but no samples
                else:
                    tid = 0
                    self.thread_names.setdefault(0, OTHER_TASKS)
            self.add_thread(kind, tid, rebased(s), w)
        self.switches += other.switches
        self.switch_lost = max(self.switch_lost, other.switch_lost)
        for tid, name in other.thread_names.items():
            if tid in apart:
                self.thread_names.setdefault(tid, name)
        if rebase is None:
            self.mappings |= other.mappings
