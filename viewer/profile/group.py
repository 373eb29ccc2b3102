"""A profile grouped into frames: the ``Samples`` every text report reads.

Each set's locations become frames as the profile's view says
(``frames.SetFrames``), and the sets merge frame by frame: two sets that
both ran ``cos`` in libm add up in one ``cos``. Counts are converted to
output units (seconds, usually) per set, so sets with different
conversion factors (cycles at different clock rates) merge correctly.

The view's processing applies to each stack as it is grouped
(``process.Processing``): the kernel's frames (--no-kernel,
--kernel-only), Python's (--python), then --focus, --ignore and --hide.
The stack quality is counted on the stacks as they were, before any of
that: how complete the stacks are does not depend on what a report shows.

With ``roots`` (folded stacks of a whole machine), each set's stacks get
one more, outermost frame: its process (``comm``, or ``comm-pid``), as perf
script and flamegraph.pl's stackcollapse scripts put it, each set weighed
in the event's counts or in samples (``--weight``).
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Protocol

from qtools.qformat import LimitExceeded
from qtools.qformat.limits import exceeded

from ..model.viewerrors import ViewError
from ..model.frames import Frame, FrameTable, SetSummary
from ..model.graph import Samples
from ..model.lost import lost_once
from ..model.profile import Profile, SetFacts, SetSamples, View
from ..model.quality import InterpreterQuality, StackQuality
from .setframes import Escape, SetFrames, escaping
from .process import PROCESS_OBJECT, Processing

# Where a `.stack` file's remainder line (``WEIGHT -``: stacks the collector
# did not keep) goes when its `.hist` cannot say which functions it hit.
UNKEPT = ("[stacks not kept]", "[q-syscollect]")
NANOSECOND = 1e-9  # in seconds: the count of a clock event

Warn = Callable[[str], None]


class _Counted(Protocol):
    @property
    def unit(self) -> str: ...


def one_unit(sets: Iterable[_Counted]) -> str:
    """The unit every one of ``sets`` counts in; a merge of sets in
    different units (or of none) is refused."""
    units = sorted({s.unit for s in sets})
    if not units:
        raise ViewError("no task sets to show")
    if len(units) > 1:
        raise ViewError("cannot merge task sets measured in different units ("
                        + ", ".join(units) + "); select sets of one event")
    return units[0]


class Grouper:
    """Groups the sets of a profile, one at a time, into one ``Samples``."""

    def __init__(self, profile: Profile, warn: Warn, max_stacks: int,
                 max_frames: int | None) -> None:
        self.profile = profile
        view = profile.view
        self.view = view
        self.warn = warn
        self.escape = escaping(view)
        self.table = FrameTable(max_frames)
        self.unnamed: set[int] = set()
        self.max_stacks = max_stacks
        # Grouped by object, the frames of one object follow each other in a
        # stack; a run of them is one visit of the object, not recursion.
        self.collapse_runs = view.by == "object"
        # with roots: each set and its own stacks, merged under their process
        # once every set's units are known
        self.rooted: list[tuple[SetFacts, dict[tuple[int, ...], float]]] = []
        self.stacks: dict[tuple[int, ...], float] = {}
        self.calls: dict[tuple[int, int], float] | None = None
        self.quality = StackQuality()
        self.sets: list[SetFacts] = []  # each set's, kept where its samples are not
        # The programs the sets come from, and once there are two, each stack's
        # (and call pair's) programs as bits (Samples.stack_programs)
        self.programs: dict[str, int] = {}
        self.stack_programs: dict[tuple[int, ...], int] | None = None
        self.call_programs: dict[tuple[int, int], int] | None = None
        self.bit = 1  # the program of the set being added
        self.with_stacks = 0
        self.without_stacks: list[SetFacts] = []  # sets whose .info names no .stack

    # ------------------------------------------------------------ one set

    def add(self, s: SetSamples) -> None:
        """Add a set's stacks (or histogram), then its call counts."""
        try:
            self._add(s)
        except LimitExceeded as e:  # the frames': the set that brought one too many
            raise e.located(s.stack_file or s.path) from None

    def _add(self, s: SetSamples) -> None:
        self.sets.append(s.facts())
        self._program(s.root_label)
        names = SetFrames(self.table, self.view, s, self.unnamed)
        local = self._set_stacks(s, names)
        if self.view.roots:
            self.rooted.append((s.facts(), local))
        if s.calls is not None:
            self._add_calls(s, names)

    def _program(self, name: str) -> None:
        """The program the next set's stacks come from: with the second one,
        each stack's programs are kept from there on (those met so far, the
        first's). Folded stacks keep each set under its process anyway."""
        number = self.programs.get(name)
        if number is None:
            number = self.programs[name] = len(self.programs)
            if number == 1 and not self.view.roots:
                self.stack_programs = dict.fromkeys(self.stacks, 1)
                self.call_programs = dict.fromkeys(self.calls or (), 1)
        self.bit = 1 << number

    def _note(self, stack: tuple[int, ...]) -> None:
        if self.stack_programs is not None:
            self.stack_programs[stack] = self.stack_programs.get(stack, 0) | self.bit

    def _set_stacks(self, s: SetSamples, names: SetFrames) -> dict[tuple[int, ...], float]:
        """The set's stacks by frame, in output units: into the report's
        stacks at once (``local`` is its dict), or, with roots, the set's own."""
        factor = s.factor
        local: dict[tuple[int, ...], float] = {} if self.view.roots else self.stacks
        if s.from_stacks:
            self.with_stacks += 1
            self._frame_stacks(s, names, factor, local)
            spread: dict[tuple[int, ...], int] = {}
            for lid, count in s.spread.items():  # counts summed per frame first
                leaf_only = names.leaf(lid)
                spread[leaf_only] = spread.get(leaf_only, 0) + count
            for leaf_only, count in spread.items():
                local[leaf_only] = local.get(leaf_only, 0.0) + count * factor
                self._note(leaf_only)
            if s.unkept:
                fid = self.table.id(Frame(*UNKEPT))
                local[(fid,)] = local.get((fid,), 0.0) + s.unkept * factor
                self._note((fid,))
            self.quality.unkept += (sum(s.spread.values()) + s.unkept) * factor
        else:
            if s.no_stack_file:
                self.without_stacks.append(s.facts())
            for (lid,), count in s.stacks.items():
                stack = names.leaf(lid)
                local[stack] = local.get(stack, 0.0) + count * factor
                self._note(stack)
        if s.moved:
            whole = sum(s.stacks.values()) + sum(s.spread.values()) + s.unkept
            self.quality.moved += min(s.moved, whole) * factor  # no more than the set holds
        return local

    def _frame_stacks(self, s: SetSamples, names: SetFrames, factor: float,
                      acc: dict[tuple[int, ...], float]) -> None:
        """Name the set's stacks, group them by frame, and count how complete
        its user stacks are."""
        interp = self._interpreter(s)
        names_of = s.names
        locations = s.locations
        # Hot loop: the stacks' locations are named first, in the order the
        # data met them; then each stack is list lookups.
        names.name_all(s.stack_locations)
        fids, kernel, objects, python = names.fids, names.kernel, names.objects, names.python
        any_python = any(python)
        quality = self.quality
        cap = self.max_stacks
        rooted: dict[int, bool] = {}  # outermost location -> the stack is complete
        chains, chain, leaf_inline = names.chains, names.chain, names.leaf_inline
        with_inline = names.with_inline()
        collapse = self.collapse_runs
        programs, bit = self.stack_programs, self.bit
        for lstack, weight in s.stacks.items():
            if with_inline:
                ids: list[int] = []
                for pos, lid in enumerate(lstack):
                    if pos or leaf_inline:
                        c = chains[lid]
                        ids.extend(c if c is not None else chain(lid))
                    ids.append(fids[lid])
            else:
                ids = [fids[lid] for lid in lstack]
            if collapse:
                ids = [f for i, f in enumerate(ids) if i == 0 or ids[i - 1] != f]
            stack = tuple(ids)
            w = weight * factor
            before = acc.get(stack)
            if before is None:
                if len(acc) >= cap:
                    raise exceeded(f"more than {cap} distinct stacks", s.stack_file or "",
                                   "stacks", cap)
                acc[stack] = w
            else:
                acc[stack] = before + w
            if programs is not None:
                programs[stack] = programs.get(stack, 0) | bit
            last = lstack[-1]
            if not kernel[last]:  # kernel frames come first: a user frame is last
                innermost_user = next(lid for lid in lstack if not kernel[lid])
                root = rooted.get(last)
                if root is None:
                    root = rooted[last] = names_of.is_root(locations.addresses[last],
                                                           bool(locations.returns[last]))
                quality.add(objects[innermost_user], w, root)
                interp.stacks += w
                if any_python and any(python[lid] for lid in lstack):
                    interp.python += w
                    if root:
                        interp.python_rooted += w

    def _interpreter(self, s: SetSamples) -> InterpreterQuality:
        """The per-process stack-quality entry of a set (sets of one pid share it)."""
        escape = self.escape
        summary = s.summary
        key = f"{escape(summary.comm or summary.file)} pid {summary.pid}" \
            if summary.pid is not None else escape(summary.file)
        entry = self.quality.by_process.get(key)
        if entry is None:
            entry = self.quality.by_process[key] = InterpreterQuality()
        for source in s.jit_sources:
            source = escape(source)
            if source not in entry.sources:
                entry.sources.append(source)
        return entry

    def _add_calls(self, s: SetSamples, names: SetFrames) -> None:
        calls = self.calls if self.calls is not None else {}
        frame = names.frame
        factor = s.calls_factor
        for (site, callee), count in (s.calls or {}).items():
            # a call from inlined code is a call of the inlined function
            pair = (names.innermost(site), frame(callee))
            calls[pair] = calls.get(pair, 0.0) + count * factor
            if self.call_programs is not None:
                self.call_programs[pair] = self.call_programs.get(pair, 0) | self.bit
        self.calls = calls

    # ------------------------------------------------------------ merging

    # ------------------------------------------------------------ the result

    def result(self) -> Samples:
        roots = self.view.roots
        if roots:
            unit, count_unit = self._merge_rooted()
        else:
            unit, count_unit = one_unit(self.sets), self.sets[0].factor
        if self.with_stacks and not roots:  # (with roots, each set is a report of its own)
            for s in self.without_stacks:
                self.warn(f"{s.path}: no call-stack data; its samples count "
                          "as stacks of one frame in the call graph")
        events = list(dict.fromkeys(s.event for s in self.sets))
        if self.profile.in_time:
            events = [self.profile.metric]
        granularities = sorted({s.granularity for s in self.sets if s.granularity})
        escape = self.escape
        tasks = [_summary(s.summary, escape) for s in self.sets]
        lost = lost_once(s.lost for s in self.sets if s.lost is not None)
        view = self.view
        if self.profile.in_time and self.profile.metric != "cpu":
            granularities = []
        samples = Samples(",".join(events), unit, granularities, count_unit, lost.records,
                          tasks, self.table.frames, self.stacks, self.with_stacks > 0,
                          self.calls, self.quality, by=view.by,
                          unnamed=frozenset(self.unnamed), programs=tuple(self.programs),
                          stack_programs=self.stack_programs,
                          call_programs=self.call_programs, lost_share=lost.share)
        if not math.isfinite(samples.total):
            raise ViewError("sample weights overflow (total is not finite)")
        if self.profile.in_time and not roots:  # docs/q-format.md 4.9: nanoseconds
            samples = samples.replace(unit="seconds", count_unit=NANOSECOND)
        return processed(samples, view, self.profile.in_time, self.table)

    def _merge_rooted(self) -> tuple[str, float]:
        """Each set's stacks under its process frame, weighed as the view
        says (the stack quality of folded stacks is not counted); the unit
        and output units per count of the result."""
        self.quality = StackQuality()
        self.calls = None
        view = self.view
        parts = [(s, local, *self._units(s)) for s, local in self.rooted]
        if view.weight == "samples":
            scales = [_per_sample(s, local) for s, local, _u, _c in parts]
            unit, count_unit = "samples", 1.0
        else:
            scales, unit, count_unit = _event_counts(
                [(local, unit, count) for _s, local, unit, count in parts], self.warn)
        escape, acc, cap = self.escape, self.stacks, self.max_stacks
        for (s, local, _u, _c), scale in zip(parts, scales):
            label = s.root_label_pid if view.per_pid else s.root_label
            root = (self.table.id(Frame(escape(label), PROCESS_OBJECT, False)),)
            for stack, w in local.items():
                if w > 0:
                    key = stack + root
                    before = acc.get(key)
                    if before is None:
                        if len(acc) >= cap:
                            raise exceeded(f"more than {cap} distinct stacks",
                                           s.path, "stacks", cap)
                        acc[key] = w * scale
                    else:
                        acc[key] = before + w * scale
        return unit, count_unit

    def _units(self, s: SetFacts) -> tuple[str, float]:
        """(unit, output units per count) of one set's stacks."""
        return ("seconds", NANOSECOND) if self.profile.in_time else (s.unit, s.factor)


