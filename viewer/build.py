"""From task sets to ``Samples``: stream the data files, symbolize, merge.

Each set is symbolized in its own address space (addresses of different
processes mean different things) and then merged by frame: two sets that
both ran ``cos`` in libm add up in one ``cos``. Weights are converted to
output units (seconds, usually) per set, so sets with different conversion
factors (cycles at different clock rates) merge correctly.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from qtools.qformat import DEFAULT_LIMITS, Arc, LimitExceeded, MissingFile, QFormatError, Stack
from qtools.qformat.limits import exceeded

from .errors import ViewError
from .load import StoredSet
from .model import Frame, InterpreterQuality, Samples, StackQuality, SetSummary, printable
from .pyview import is_python
from .symbols import MAX_MEMO, AddressSpace, Location, Symbols, Warn

BY_CHOICES = ("function", "object", "address")

# A resolved address: frame id, in the kernel, object name, is Python.
_Resolved = tuple[int, bool, str, bool]


# Where a `.stack` file's remainder line (``WEIGHT -``: stacks the collector
# did not keep) goes when its `.hist` cannot say which functions it hit.
UNKEPT = ("[stacks not kept]", "[q-syscollect]")

Escape = Callable[[str], str]


def frame_maker(by: str, escape: Escape = printable) -> Callable[[Location], Frame]:
    """How a location becomes a call-graph node for ``--by``; ``escape``
    makes names safe for the report (JSON escapes by itself)."""
    if by == "function":
        return lambda loc: Frame(escape(loc.name), escape(loc.object), loc.kernel)
    if by == "object":
        return lambda loc: Frame(escape(loc.object), escape(loc.object), loc.kernel)
    if by == "address":
        def at_address(loc: Location) -> Frame:
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


class SampleBuilder:
    """Accumulates the stacks of several task sets into one ``Samples``."""

    def __init__(self, symbols: Symbols, by: str, warn: Warn, escape: Escape | None = printable,
                 max_stacks: int = DEFAULT_LIMITS.stacks) -> None:
        self.symbols = symbols
        self.by = by
        self.escape = escape or _same
        self.make_frame = frame_maker(by, self.escape)
        self.max_stacks = max_stacks
        # Grouped by object, the frames of one object follow each other in a
        # stack; a run of them is one visit of the object, not recursion.
        self.collapse_runs = by == "object"
        self.warn = warn
        self.frames: list[Frame] = []
        self.ids: dict[Frame, int] = {}
        self.unnamed: set[int] = set()  # frames of single addresses (no symbol, no FDE)
        self.stacks: dict[tuple[int, ...], float] = {}
        self.calls: dict[tuple[int, int], float] | None = None
        self.quality = StackQuality()
        self.sets: list[StoredSet] = []
        self.with_stacks = 0
        self.without_stacks: list[StoredSet] = []  # sets whose .info names no .stack

    def _id(self, loc: Location) -> int:
        frame = self.make_frame(loc)
        fid = self.ids.get(frame)
        if fid is None:
            fid = self.ids[frame] = len(self.frames)
            self.frames.append(frame)
            if self.by == "function" and loc.start is None and loc.name.startswith("0x"):
                self.unnamed.add(fid)
        return fid

    def add(self, ts: StoredSet) -> None:
        """Add a set: its stacks (checked against its histogram) or, without
        call-stack data, its histogram; then its call counts."""
        self.sets.append(ts)
        space = self.symbols.space(ts.directory, ts.info)
        factor = ts.factor
        stacks = self._stacks_of(ts)
        if stacks is not None:
            self.with_stacks += 1
            path = ts.data_path(ts.info.call_stacks.file)  # type: ignore[union-attr]
            leaves, remainder, total = self._add_stacks(space, stacks, factor, path,
                                                        self._interpreter(ts))
            self._check_hist(space, ts, leaves, remainder, total)
        else:
            self._add_hist(space, ts, factor)
        try:
            edges = ts.edges()
        except MissingFile as e:
            self.warn(f"{e}; no call counts from this set")
            edges = None
        if edges is not None:
            self._add_edges(space, edges, ts)

    def _stacks_of(self, ts: StoredSet) -> Iterable[Stack] | None:
        if ts.info.call_stacks is None:
            if ts.data_expected:  # not a set that has no samples by its own account
                self.without_stacks.append(ts)
            return None
        try:
            return ts.stacks()
        except MissingFile as e:
            self.warn(f"{e}; the flat profile of this set comes from its .hist, "
                      "without call graph")
            return None

    def _resolve(self, space: AddressSpace, address: int, is_return: bool) -> _Resolved:
        loc = space.lookup(address, is_return)
        return (self._id(loc), loc.kernel, loc.object, is_python(loc.name))

    def _interpreter(self, ts: StoredSet) -> InterpreterQuality:
        """The per-process stack-quality entry of a set (sets of one pid share it)."""
        key = f"{printable(ts.comm or ts.name)} pid {ts.pid}" if ts.pid is not None \
            else printable(ts.name)
        entry = self.quality.by_process.get(key)
        if entry is None:
            entry = self.quality.by_process[key] = InterpreterQuality()
        info = ts.info
        for name in info.perf_maps:
            source = f"perf map {printable(name)}"
            if source not in entry.sources:
                entry.sources.append(source)
        for j in info.jitdumps:
            source = (f"jitdump {printable(j.path or j.file)} ({j.code_loads or 0} code loads"
                      + (", cut short" if j.truncated else "") + ")")
            if source not in entry.sources:
                entry.sources.append(source)
        return entry

    def _add_stacks(self, space: AddressSpace, stacks: Iterable[Stack], factor: float,
                    path: str, interp: InterpreterQuality | None = None
                    ) -> tuple[dict[int, int], int, int]:
        """Add the stacks; return the weight per leaf address, the remainder
        (weight of stacks not kept) and the total, for ``_check_hist``."""
        # Hot loop: one memo for leaves, one for return addresses (looked up
        # at address-1), each address resolved once per set.
        leaves: dict[int, _Resolved] = {}
        returns: dict[int, _Resolved] = {}
        per_leaf: dict[int, int] = {}
        remainder = total = 0
        rooted: dict[tuple[int, bool], bool] = {}  # outermost frame -> the stack is complete
        acc = self.stacks
        quality = self.quality
        resolve = self._resolve
        cap = self.max_stacks
        for weight, addresses in stacks:
            if not weight:
                continue
            total += weight
            if not addresses:
                remainder += weight
                continue
            per_leaf[addresses[0]] = per_leaf.get(addresses[0], 0) + weight
            if len(leaves) + len(returns) >= MAX_MEMO:
                leaves.clear()
                returns.clear()
            first = leaves.get(addresses[0])
            if first is None:
                first = leaves[addresses[0]] = resolve(space, addresses[0], False)
            entries = [first]
            in_kernel = first[1]
            is_return = False
            for address in addresses[1:]:
                if in_kernel and not space.is_kernel(address):
                    # The first user frame under kernel frames is where the
                    # kernel was entered: a faulting or interrupted pc is
                    # exact (a page fault often hits a function's first
                    # byte), a syscall's is the next instruction. Not a
                    # return address, so no address-1.
                    memo, is_return = leaves, False
                else:
                    memo, is_return = returns, True
                entry = memo.get(address)
                if entry is None:
                    entry = memo[address] = resolve(space, address, is_return)
                in_kernel = entry[1]
                entries.append(entry)
            ids = [e[0] for e in entries]
            if self.collapse_runs:
                ids = [f for i, f in enumerate(ids) if i == 0 or ids[i - 1] != f]
            stack = tuple(ids)
            w = weight * factor
            before = acc.get(stack)
            if before is None:
                if len(acc) >= cap:
                    raise exceeded(f"more than {cap} distinct stacks", path, "stacks", cap)
                acc[stack] = w
            else:
                acc[stack] = before + w
            outermost = entries[-1]
            if not outermost[1]:  # kernel frames come first: a user frame is last
                innermost_user = next(e for e in entries if not e[1])
                key = (addresses[-1], is_return)
                root = rooted.get(key)
                if root is None:
                    root = rooted[key] = space.is_root(addresses[-1], is_return)
                quality.add(innermost_user[2], w, root)
                if interp is not None:
                    interp.stacks += w
                    if any(e[3] for e in entries):
                        interp.python += w
                        if root:
                            interp.python_rooted += w
        return per_leaf, remainder, total

    def _check_hist(self, space: AddressSpace, ts: StoredSet, per_leaf: dict[int, int],
                    remainder: int, total: int) -> None:
        """Hold the `.stack` just added to the set's `.hist`: the same total,
        and per leaf address the same weight. A remainder (stacks not kept)
        is spread over the functions the histogram has beyond the stacks'
        leaves, so the flat profile is the histogram's. A `.hist` that
        disagrees or cannot be read gets one warning; the stacks stay."""
        h = ts.info.histogram
        stack_file = ts.data_path(ts.info.call_stacks.file)  # type: ignore[union-attr]
        if h is None:  # a set that says it has no histogram
            self._add_unkept(remainder * ts.factor)
            return
        spread: dict[tuple[int, ...], int] = {}
        hist_total = differ = 0
        example = ""
        try:
            for address, count in ts.hist():
                hist_total += count
                leaf = per_leaf.pop(address, 0)
                if count == leaf:
                    continue
                if remainder and count > leaf:
                    key = (self._id(space.lookup(address)),)
                    spread[key] = spread.get(key, 0) + count - leaf
                    continue
                differ += 1
                example = example or f"0x{address:x}: {leaf} in stacks, {count} in the histogram"
        except LimitExceeded:
            raise
        except QFormatError as e:
            self.warn(f"{e}; the flat profile of this set comes from {stack_file}")
            self._add_unkept(remainder * ts.factor)
            return
        if per_leaf:
            differ += len(per_leaf)
            address, leaf = next(iter(per_leaf.items()))
            example = example or f"0x{address:x}: {leaf} in stacks, 0 in the histogram"
        spread_total = sum(spread.values())
        if hist_total != total or differ or spread_total != remainder:
            if ts.info.task.state == "open":
                # A set still being written has its data files replaced one
                # after the other at each checkpoint (and a collector killed
                # between the two leaves them so): a read can see a new
                # .hist beside the last .stack. Not damage; the stacks stand.
                self._add_unkept(remainder * ts.factor)
                return
            hist_file = ts.data_path(h.file)
            what = [f"totals {total} and {hist_total}" if hist_total != total else "",
                    f"{differ} leaf address(es) differ, e.g. {example}" if differ else ""]
            self.warn(f"{stack_file} and {hist_file} disagree ("
                      + "; ".join(w for w in what if w) + "); the profile shows the stacks")
            self._add_unkept(remainder * ts.factor)
            return
        acc, factor = self.stacks, ts.factor
        for leaf_only, count in spread.items():
            acc[leaf_only] = acc.get(leaf_only, 0.0) + count * factor

    def _add_unkept(self, weight: float) -> None:
        if weight:
            frame = Frame(*UNKEPT)
            fid = self.ids.get(frame)
            if fid is None:
                fid = self.ids[frame] = len(self.frames)
                self.frames.append(frame)
            self.stacks[(fid,)] = self.stacks.get((fid,), 0.0) + weight

    def _add_hist(self, space: AddressSpace, ts: StoredSet, factor: float) -> None:
        acc = self.stacks
        for address, count in ts.hist():
            if count:
                stack = (self._id(space.lookup(address)),)
                acc[stack] = acc.get(stack, 0.0) + count * factor

    def _add_edges(self, space: AddressSpace, edges: Iterable[Arc], ts: StoredSet) -> None:
        cc = ts.info.call_counts
        factor = cc.conversion_factor if cc and cc.conversion_factor else 1.0
        calls = self.calls if self.calls is not None else {}
        for site, callee, count in edges:
            # FROM is the call instruction itself and TO the callee's entry:
            # neither is a return address.
            pair = (self._id(space.lookup(site)), self._id(space.lookup(callee)))
            calls[pair] = calls.get(pair, 0.0) + count * factor
        self.calls = calls

    def result(self) -> Samples:
        if not self.sets:
            raise ViewError("no task sets to show")
        units = sorted({ts.unit for ts in self.sets})
        if len(units) > 1:
            raise ViewError("cannot merge task sets measured in different units ("
                            + ", ".join(units) + "); select sets of one event")
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
                      escape(ts.info.histogram.file) if ts.info.histogram else None)
                 for ts in self.sets]
        lost = sum(ts.info.task.lost_samples or 0 for ts in self.sets)
        samples = Samples(",".join(events), units[0], granularities, self.sets[0].factor, lost,
                          tasks, self.frames, self.stacks, self.with_stacks > 0, self.calls,
                          self.quality, by=self.by, unnamed=frozenset(self.unnamed))
        if not math.isfinite(samples.total):
            raise ViewError("sample weights overflow (total is not finite)")
        return samples


def build_samples(sets: list[StoredSet], symbols: Symbols, by: str, warn: Warn,
                  escape: Escape | None = printable) -> Samples:
    """``escape`` None keeps names as they are (for JSON, which escapes them)."""
    limits = sets[0].limits if sets else DEFAULT_LIMITS
    builder = SampleBuilder(symbols, by, warn, escape, limits.stacks)
    for ts in sets:
        builder.add(ts)
    return builder.result()
