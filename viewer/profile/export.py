"""Profiles for other tools: the tables pprof and OpenTelemetry profiles share.

The reports fold each address into its function (``build.SampleBuilder``);
an export keeps what they fold away: every location with its address and
mapping, and each set's labels (comm, pid, cpu, host, and the thread where
the set has a `.threads` file), so that pprof, Pyroscope or an
OpenTelemetry collector can slice by them. One builder
makes the tables (mappings, functions, locations, labels, samples), and
each format is an encoder of them (render/pprof.py, render/otlp.py).

Samples are the sets' distinct stacks of locations, innermost first, one
per set's labels (thread included) and stack, with two values: samples (a
count) and the event (nanoseconds for a clock, the set's own unit
otherwise); with ``--event off-cpu|cpu-wait|wall`` one value, that time in
nanoseconds. The flat profile of an export is q-view's with the same
``--event`` and ``--tid``: the same stacks, the same leaves (the
histogram's leaves beyond the stacks and the stacks not kept included).

A set's CPU samples are split by thread only where its `.threads` file
adds up to its `.hist` (threadlocs.locate_cpu_by_thread); where it does
not, the set is exported from its `.stack` without thread labels, as sets
of earlier releases are, and q-view says so once.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Iterator, TypeVar

from qtools.qformat import DEFAULT_LIMITS, LimitExceeded, QFormatError
from qtools.qformat.limits import exceeded

from ..model.errors import UsageError, ViewError
from ..inputs.load import StoredSet
from .locate import SetLocations, locate_set
from .threadlocs import ThreadView, locate_cpu_by_thread, locate_threads
from ..naming.demangle import demangle
from ..naming.space import AddressSpace
from ..naming.symbols import KERNEL_OBJECT, Symbolized, Symbols, Warn
from ..render.units import SECONDS
from .build import one_unit
from .report import symbolizer, thread_view

NANOSECONDS = "nanoseconds"
KERNEL_LIMIT = (1 << 64) - 1  # the kernel's mapping reaches the top of the address space
INT64_MAX = (1 << 63) - 1  # sample values are int64
UNKEPT = "[stacks not kept]"  # build.UNKEPT's frame: the collector kept no stack
COLLECTOR = "[q-syscollect]"

# Options that shape q-view's own reports; pprof has its own (-focus,
# -ignore, -hide, -nodefraction) and applies them to the whole profile.
REPORT_ONLY = (("focus", "--focus"), ("ignore", "--ignore"), ("hide", "--hide"),
               ("python", "--python"), ("stacks", "--stacks"), ("per_pid", "--per-pid"),
               ("min_percent", "--min-percent"), ("metrics", "--metrics"))


@dataclass(frozen=True)
class Mapping:
    start: int
    limit: int
    offset: int  # in the file, of ``start``
    file: str  # the object's original path ([kernel.kallsyms] for the kernel)
    build_id: str


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
    function: int  # index into ``Tables.functions``: the symbol the address is in
    # (function index, source line) from DWARF, innermost first: the
    # functions inlined here, then ``function`` (empty: no line table)
    lines: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Labels:
    comm: str | None
    pid: int | None
    cpu: int | None
    host: str | None
    unit: str | None = None  # the systemd unit (q:unit)
    container: str | None = None  # the container id (q:container)
    tid: int | None = None  # the thread (from a `.threads` file)
    thread: str | None = None  # its name

    def pairs(self) -> list[tuple[str, str]]:
        """The labels that are known, as text: pid and cpu too, as Pyroscope and
        Parca take labels (and cpu 0 stays cpu 0, not an unset number)."""
        known = (("comm", self.comm), ("pid", self.pid), ("cpu", self.cpu),
                 ("host", self.host), ("unit", self.unit), ("container", self.container),
                 ("thread", self.thread))
        return [(key, str(value)) for key, value in known if value is not None and value != ""]

    def numbers(self) -> list[tuple[str, int]]:
        """The numeric labels: the thread id, as pprof's schema names it."""
        return [("thread_id", self.tid)] if self.tid is not None else []