def processed(samples: Samples, view: View, in_time: bool = False,
              table: FrameTable | None = None) -> Samples:
    """Samples -> Samples: the view's kernel options, --python and name
    filters, each step over the stacks the one before left (so sums are
    those of the stacks grouped). Percentages stay shares of the stacks
    before the name filters (``Samples.whole``), and call counts stay only
    where the steps keep both ends. ``table``: the frame table of
    ``samples.frames``, where the caller has it."""
    if not view.processes:
        return samples
    processing = Processing(view, table or FrameTable.of(samples.frames), in_time)
    stacks, whole, programs = samples.stacks, None, samples.stack_programs
    for name, step in processing.stages():
        if name == "filter" and whole is None:
            whole = math.fsum(stacks.values())
        on_frames = processing.stage(step)
        acc: dict[tuple[int, ...], float] = {}
        kept_programs: dict[tuple[int, ...], int] | None = None if programs is None else {}
        for stack, w in stacks.items():
            kept = on_frames(stack)
            if kept is not None:
                acc[kept] = acc.get(kept, 0.0) + w
                if kept_programs is not None:
                    kept_programs[kept] = kept_programs.get(kept, 0) | programs[stack]  # type: ignore[index]
        stacks, programs = acc, kept_programs
    calls = None if samples.calls is None else processing.calls(samples.calls, stacks)
    return samples.replace(stacks=stacks, calls=calls, stack_programs=programs,
                           frames=processing.table.frames,
                           whole=samples.whole if whole is None else whole,
                           filters=samples.filters + view.filters,
                           unnamed=frozenset() if view.python else samples.unnamed)


