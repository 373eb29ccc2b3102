"""From task sets to ``Samples``: locations named, grouped by ``--by``, merged.

``locations.locate`` loads each set as stacks of locations (addresses
with their mappings); here each location is named once through the one
symbolizer (``symbols.Symbols``, its memo and cache), becomes a frame as
``--by`` says (function, object or address), and the sets are merged by
frame: two sets that both ran ``cos`` in libm add up in one ``cos``.
Addresses of different processes mean different things, so each set is
named in its own address space. Counts are converted to output units
(seconds, usually) per set, so sets with different conversion factors
(cycles at different clock rates) merge correctly.
"""

from __future__ import annotations

import math
import os
from typing import Callable

from qtools.qformat import DEFAULT_LIMITS, LimitExceeded
from qtools.qformat.limits import exceeded

from ..model.errors import ViewError
from ..inputs.load import StoredSet
from .locate import SetLocations, locate
from .threadlocs import NANOSECOND, ThreadView
from ..model.escape import printable
from ..model.frames import Frame, FrameTable, SetSummary
from ..model.quality import InterpreterQuality, StackQuality
from ..model.graph import Samples
from ..naming.symbols import Symbolized, Symbols, Warn
from .pyview import is_python
from ..naming.demangle import demangle

BY_CHOICES = ("function", "object", "address", "line")

# Where a `.stack` file's remainder line (``WEIGHT -``: stacks the collector
# did not keep) goes when its `.hist` cannot say which functions it hit.
UNKEPT = ("[stacks not kept]", "[q-syscollect]")

Escape = Callable[[str], str]


SourceLine = tuple[str, int] | None  # (path, line) of a location, --by line


def line_frame(loc: Symbolized, line: SourceLine, escape: Escape = printable) -> Frame:
    """``--by line``: FILE:LINE (the file's base name, as perf's srcline
    shows it) with the function beside it; no line known, the function's
    name alone, as ``--by function`` shows it."""
    if line is None:
        return Frame(escape(loc.name), escape(loc.object), loc.kernel)
    return Frame(escape(f"{os.path.basename(line[0])}:{line[1]}"), escape(loc.object),
                 loc.kernel, escape(loc.name))


def frame_maker(by: str, escape: Escape = printable) -> Callable[[Symbolized], Frame]:
    """How a named address becomes a call-graph node for ``--by``; ``escape``
    makes names safe for the report (JSON escapes by itself)."""
    if by in ("function", "line"):  # a line without its source line is its function
        return lambda loc: Frame(escape(loc.name), escape(loc.object), loc.kernel)
    if by == "object":
        return lambda loc: Frame(escape(loc.object), escape(loc.object), loc.kernel)
    if by == "address":
        def at_address(loc: Symbolized) -> Frame:
            if loc.by_fde:  # unnamed code: the address itself, not START+offset
                return Frame(f"0x{loc.offset:x}<{escape(loc.object)}>",
                             escape(loc.object), loc.kernel)
            name = escape(loc.name)
            if loc.start is not None:
                name += f"+0x{loc.offset - loc.start:x}"
            return Frame(name, escape(loc.object), loc.kernel)
        return at_address
    raise ValueError(f"unknown grouping {by!r}")


def _same(value: str) -> str:
    return value


def one_unit(sets: list[StoredSet]) -> str:
    """The unit every one of ``sets`` counts in; a merge of sets in
    different units (or of none) is refused."""
    if not sets:
        raise ViewError("no task sets to show")
    units = sorted({ts.unit for ts in sets})
    if len(units) > 1:
        raise ViewError("cannot merge task sets measured in different units ("
                        + ", ".join(units) + "); select sets of one event")
    return units[0]


