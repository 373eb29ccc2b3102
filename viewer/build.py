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

from qtools.qformat import Arc, Stack

from .errors import ViewError
from .load import TaskSet
from .model import Frame, Samples, StackQuality, Task, printable, root_name
from .symbols import MAX_MEMO, AddressSpace, Location, Symbols, Warn

BY_CHOICES = ("function", "object", "address")

# A resolved address: frame id, in the kernel, object name, is a root frame.
_Resolved = tuple[int, bool, str, bool]

# The outermost user frame of a complete stack (issue 5): the program's
# entry, libc's start-up, or the start of a thread.
ROOT_FRAMES = frozenset({
    "_start", "__libc_start_main", "__libc_start_call_main", "__libc_start_main_impl",
    "start_thread", "clone", "__clone", "clone3", "__clone3", "__clone_internal",
    "thread_start",
})


def frame_maker(by: str) -> Callable[[Location], Frame]:
    """How a location becomes a call-graph node for ``--by``."""
    if by == "function":
        return lambda loc: Frame(printable(loc.name), printable(loc.object), loc.kernel)
    if by == "object":
        return lambda loc: Frame(printable(loc.object), printable(loc.object), loc.kernel)
    if by == "address":
        def at_address(loc: Location) -> Frame:
            name = printable(loc.name)
            if loc.start is not None:
                name += f"+0x{loc.offset - loc.start:x}"
            return Frame(name, printable(loc.object), loc.kernel)
        return at_address
    raise ValueError(f"unknown grouping {by!r}")


class SampleBuilder:
    """Accumulates the stacks of several task sets into one ``Samples``."""

    def __init__(self, symbols: Symbols, by: str, warn: Warn) -> None:
        self.symbols = symbols
        self.make_frame = frame_maker(by)
        # Grouped by object, the frames of one object follow each other in a
        # stack; a run of them is one visit of the object, not recursion.
        self.collapse_runs = by == "object"
        self.warn = warn
        self.frames: list[Frame] = []
        self.ids: dict[Frame, int] = {}
        self.stacks: dict[tuple[int, ...], float] = {}
        self.calls: dict[tuple[int, int], float] | None = None
        self.quality = StackQuality()
        self.sets: list[TaskSet] = []
        self.with_stacks = 0

    def _id(self, loc: Location) -> int:
        frame = self.make_frame(loc)
        fid = self.ids.get(frame)
        if fid is None:
            fid = self.ids[frame] = len(self.frames)
            self.frames.append(frame)
        return fid

    def add(self, ts: TaskSet) -> None:
        self.sets.append(ts)
        space = self.symbols.space(ts.directory, ts.info)
        factor = ts.factor
        stacks = ts.stacks()
        if stacks is not None:
            self.with_stacks += 1
            self._add_stacks(space, stacks, factor)
        else:
            self._add_hist(space, ts, factor)
        edges = ts.edges()
        if edges is not None:
            self._add_edges(space, edges, ts)

    def _resolve(self, space: AddressSpace, address: int, is_return: bool) -> _Resolved:
        loc = space.lookup(address, is_return)
        return (self._id(loc), loc.kernel, loc.object, root_name(loc.name) in ROOT_FRAMES)

    def _add_stacks(self, space: AddressSpace, stacks: Iterable[Stack], factor: float) -> None:
        # Hot loop: one memo for leaves, one for return addresses (looked up
        # at address-1), each address resolved once per set.
        leaves: dict[int, _Resolved] = {}
        returns: dict[int, _Resolved] = {}
        acc = self.stacks
        quality = self.quality
        resolve = self._resolve
        for weight, addresses in stacks:
            if not weight or not addresses:  # no frames: the remainder beyond a collector's cap
                continue
            if len(leaves) + len(returns) >= MAX_MEMO:
                leaves.clear()
                returns.clear()
            first = leaves.get(addresses[0])
            if first is None:
                first = leaves[addresses[0]] = resolve(space, addresses[0], False)
            entries = [first]
            in_kernel = first[1]
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
            acc[stack] = acc.get(stack, 0.0) + w
            outermost = entries[-1]
            if not outermost[1]:  # kernel frames come first: a user frame is last
                innermost_user = next(e for e in entries if not e[1])
                quality.add(innermost_user[2], w, outermost[3])

    def _add_hist(self, space: AddressSpace, ts: TaskSet, factor: float) -> None:
        acc = self.stacks
        for address, count in ts.hist():
            if count:
                stack = (self._id(space.lookup(address)),)
                acc[stack] = acc.get(stack, 0.0) + count * factor

    def _add_edges(self, space: AddressSpace, edges: Iterable[Arc], ts: TaskSet) -> None:
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
        if 0 < self.with_stacks < len(self.sets):
            for ts in self.sets:
                if ts.stacks() is None:
                    self.warn(f"{ts.path}: no call-stack data; its samples count "
                              "as stacks of one frame in the call graph")
        events = list(dict.fromkeys(ts.event for ts in self.sets))
        granularities = sorted({ts.info.histogram.y_granularity for ts in self.sets
                                if ts.info.histogram and ts.info.histogram.y_granularity})
        tasks = [Task(printable(ts.name), ts.directory, ts.comm and printable(ts.comm), ts.pid,
                      tuple(ts.info.task.pids) if ts.info.task.pids else None, ts.cpu,
                      printable(ts.command()),
                      printable(ts.info.histogram.file) if ts.info.histogram else None)
                 for ts in self.sets]
        lost = sum(ts.info.task.lost_samples or 0 for ts in self.sets)
        samples = Samples(",".join(events), units[0], granularities, self.sets[0].factor, lost,
                          tasks, self.frames, self.stacks, self.with_stacks > 0, self.calls,
                          self.quality)
        if not math.isfinite(samples.total):
            raise ViewError("sample weights overflow (total is not finite)")
        return samples


def build_samples(sets: list[TaskSet], symbols: Symbols, by: str, warn: Warn) -> Samples:
    builder = SampleBuilder(symbols, by, warn)
    for ts in sets:
        builder.add(ts)
    return builder.result()