@dataclass(frozen=True)
class Sample:
    labels: int  # index into ``Tables.labels``
    locations: tuple[int, ...]  # indexes into ``Tables.locations``, innermost first
    samples: int
    value: int  # in ``Tables.unit``


@dataclass
class Tables:
    event: str
    unit: str  # of ``Sample.value``: nanoseconds for time
    counted: bool  # ``Sample.samples`` are sample counts (not for time off the CPU)
    period: int | None  # one sample's weight, in ``unit``, where every set agrees
    time_nanos: int | None  # when the earliest set began (Unix time)
    duration_nanos: int | None  # to the end of the latest
    mappings: list[Mapping]
    functions: list[Function]
    locations: list[Location]
    labels: list[Labels]
    samples: list[Sample]


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


def check_options(args: argparse.Namespace) -> None:
    """UsageError for the options an export does not take."""
    for attr, option in REPORT_ONLY:
        if getattr(args, attr, None):
            raise UsageError(f"{option} shapes q-view's reports; --format {args.format} exports "
                             "the whole selection (pprof has its own -focus, -ignore, -hide)")
    if args.by == "thread":
        raise UsageError(f"--format {args.format} labels each sample with its thread "
                         "already (where the sets have per-thread data); --by does not apply")
    if args.by != "function":
        raise UsageError(f"--format {args.format} exports functions with their addresses; "
                         "--by does not apply")
    if args.watch or args.overview:
        option = "--watch" if args.watch else "--overview"
        raise UsageError(f"{option} is a report of q-view's; --format {args.format} writes "
                         "a profile")


def build(sets: list[StoredSet], symbols: Symbols, warn: Warn, kernel: bool | None = None,
          view: ThreadView = ThreadView()) -> Tables:
    """The tables of ``sets``; ``kernel`` False: user samples only (--no-kernel),
    True: kernel samples with their kernel frames only (--kernel-only);
    ``view``: the metric and threads (--event, --tid)."""
    limits = sets[0].limits if sets else DEFAULT_LIMITS
    builder = _Builder(kernel, limits.stacks, limits.addresses, view.metric)
    for sl in _located(sets, symbols, warn, view):
        builder.add(sl)
    return builder.result()


def _located(sets: list[StoredSet], symbols: Symbols, warn: Warn, view: ThreadView
             ) -> Iterator[SetLocations]:
    """Each set's stacks, each under its thread where the set has them by
    thread; the sets whose `.threads` does not add up told once, at the end."""
    by_thread = view._replace(by_thread=True)
    unsplit: list[str] = []
    for index, ts in enumerate(sets):
        space = symbols.space(ts.directory, ts.info)
        if view.needed:
            yield locate_threads(ts, index, space, by_thread, warn)
            continue
        sl = None
        if ts.info.threads is not None:
            try:
                sl = locate_cpu_by_thread(ts, index, space, warn)
                if sl is None:
                    unsplit.append(ts.path)
            except LimitExceeded:
                raise
            except QFormatError as e:  # a bad or missing `.threads`: the `.stack` holds
                warn(f"{e}; exported without thread labels")
        yield sl or locate_set(ts, index, space, warn)
    if unsplit:
        more = f" and {len(unsplit) - 1} other set(s)" if len(unsplit) > 1 else ""
        warn(f"{unsplit[0]}{more}: per-thread CPU samples (.threads) do not add up to the "
             ".hist; exported from the .stack, without thread labels")