class SampleBuilder:
    """Names the locations of several task sets and merges them, by frame,
    into one ``Samples``."""

    def __init__(self, by: str, warn: Warn, escape: Escape | None = printable,
                 max_stacks: int = DEFAULT_LIMITS.stacks, inline: bool = False,
                 max_frames: int = DEFAULT_LIMITS.addresses) -> None:
        self.by = by
        # Functions DWARF says were inlined are frames of their own in the
        # stacks (``name (inlined)``); the leaf's only with ``inline``, so
        # that self time stays on the containing symbol by default, as perf
        # keeps it.
        self.inline_frames = by == "function"
        self.inline = inline
        self.escape = escape or _same
        self.make_frame = frame_maker(by, self.escape)
        self.max_stacks = max_stacks
        # Grouped by object, the frames of one object follow each other in a
        # stack; a run of them is one visit of the object, not recursion.
        self.collapse_runs = by == "object"
        self.warn = warn
        self.table = FrameTable(max_frames)
        self.unnamed: set[int] = set()  # frames of single addresses (no symbol, no FDE)
        self.stacks: dict[tuple[int, ...], float] = {}
        self.calls: dict[tuple[int, int], float] | None = None
        self.quality = StackQuality()
        self.sets: list[StoredSet] = []
        self.with_stacks = 0
        self.without_stacks: list[StoredSet] = []  # sets whose .info names no .stack

    @property
    def frames(self) -> list[Frame]:
        return self.table.frames

    def _id(self, loc: Symbolized) -> int:
        table = self.table
        before = len(table.frames)
        fid = table.id(self.make_frame(loc))
        if fid == before and self.by == "function" and loc.start is None \
                and loc.name.startswith("0x"):
            self.unnamed.add(fid)
        return fid

    def add(self, sl: SetLocations) -> None:
        """Add a set's stacks (or histogram), then its call counts."""
        try:
            self._add(sl)
        except LimitExceeded as e:  # the frames': the set that brought one too many
            raise e.located(sl.stack_file or sl.stored.path) from None

    def _add(self, sl: SetLocations) -> None:
        ts = sl.stored
        self.sets.append(ts)
        names = _Names(self, sl)
        factor = sl.factor
        acc = self.stacks
        if sl.from_stacks:
            self.with_stacks += 1
            self._add_stacks(sl, names, factor)
            spread: dict[tuple[int, ...], int] = {}
            for lid, count in sl.spread.items():  # counts summed per frame first
                leaf_only = names.leaf(lid)
                spread[leaf_only] = spread.get(leaf_only, 0) + count
            for leaf_only, count in spread.items():
                acc[leaf_only] = acc.get(leaf_only, 0.0) + count * factor
            self._add_unkept(sl.unkept * factor)
            self.quality.unkept += (sum(sl.spread.values()) + sl.unkept) * factor
        else:
            if sl.no_stack_file:
                self.without_stacks.append(ts)
            for (lid,), count in sl.stacks.items():
                stack = names.leaf(lid)
                acc[stack] = acc.get(stack, 0.0) + count * factor
        moved = ts.info.task.extra.get("q:hist-moved")
        if isinstance(moved, int) and not isinstance(moved, bool) and moved > 0:
            whole = sum(sl.stacks.values()) + sum(sl.spread.values()) + sl.unkept
            self.quality.moved += min(moved, whole) * factor  # no more than the set holds
        if sl.calls is not None:
            self._add_calls(sl, names)

    def _interpreter(self, ts: StoredSet) -> InterpreterQuality:
        """The per-process stack-quality entry of a set (sets of one pid share it)."""
        escape = self.escape
        key = f"{escape(ts.comm or ts.name)} pid {ts.pid}" if ts.pid is not None \
            else escape(ts.name)
        entry = self.quality.by_process.get(key)
        if entry is None:
            entry = self.quality.by_process[key] = InterpreterQuality()
        info = ts.info
        for name in info.perf_maps:
            source = f"perf map {escape(name)}"
            if source not in entry.sources:
                entry.sources.append(source)
        for j in info.jitdumps:
            source = (f"jitdump {escape(j.path or j.file)} ({j.code_loads or 0} code loads"
                      + (", cut short" if j.truncated else "") + ")")
            if source not in entry.sources:
                entry.sources.append(source)
        return entry

    def _add_stacks(self, sl: SetLocations, names: _Names, factor: float) -> None:
        """Name the set's stacks, merge them by frame, and count how complete
        its user stacks are."""
        interp = self._interpreter(sl.stored)
        space = sl.space
        locations = sl.locations
        # Hot loop: the stacks' locations are named first, in the order the
        # data met them; then each stack is list lookups.
        names.name_all(sl.stack_locations)
        fids, kernel, objects, python = names.fids, names.kernel, names.objects, names.python
        any_python = any(python)
        acc = self.stacks
        quality = self.quality
        cap = self.max_stacks
        rooted: dict[int, bool] = {}  # outermost location -> the stack is complete
        chains, chain, leaf_inline = names.chains, names.chain, self.inline
        with_inline = self.inline_frames and names.may_inline()
        for lstack, weight in sl.stacks.items():
            if with_inline:
                ids: list[int] = []
                for pos, lid in enumerate(lstack):
                    if pos or leaf_inline:
                        c = chains[lid]
                        ids.extend(c if c is not None else chain(lid))
                    ids.append(fids[lid])
            else:
                ids = [fids[lid] for lid in lstack]
            if self.collapse_runs:
                ids = [f for i, f in enumerate(ids) if i == 0 or ids[i - 1] != f]
            stack = tuple(ids)
            w = weight * factor
            before = acc.get(stack)
            if before is None:
                if len(acc) >= cap:
                    raise exceeded(f"more than {cap} distinct stacks", sl.stack_file or "",
                                   "stacks", cap)
                acc[stack] = w
            else:
                acc[stack] = before + w
            last = lstack[-1]
            if not kernel[last]:  # kernel frames come first: a user frame is last
                innermost_user = next(lid for lid in lstack if not kernel[lid])
                root = rooted.get(last)
                if root is None:
                    root = rooted[last] = space.is_root(locations.addresses[last],
                                                        bool(locations.returns[last]))
                quality.add(objects[innermost_user], w, root)
                interp.stacks += w
                if any_python and any(python[lid] for lid in lstack):
                    interp.python += w
                    if root:
                        interp.python_rooted += w

    def _add_unkept(self, weight: float) -> None:
        if weight:
            fid = self.table.id(Frame(*UNKEPT))
            self.stacks[(fid,)] = self.stacks.get((fid,), 0.0) + weight

    def _add_calls(self, sl: SetLocations, names: _Names) -> None:
        cc = sl.stored.info.call_counts
        factor = cc.conversion_factor if cc and cc.conversion_factor else 1.0
        calls = self.calls if self.calls is not None else {}
        frame = names.frame
        for (site, callee), count in (sl.calls or {}).items():
            # a call from inlined code is a call of the inlined function
            pair = (names.innermost(site), frame(callee))
            calls[pair] = calls.get(pair, 0.0) + count * factor
        self.calls = calls

    def result(self) -> Samples:
        unit = one_unit(self.sets)
        if self.with_stacks:
            for ts in self.without_stacks:
                self.warn(f"{ts.path}: no call-stack data; its samples count "
                          "as stacks of one frame in the call graph")
        events = list(dict.fromkeys(ts.event for ts in self.sets))
        granularities = sorted({ts.info.histogram.y_granularity for ts in self.sets
                                if ts.info.histogram and ts.info.histogram.y_granularity})
        escape = self.escape
        tasks = [SetSummary(escape(ts.name), ts.directory, ts.comm and escape(ts.comm), ts.pid,
                            tuple(ts.info.task.pids) if ts.info.task.pids else None, ts.cpu,
                            escape(ts.command()),
                            escape(ts.info.histogram.file) if ts.info.histogram else None,
                            ts.host and escape(ts.host), ts.service and escape(ts.service),
                            ts.container and escape(ts.container))
                 for ts in self.sets]
        lost = sum(ts.info.task.lost_samples or 0 for ts in self.sets)
        samples = Samples(",".join(events), unit, granularities, self.sets[0].factor, lost,
                          tasks, self.frames, self.stacks, self.with_stacks > 0, self.calls,
                          self.quality, by=self.by, unnamed=frozenset(self.unnamed))
        if not math.isfinite(samples.total):
            raise ViewError("sample weights overflow (total is not finite)")
        return samples