def _event_counts(parts: list[tuple[dict[tuple[int, ...], float], str, float]], warn: Warn
                  ) -> tuple[list[float], str, float]:
    """How each set's weights (output units) become the event counts folded
    stacks show: (scale of each set, unit, output units per count).

    Sets whose counts are the same size keep them (nanoseconds for clocks,
    events for count events). Where they differ, one unit is made for all:
    nanoseconds for time (cycles at different clock rates), the output
    unit otherwise. Sets in different units cannot be made the same: each
    keeps its own counts, and a warning says so."""
    weighed = [p for p in parts if p[0]] or parts  # a set without samples has no say
    _stacks, first_unit, first_count = weighed[0]
    units = sorted({unit for _s, unit, _c in weighed})
    if len(units) > 1:
        warn("the merged sets are measured in different units (" + ", ".join(units)
             + "); each set's stacks weigh its own event counts")
        return [1.0 / (count or 1.0) for _s, _u, count in parts], "events", 1.0
    if all(math.isclose(count, first_count, rel_tol=1e-12) for _s, _u, count in weighed):
        return [1.0] * len(parts), first_unit, first_count
    return [1.0] * len(parts), first_unit, NANOSECOND if first_unit == "seconds" else 1.0


def _per_sample(s: SetFacts, stacks: dict[tuple[int, ...], float]) -> float:
    """1 / the weight of one sample of the set, in output units."""
    if not stacks:
        return 1.0
    if not s.granularity or s.granularity <= 0:
        raise ViewError("--weight samples: the set does not say what one sample weighs "
                        "(no q:y-granularity)", s.path)
    return 1.0 / s.granularity


def _summary(t: SetSummary, escape: Escape) -> SetSummary:
    return SetSummary(escape(t.file), t.directory, t.comm and escape(t.comm), t.pid, t.pids,
                      t.cpu, escape(t.command), t.hist_file and escape(t.hist_file),
                      t.host and escape(t.host), t.unit and escape(t.unit),
                      t.container and escape(t.container))


def samples(profile: Profile, sets: Iterable[SetSamples], warn: Warn, max_stacks: int,
            max_frames: int | None) -> Samples:
    """The profile's ``sets`` grouped as its view says."""
    grouper = Grouper(profile, warn, max_stacks, max_frames)
    for s in sets:
        grouper.add(s)
    return grouper.result()

