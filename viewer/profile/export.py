"""Profiles for other tools: the tables pprof and OpenTelemetry profiles share.

An export is the profile a report shows, grouped through the same view
(``--by``, the kernel options, ``--python``, ``--focus``, ``--ignore``,
``--hide``), but each frame kept at its location: every location with its
address and mapping, its frames as lines (innermost first: what was
inlined there, then its function, with source lines where DWARF has
them), and each set's labels (comm, pid, cpu, host, unit, container, and
the thread where the set has a `.threads` file), so that pprof, Pyroscope
or an OpenTelemetry collector can slice by them. One builder makes the
tables (mappings, functions, locations, labels, samples), and each format
is an encoder of them (render/pprof.py, render/otlp.py).

Samples are the sets' distinct stacks of locations, one per labels and
stack, with two values: samples (a count) and the event (nanoseconds for
a clock, the set's own unit otherwise); with a metric of time off the CPU
(off-cpu, cpu-wait, wall) one value, that time in nanoseconds. The flat
profile of an export is q-view's of the same options: the same stacks,
the same leaves (the histogram's leaves beyond the stacks and the stacks
not kept included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, TypeVar

from qtools.qformat import LimitExceeded
from qtools.qformat.limits import exceeded

from ..model.viewerrors import ViewError
from ..model.frames import Frame, FrameTable
from ..model.profile import Labels, Mapping, Profile, SetFacts, SetSamples
from .setframes import SetFrames
from .group import UNKEPT as UNKEPT_FRAME, one_unit
from .process import Processing

NANOSECONDS = "nanoseconds"
INT64_MAX = (1 << 63) - 1  # sample values are int64
UNKEPT, COLLECTOR = UNKEPT_FRAME  # the frame of stacks the collector did not keep
SECONDS = "seconds"
INLINED = " (inlined)"  # how a report names an inlined function's frame

@dataclass(frozen=True)
class Function:
    name: str
    object: str  # where it is (q-view's frame)
    kernel: bool
    filename: str = ""  # its source file, where DWARF names it


@dataclass(frozen=True)
class Location:
    mapping: int | None  # index into ``Tables.mappings``; None: no mapping (JIT, unknown)
    address: int  # of the instruction: a return address less one, inside the call
    function: int  # index into ``Tables.functions``: the frame the location is in
    # (function index, source line) of each frame the view keeps here,
    # innermost first: the functions inlined here, then ``function``
    lines: tuple[tuple[int, int], ...] = ()
    has_lines: bool = False  # source lines are known (DWARF)


@dataclass(frozen=True)
class Sample:
    labels: int  # index into ``Tables.labels``
    locations: tuple[int, ...]  # indexes into ``Tables.locations``, innermost first
    values: tuple[int, ...]  # one per ``Tables.types``


@dataclass
class Tables:
    # (type, unit) of each of a sample's values: the sample count first where
    # the samples are a metric, then each metric's time or event count
    types: list[tuple[str, str]]
    default_type: str  # the first metric's: what a viewer shows first
    period_type: tuple[str, str]  # (type, unit) of ``period``
    period: int | None  # one sample's weight, where every set agrees
    time_nanos: int | None  # when the earliest set began (Unix time)
    duration_nanos: int | None  # to the end of the latest
    mappings: list[Mapping]
    functions: list[Function]
    locations: list[Location]
    labels: list[Labels]
    samples: list[Sample]

    @property
    def unit(self) -> str:
        """The unit of the period (nanoseconds for time)."""
        return self.period_type[1]


_K = TypeVar("_K", bound=Hashable)


class Strings:
    """A string table (pprof, OpenTelemetry): each string once, "" at index 0."""

    def __init__(self) -> None:
        self.table: list[str] = [""]
        self.index: dict[str, int] = {"": 0}

    def __call__(self, text: str | None) -> int:
        if not text:
            return 0
        i = self.index.get(text)
        if i is None:
            i = self.index[text] = len(self.table)
            self.table.append(text)
        return i


class _Interned(Generic[_K]):
    """Values in order of first use, each once: a table and its index."""

    def __init__(self) -> None:
        self.items: list[_K] = []
        self.index: dict[_K, int] = {}

    def id(self, value: _K) -> int:
        i = self.index.get(value)
        if i is None:
            i = self.index[value] = len(self.items)
            self.items.append(value)
        return i


def tables(profiles: list[Profile], max_stacks: int, max_frames: int | None = None
           ) -> Tables:
    """The export tables of ``profiles``, the same sets' profiles of one
    metric each, through their views: one value column per metric (and the
    sample count where the samples are one)."""
    builder = _Builder(profiles, max_stacks, FrameTable(max_frames))
    for profile in profiles:
        builder.metric(profile)
        for s in profile.each_set():
            try:
                builder.add(s)
            except LimitExceeded as e:  # the frames': the set that brought one too many
                raise e.located(s.stack_file or s.path) from None
    return builder.result()


class _Builder:
    def __init__(self, profiles: list[Profile], max_stacks: int, table: FrameTable) -> None:
        self.profiles = profiles
        metrics = [p.metric for p in profiles]
        # value columns: the sample count where the samples are a metric
        self.counted = "cpu" in metrics
        self.width = len(metrics) + self.counted
        self.max_stacks = max_stacks
        self.table = table  # the views' frames: the functions' names
        self.mappings: _Interned[Mapping] = _Interned()
        self.functions: _Interned[Function] = _Interned()
        self.locations: _Interned[Location] = _Interned()
        self.labels: _Interned[Labels] = _Interned()
        # (labels, locations) -> values, summed in floats, rounded at the end
        self.acc: dict[tuple[int, tuple[int, ...]], list[float]] = {}
        self.sets: list[SetFacts] = []  # the samples' sets (those of one metric)
        self.column = 0  # of the metric being added
        self.profile = profiles[0]
        self.processing: Processing | None = None

    def metric(self, profile: Profile) -> None:
        """Add ``profile``'s samples next, into its metric's column."""
        self.profile = profile
        self.view = profile.view
        self.column = self.profiles.index(profile) + self.counted
        self.processing = Processing(self.view, self.table, profile.in_time) \
            if self.view.processes else None
        self.collapse_runs = self.view.by == "object"
        self.sets = []

    def add(self, s: SetSamples) -> None:
        self.sets.append(s.facts())
        names = SetFrames(self.table, self.view, s, set())
        labels = self.labels.id(s.labels)
        column = self.column
        if s.counts_in_time:  # time from a `.threads` file: nanoseconds
            value_per_count, samples_per_count = s.factor * 1e9, 0.0
        else:
            value_per_count = s.factor * (1e9 if s.unit == SECONDS else 1.0)
            # without the weight of one sample, each count is one (count events)
            g = s.granularity
            samples_per_count = s.factor / g if g and g > 0 else 1.0
        counted = self.counted and not self.profile.in_time
        # the location that stands for a thread (threadlocs.py) -> the labels with it
        by_root = {root: self.labels.id(s.labels._replace(tid=tid, thread=name))
                   for root, (tid, name) in s.thread_roots.items()}
        located = _SetLocations(self, s, names)

        def put(stack: list[tuple[int | None, tuple[int, ...]]], count: int,
                labels: int = labels) -> None:
            if self.collapse_runs:
                stack = _collapsed(stack)
            if self.processing is not None:
                kept = self.processing.located(stack)
                if kept is None:
                    return
                stack = kept
            ids = tuple(located.location(lid, fs) for lid, fs in stack if fs)
            if not ids or not count:
                return
            key = (labels, ids)
            values = self.acc.get(key)
            if values is None:
                if len(self.acc) >= self.max_stacks:
                    raise exceeded(f"more than {self.max_stacks} distinct stacks",
                                   s.stack_file or s.path, "stacks", self.max_stacks)
                values = self.acc[key] = [0.0] * self.width
            if counted:
                values[0] += count * samples_per_count
            values[column] += count * value_per_count

        at = names.at
        unkept = (None, (self.table.id(Frame(UNKEPT, COLLECTOR, False)),))
        names.name_all(s.stack_locations)
        for lstack, count in s.stacks.items():
            thread = by_root.get(lstack[-1])
            if thread is None:
                put([(lid, at(lid, i == 0)) for i, lid in enumerate(lstack)], count)
            elif len(lstack) > 1:
                put([(lid, at(lid, i == 0)) for i, lid in enumerate(lstack[:-1])], count,
                    thread)
            else:  # the thread's weight without a stack
                put([unkept], count, thread)
        for lid, count in s.spread.items():
            put([(lid, at(lid, True))], count)
        if s.unkept:
            put([unkept], s.unkept)

    def result(self) -> Tables:
        types = [("samples", "count")] if self.counted else []
        sets = self.sets  # those of the last metric: every metric's are the same sets
        for profile in self.profiles:
            if profile.in_time:
                types.append((profile.metric, NANOSECONDS))
            else:
                unit = one_unit(sets)
                types.append((",".join(dict.fromkeys(s.event for s in sets)),
                              NANOSECONDS if unit == SECONDS else unit))
        samples = []
        for (labels, stack), floats in self.acc.items():
            if not all(math.isfinite(v) for v in floats):
                raise ViewError("sample weights overflow (not finite)")
            values = tuple(round(v) for v in floats)
            if max(values) > INT64_MAX:
                raise ViewError("sample weights overflow (beyond 64 bits)")
            if any(values):
                samples.append(Sample(labels, stack, values))
        starts = [s.start_time for s in sets if s.start_time is not None]
        ends = [s.end_time for s in sets if s.end_time is not None]
        begin = min(starts) if starts else None
        end = max(ends) if ends else None
        first = types[self.counted]
        return Tables(types, first[0], first, None if self.profiles[0].in_time
                      else self._period(), _nanos(begin),
                      _nanos(end - begin) if begin is not None and end is not None
                      and end >= begin else None,
                      self.mappings.items, self.functions.items, self.locations.items,
                      self.labels.items, samples)

    def _period(self) -> int | None:
        periods = {s.granularity * (1e9 if s.unit == SECONDS else 1.0)
                   for s in self.sets if s.granularity}
        return round(periods.pop()) if len(periods) == 1 else None


class _SetLocations:
    """One set's locations in the export's tables: each location with the
    frames the view keeps of it, once."""

    def __init__(self, builder: _Builder, s: SetSamples, names: SetFrames) -> None:
        self.builder = builder
        self.s = s
        self.names = names
        self.memo: dict[tuple[int | None, tuple[int, ...]], int] = {}
        self.lines: dict[int, list[tuple[int, str, int]]] = {}

    def location(self, lid: int | None, frames: tuple[int, ...]) -> int:
        key = (lid, frames)
        i = self.memo.get(key)
        if i is None:
            i = self.memo[key] = self._location(lid, frames)
        return i

    def _location(self, lid: int | None, frames: tuple[int, ...]) -> int:
        b = self.builder
        table = b.table.frames
        if lid is None:  # a frame of the view's own: no address, no mapping
            lines = tuple((b.functions.id(_function(table[f], "")), 0) for f in frames)
            return b.locations.id(Location(None, 0, lines[-1][0], lines))
        s = self.s
        locations = s.locations
        address, is_return = locations.addresses[lid], bool(locations.returns[lid])
        where = self._where(lid) if b.view.by == "function" else []
        lines = tuple(_line(b, table[f], where, f) for f in frames)
        found = s.names.export_mapping(locations.places[lid])
        mapping = None if found is None else b.mappings.id(found)
        # locations are written where they are named (a return address less one)
        shown = address - 1 if is_return and address > 0 else address
        return b.locations.id(Location(mapping, shown, lines[-1][0], lines,
                                       any(n for _f, n in lines)))

    def _where(self, lid: int) -> list[tuple[int, str, int]]:
        """(frame, source path, line) of each frame of a user location, as DWARF
        says, innermost first: what was inlined there, then its function."""
        found = self.lines.get(lid)
        if found is None:
            names, s = self.names, self.s
            locations = s.locations
            address, is_return = locations.addresses[lid], bool(locations.returns[lid])
            found = []
            if not names.kernel[lid] and lid not in s.thread_roots:
                chain = s.names.inlined(address, is_return, with_line=True)
                if not chain:
                    line = s.names.line(address, is_return)
                    chain = [("", line[0], line[1])] if line is not None else []
                frames = (*names.chain(lid), names.frame(lid)) if names.with_inline() \
                    else (names.frame(lid),)
                named = [(path, number) for name, path, number in chain if name]
                last = [(path, number) for name, path, number in chain if not name]
                places = named[:len(frames) - 1] + (last or [("", 0)])
                if len(places) == len(frames):
                    found = [(f, path, number) for f, (path, number) in zip(frames, places)]
            self.lines[lid] = found
        return found


def _line(b: _Builder, frame: Frame, where: list[tuple[int, str, int]], fid: int
          ) -> tuple[int, int]:
    """A pprof line of a frame: its function, and its source line where known."""
    for f, path, number in where:
        if f == fid:
            return b.functions.id(_function(frame, path)), number
    return b.functions.id(_function(frame, "")), 0


def _function(frame: Frame, path: str) -> Function:
    """A frame as other tools' functions name it: an inlined one by its own
    name (the location's lines say it was inlined)."""
    name = frame.name
    if frame.inlined and name.endswith(INLINED):
        name = name[:-len(INLINED)]
    return Function(name, frame.object, frame.kernel, path)


def _collapsed(stack: list[tuple[int | None, tuple[int, ...]]]
               ) -> list[tuple[int | None, tuple[int, ...]]]:
    """--by object: a run of one object's locations is one visit, its first."""
    out: list[tuple[int | None, tuple[int, ...]]] = []
    last = None
    for lid, fs in stack:
        kept = tuple(f for i, f in enumerate(fs) if f != (fs[i - 1] if i else last))
        out.append((lid, kept))
        if fs:
            last = fs[-1]
    return out


def _nanos(seconds: float | None) -> int | None:
    return round(seconds * 1e9) if seconds is not None and math.isfinite(seconds) else None


Encoder = Callable[[Tables], bytes]