class _Names:
    """The frames of one set's locations, each location named once, when
    first needed (so symbols load, and warn, in the order the data meets
    them): its frame id, kernel or not, object, Python or not."""

    def __init__(self, builder: SampleBuilder, sl: SetLocations) -> None:
        self.builder = builder
        self.sl = sl
        n = len(sl.locations)
        self.fids: list[int] = [-1] * n  # -1: not named yet
        self.kernel = bytearray(n)  # 1: a kernel frame
        self.objects: list[str] = [""] * n
        self.python = bytearray(n)  # 1: a Python function's frame
        self.by_line = builder.by == "line"
        # the frames of the functions inlined at each location, innermost
        # first (None: not looked up yet); looked up only where a stack
        # needs them: callers, and leaves with --inline
        self.chains: list[tuple[int, ...] | None] = [None] * n

    def name_all(self, count: int) -> None:
        """Name the first ``count`` locations."""
        for lid in range(count):
            self.frame(lid)

    def frame(self, lid: int) -> int:
        fid = self.fids[lid]
        if fid < 0 and lid in self.sl.thread_roots:  # --by thread (threadlocs.py)
            root = self.sl.thread_roots[lid]
            fid = self.fids[lid] = self.builder.table.id(
                root._replace(name=self.builder.escape(root.name)))
            self.kernel[lid] = True  # no user frame: left out of the stack quality
        elif fid < 0:
            locations = self.sl.locations
            address, is_return = locations.addresses[lid], bool(locations.returns[lid])
            sym = self.sl.space.lookup(address, is_return)
            if self.by_line and not sym.kernel:
                line = self.sl.space.line(address, is_return)
                fid = self.builder.table.id(line_frame(sym, line, self.builder.escape))
                self.fids[lid] = fid
            else:
                fid = self.fids[lid] = self.builder._id(sym)
            self.kernel[lid] = sym.kernel
            self.objects[lid] = self.builder.escape(sym.object)  # the stack quality's rows
            self.python[lid] = is_python(sym.name)
        return fid


    def may_inline(self) -> bool:
        """Whether any object of the set has DWARF to say what was inlined."""
        return self.sl.space.has_lines()

    def chain(self, lid: int) -> tuple[int, ...]:
        """The frames of the functions inlined at a location, innermost first."""
        c = self.chains[lid]
        if c is None:
            self.frame(lid)
            locations = self.sl.locations
            c = () if self.kernel[lid] else self._inlined(
                locations.addresses[lid], bool(locations.returns[lid]), self.objects[lid])
            self.chains[lid] = c
        return c

    def _inlined(self, address: int, is_return: bool, obj: str) -> tuple[int, ...]:
        """The frames of what is inlined at ``address`` of the object ``obj``."""
        chain = self.sl.space.inlined(address, is_return)
        escape, table = self.builder.escape, self.builder.table
        return tuple(table.id(Frame(escape(f"{demangle(name)} (inlined)"),
                                    escape(obj), False, inlined=True))
                     for name, _, _ in chain if name)

    def leaf(self, lid: int) -> tuple[int, ...]:
        """The frames of a location that ends a stack."""
        fid = self.frame(lid)
        if not (self.builder.inline and self.builder.inline_frames):
            return (fid,)
        return (*self.chain(lid), fid)

    def innermost(self, lid: int) -> int:
        fid = self.frame(lid)
        c = self.chain(lid) if self.builder.inline_frames else ()
        return c[0] if c else fid


def build_samples(sets: list[StoredSet], symbols: Symbols, by: str, warn: Warn,
                  escape: Escape | None = printable, inline: bool = False,
                  view: ThreadView | None = None) -> Samples:
    """The sets' samples, named and merged: each set is loaded as locations
    (locations.py) and named at once, one set at a time. ``escape`` None
    keeps names as they are (for JSON, which escapes them)."""
    limits = sets[0].limits if sets else DEFAULT_LIMITS
    builder = SampleBuilder(by, warn, escape, limits.stacks, inline, limits.addresses)
    for sl in locate(sets, symbols, warn, view):
        builder.add(sl)
    samples = builder.result()
    if view is not None and view.in_time:  # docs/q-format.md 4.9: nanoseconds
        samples = samples.replace(event=view.metric, unit="seconds", count_unit=NANOSECOND,
                                  granularities=[] if view.metric != "cpu"
                                  else samples.granularities)
    return samples