@dataclass
class _Builder:
    kernel: bool | None
    max_stacks: int
    max_locations: int  # distinct locations (addresses) of the whole export
    metric: str = "cpu"  # --event: any other is time from `.threads` files, in nanoseconds
    mappings: _Interned[Mapping] = field(default_factory=_Interned)
    functions: _Interned[Function] = field(default_factory=_Interned)
    locations: _Interned[Location] = field(default_factory=_Interned)
    labels: _Interned[Labels] = field(default_factory=_Interned)
    # (labels, locations) -> [samples, value], summed in floats, rounded at the end
    acc: dict[tuple[int, tuple[int, ...]], list[float]] = field(default_factory=dict)
    kernel_of: list[bool] = field(default_factory=list)  # location index -> a kernel frame
    sets: list[StoredSet] = field(default_factory=list)

    def add(self, sl: SetLocations) -> None:
        try:
            self._add(sl)
        except LimitExceeded as e:  # the locations': the set that brought one too many
            raise e.located(sl.stack_file or sl.stored.path) from None

    def _add(self, sl: SetLocations) -> None:
        ts = sl.stored
        self.sets.append(ts)
        base = Labels(_text(ts.comm), ts.pid, ts.cpu, _text(ts.info.task.hostname),
                      _text(ts.service), _text(ts.container))
        labels = self.labels.id(base)
        if sl.factor_override is not None:  # time from a `.threads` file: nanoseconds
            value_per_count, samples_per_count = sl.factor_override * 1e9, 0.0
        else:
            value_per_count = ts.factor * (1e9 if ts.unit == SECONDS else 1.0)
            g = ts.info.histogram.y_granularity if ts.info.histogram else None
            # without the weight of one sample, each count is one (count events)
            samples_per_count = ts.factor / g if g and g > 0 else 1.0
        # the location that stands for a thread (threadlocs.py) -> the labels with it
        by_root = {root: self.labels.id(dataclasses.replace(
            base, tid=sl.locations[root].address,
            thread=_text(sl.thread_names.get(sl.locations[root].address))))
            for root in sl.thread_roots}
        ids: list[int | None] = [None] * len(sl.locations)

        def loc(lid: int) -> int:
            i = ids[lid]
            if i is None:
                i = ids[lid] = self._location(sl, lid)
            return i

        def put(stack: tuple[int, ...], count: int, labels: int = labels) -> None:
            kept = self._keep(stack)
            if not kept or not count:
                return
            key = (labels, kept)
            values = self.acc.get(key)
            if values is None:
                if len(self.acc) >= self.max_stacks:
                    raise exceeded(f"more than {self.max_stacks} distinct stacks",
                                   sl.stack_file or ts.path, "stacks", self.max_stacks)
                values = self.acc[key] = [0.0, 0.0]
            values[0] += count * samples_per_count
            values[1] += count * value_per_count

        for lstack, count in sl.stacks.items():
            thread = by_root.get(lstack[-1])
            if thread is None:
                put(tuple(loc(lid) for lid in lstack), count)
            elif len(lstack) > 1:
                put(tuple(loc(lid) for lid in lstack[:-1]), count, thread)
            else:  # the thread's weight without a stack
                put((self._unkept(),), count, thread)
        for lid, count in sl.spread.items():
            put((loc(lid),), count)
        if sl.unkept:
            put((self._unkept(),), sl.unkept)

    def _keep(self, stack: tuple[int, ...]) -> tuple[int, ...]:
        """--no-kernel and --kernel-only, as ``processors`` applies them."""
        if self.kernel is None:
            return stack
        kernel_of = self.kernel_of
        if self.metric != "cpu" and self.kernel is False:
            # time off the CPU starts in the scheduler: the kernel frames go, the time
            # stays with the user code that entered the kernel (processors.strip_kernel)
            return tuple(i for i in stack if not kernel_of[i]) or stack[-1:]
        if kernel_of[stack[0]] != self.kernel:
            return ()
        return tuple(i for i in stack if kernel_of[i] == self.kernel)

    def _location(self, sl: SetLocations, lid: int) -> int:
        where = sl.locations[lid]
        space = sl.space
        sym = space.lookup(where.address, where.is_return)
        lines = () if sym.kernel else self._lines(space, where.address, where.is_return, sym)
        function = lines[-1][0] if lines else self.functions.id(
            Function(sym.name, sym.object, sym.kernel))
        mapping: int | None = None
        if sym.kernel:
            # locations are written where they are named (a return address less one)
            mapping = self.mappings.id(Mapping(space.kernel_names_from, KERNEL_LIMIT, 0,
                                               KERNEL_OBJECT, ""))
        else:
            found = space.mapping(where.address, where.is_return)
            if found is not None:
                m, ref = found
                mapping = self.mappings.id(Mapping(m.addr, min(m.addr + m.size, KERNEL_LIMIT),
                                                   m.offset,
                                                   ref.path or ref.name, ref.build_id or ""))
        address = where.address - 1 if where.is_return and where.address > 0 else where.address
        return self._add_location(Location(mapping, address, function, lines), sym.kernel)

    def _lines(self, space: AddressSpace, address: int, is_return: bool,
               sym: Symbolized) -> tuple[tuple[int, int], ...]:
        """pprof's Line entries of a user location, innermost first."""
        chain = space.inlined(address, is_return, with_line=True)
        if not chain:
            line = space.line(address, is_return)
            if line is None:
                return ()
            chain = [("", line[0], line[1])]
        out = []
        for name, path, number in chain:
            shown = demangle(name) if name else sym.name
            out.append((self.functions.id(Function(shown, sym.object, False, path)), number))
        return tuple(out)

    def _add_location(self, location: Location, kernel: bool) -> int:
        if len(self.kernel_of) >= self.max_locations and location not in self.locations.index:
            raise exceeded(f"more than {self.max_locations} distinct locations in the profile",
                           None, "addresses", self.max_locations)
        i = self.locations.id(location)
        if i == len(self.kernel_of):
            self.kernel_of.append(kernel)
        return i

    def _unkept(self) -> int:
        function = self.functions.id(Function(UNKEPT, COLLECTOR, False))
        return self._add_location(Location(None, 0, function), False)

    def result(self) -> Tables:
        in_time = self.metric != "cpu"
        unit = NANOSECONDS if in_time else one_unit(self.sets)
        unit = NANOSECONDS if unit == SECONDS else unit
        samples = []
        for (labels, stack), (count, value) in self.acc.items():
            if not (math.isfinite(count) and math.isfinite(value)):
                raise ViewError("sample weights overflow (not finite)")
            n, v = round(count), round(value)
            if max(n, v) > INT64_MAX:
                raise ViewError("sample weights overflow (beyond 64 bits)")
            if n or v:
                samples.append(Sample(labels, stack, n, v))
        starts = [ts.info.task.start_time for ts in self.sets
                  if ts.info.task.start_time is not None]
        ends = [ts.info.task.end_time for ts in self.sets if ts.info.task.end_time is not None]
        begin = min(starts) if starts else None
        end = max(ends) if ends else None
        event = self.metric if in_time else ",".join(dict.fromkeys(ts.event
                                                                     for ts in self.sets))
        return Tables(event, unit, not in_time, None if in_time else self._period(),
                      _nanos(begin),
                      _nanos(end - begin) if begin is not None and end is not None
                      and end >= begin else None,
                      self.mappings.items, self.functions.items, self.locations.items,
                      self.labels.items, samples)

    def _period(self) -> int | None:
        periods = {ts.info.histogram.y_granularity * (1e9 if ts.unit == SECONDS else 1.0)
                   for ts in self.sets if ts.info.histogram and ts.info.histogram.y_granularity}
        return round(periods.pop()) if len(periods) == 1 else None


def _text(value: str | None) -> str | None:
    return value or None  # as the .q says: the exports are data (viewer/model/escape.py)


def _nanos(seconds: float | None) -> int | None:
    return round(seconds * 1e9) if seconds is not None and math.isfinite(seconds) else None


Encoder = Callable[[Tables], bytes]


def exported(sets: list[StoredSet], args: argparse.Namespace, warn: Warn,
             encode: Encoder) -> bytes:
    """The selection ``args`` ask for, in the format ``encode`` writes."""
    symbols = symbolizer(args, warn, sets)
    try:
        kernel = False if args.no_kernel else True if args.kernel_only else None
        tables = build(sets, symbols, warn, kernel, thread_view(args))
    finally:
        symbols.close()
    try:
        return encode(tables)
    except ValueError as e:  # a number out of the schema's range: only a hostile .q has one
        raise ViewError(f"cannot write --format {args.format}: {e}") from None
