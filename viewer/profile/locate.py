"""Loading: each task set's data files as stacks of locations, no names yet.

A location (``model.Location``) is an address with what the set's maps
say about it: object, copy, build-id, file offset, kernel or not. Each
distinct one gets an id in its set's table, and the stacks, the leaves
the histogram adds and the call arcs are tuples of those ids with their
counts as the data files hold them (events, not output units). Nothing
here asks for a name: ``build.SampleBuilder`` names locations through the
one symbolizer when a report needs them, and pprof export, annotation or
a diff can take the locations as they are.

Sets are loaded one at a time (``locate`` is a generator), so that a
whole-machine view holds one set's locations at once, not all of them.
"""

from __future__ import annotations

from typing import Iterable

from qtools.qformat import Arc, LimitExceeded, MissingFile, QFormatError, Stack
from qtools.qformat.limits import exceeded

from ..naming.addrspace import AddressSpace
from ..naming.symbols import Warn
from ..model.frames import Location, SetSummary
from ..model.lost import claim
from ..model.profile import Labels, SetSamples
from ..inputs.load import IDLE, KERNEL, StoredSet, kernel_only_run


class SetLocations(SetSamples):
    """A set's samples as they are read: the set and its address space
    beside them (``set_samples`` fills in what the set says of itself)."""

    def __init__(self, index: int, stored: StoredSet, space: AddressSpace) -> None:
        super().__init__(index, summary(stored), labels(stored), space, stored.path)
        self.stored = stored
        self.space = space
        self.factor = stored.factor
        self.unit = stored.unit
        self.event = stored.event
        info = stored.info
        h = info.histogram
        self.granularity = h.y_granularity if h and h.y_granularity else None
        self.start_time, self.end_time = info.task.start_time, info.task.end_time
        self.lost = claim(info.task)
        moved = info.task.extra.get("q:hist-moved")
        self.moved = moved if isinstance(moved, int) and not isinstance(moved, bool) \
            and moved > 0 else 0
        cc = info.call_counts
        self.calls_factor = cc.conversion_factor if cc and cc.conversion_factor else 1.0
        self.jit_sources = [f"perf map {name}" for name in info.perf_maps] + [
            f"jitdump {j.path or j.file} ({j.code_loads or 0} code loads"
            + (", cut short" if j.truncated else "") + ")" for j in info.jitdumps]
        self.root_label, self.root_label_pid = process_labels(stored)

    def location(self, lid: int) -> Location:
        """Location ``lid`` with what the set's maps say of it."""
        table = self.locations
        return self.space.location(self.index, table.addresses[lid], bool(table.returns[lid]),
                                   table.places[lid])


def process_labels(ts: StoredSet) -> tuple[str, str]:
    """The root frame of a set's folded stacks, without and with its pid: the
    command, or ``idle`` for the idle task's kernel sets (``kernel`` where
    a -k run put every pid there)."""
    if ts.is_kernel:
        if kernel_only_run(ts):
            return KERNEL, KERNEL
        return IDLE, f"{IDLE}-0"
    comm = ts.comm or ts.name
    return comm, comm if ts.pid is None else f"{comm}-{ts.pid}"


def summary(ts: StoredSet) -> SetSummary:
    """What a report lists of a set (names as the `.q` has them)."""
    return SetSummary(ts.name, ts.directory, ts.comm, ts.pid,
                      tuple(ts.info.task.pids) if ts.info.task.pids else None, ts.cpu,
                      ts.command(), ts.info.histogram.file if ts.info.histogram else None,
                      ts.host, ts.service, ts.container)


def labels(ts: StoredSet) -> Labels:
    """What a set's samples are labelled with (pprof, OpenTelemetry)."""
    return Labels(ts.comm or None, ts.pid, ts.cpu, ts.info.task.hostname or None,
                  ts.service or None, ts.container or None)


class _Table:
    """A set's locations interned: one id per (address, is return address),
    at most ``addresses`` of the set's limits (``LimitExceeded`` names
    ``path``, the data file being read)."""

    def __init__(self, sl: SetLocations, path: str) -> None:
        self.sl = sl
        self.path = path
        self.cap = sl.stored.limits.addresses
        self.leaves: dict[int, int] = {}
        self.returns: dict[int, int] = {}

    def id(self, address: int, is_return: bool) -> int:
        memo = self.returns if is_return else self.leaves
        lid = memo.get(address)
        if lid is None:
            locations = self.sl.locations
            if len(locations) >= self.cap:
                raise exceeded(f"more than {self.cap} distinct addresses", self.path,
                               "addresses", self.cap)
            lid = memo[address] = locations.add(address, is_return,
                                                self.sl.space.place(address, is_return))
        return lid


def locate_set(ts: StoredSet, index: int, space: AddressSpace, warn: Warn) -> SetLocations:
    """Its stacks (checked against its histogram) or, without call-stack
    data, its histogram; then its call counts."""
    sl = SetLocations(index, ts, space)
    hist_file = ts.data_path(ts.info.histogram.file) if ts.info.histogram else ts.path
    table = _Table(sl, hist_file)
    stacks = _stacks_of(sl, warn)
    if stacks is not None:
        sl.from_stacks = True
        sl.stack_file = ts.data_path(ts.info.call_stacks.file)  # type: ignore[union-attr]
        table.path = sl.stack_file
        per_leaf, remainder, total = _add_stacks(sl, table, stacks)
        sl.stack_locations = len(sl.locations)
        table.path = hist_file
        _check_hist(sl, table, per_leaf, remainder, total, warn)
    else:
        acc = sl.stacks
        for address, count in ts.hist():
            if count:
                stack = (table.id(address, False),)
                acc[stack] = acc.get(stack, 0) + count
    try:
        edges = ts.edges()
    except MissingFile as e:
        warn(f"{e}; no call counts from this set")
        edges = None
    if edges is not None:
        table.path = ts.data_path(ts.info.call_counts.file)  # type: ignore[union-attr]
        sl.calls = _calls(table, edges)
    return sl


def _stacks_of(sl: SetLocations, warn: Warn) -> Iterable[Stack] | None:
    ts = sl.stored
    if ts.info.call_stacks is None:
        # not a set that has no samples by its own account
        sl.no_stack_file = ts.data_expected
        return None
    try:
        return ts.stacks()
    except MissingFile as e:
        warn(f"{e}; the flat profile of this set comes from its .hist, without call graph")
        return None


def _add_stacks(sl: SetLocations, table: _Table, stacks: Iterable[Stack]
                ) -> tuple[dict[int, int], int, int]:
    """Add the stacks; return the weight per leaf address, the remainder
    (weight of stacks not kept) and the total, for ``_check_hist``."""
    # Hot loop: each address is located once per set and lookup (leaf or
    # return address).
    leaves, returns = table.leaves, table.returns
    kernel = sl.locations.kernel
    new_id = table.id
    space = sl.space
    per_leaf: dict[int, int] = {}
    remainder = total = 0
    acc = sl.stacks
    for weight, addresses in stacks:
        if not weight:
            continue
        total += weight
        if not addresses:
            remainder += weight
            continue
        leaf = addresses[0]
        per_leaf[leaf] = per_leaf.get(leaf, 0) + weight
        first = leaves.get(leaf)
        if first is None:
            first = new_id(leaf, False)
        ids = [first]
        in_kernel = kernel(first)
        for address in addresses[1:]:
            if in_kernel and not space.is_kernel(address):
                # The first user frame under kernel frames is where the
                # kernel was entered: a faulting or interrupted pc is
                # exact (a page fault often hits a function's first
                # byte), a syscall's is the next instruction. Not a
                # return address, so no address-1.
                lid = leaves.get(address)
                if lid is None:
                    lid = new_id(address, False)
            else:
                lid = returns.get(address)
                if lid is None:
                    lid = new_id(address, True)
            in_kernel = kernel(lid)
            ids.append(lid)
        stack = tuple(ids)
        acc[stack] = acc.get(stack, 0) + weight
    return per_leaf, remainder, total


def _check_hist(sl: SetLocations, table: _Table, per_leaf: dict[int, int], remainder: int,
                total: int, warn: Warn) -> None:
    """Hold the `.stack` just read to the set's `.hist`: the same total,
    and per leaf address the same weight. A remainder (stacks not kept)
    is spread over the addresses the histogram has beyond the stacks'
    leaves, so the flat profile is the histogram's. A `.hist` that
    disagrees or cannot be read gets one warning; the stacks stay."""
    ts = sl.stored
    h = ts.info.histogram
    stack_file = sl.stack_file
    if h is None:  # a set that says it has no histogram
        sl.unkept = remainder
        return
    spread: dict[int, int] = {}
    hist_total = differ = 0
    example = ""
    try:
        for address, count in ts.hist():
            hist_total += count
            leaf = per_leaf.pop(address, 0)
            if count == leaf:
                continue
            if remainder and count > leaf:
                key = table.id(address, False)
                spread[key] = spread.get(key, 0) + count - leaf
                continue
            differ += 1
            example = example or f"0x{address:x}: {leaf} in stacks, {count} in the histogram"
    except LimitExceeded:
        raise
    except QFormatError as e:
        warn(f"{e}; the flat profile of this set comes from {stack_file}")
        sl.unkept = remainder
        return
    if per_leaf:
        differ += len(per_leaf)
        address, leaf = next(iter(per_leaf.items()))
        example = example or f"0x{address:x}: {leaf} in stacks, 0 in the histogram"
    spread_total = sum(spread.values())
    if hist_total != total or differ or spread_total != remainder:
        if ts.info.task.state != "open":
            # (A set still being written has its data files replaced one
            # after the other at each checkpoint, and a collector killed
            # between the two leaves them so: a read can see a new .hist
            # beside the last .stack. Not damage; the stacks stand.)
            hist_file = ts.data_path(h.file)
            what = [f"totals {total} and {hist_total}" if hist_total != total else "",
                    f"{differ} leaf address(es) differ, e.g. {example}" if differ else ""]
            warn(f"{stack_file} and {hist_file} disagree ("
                 + "; ".join(w for w in what if w) + "); the profile shows the stacks")
        sl.unkept = remainder
        return
    sl.spread = spread


def _calls(table: _Table, edges: Iterable[Arc]) -> dict[tuple[int, int], int]:
    calls: dict[tuple[int, int], int] = {}
    for site, callee, count in edges:
        # FROM is the call instruction itself and TO the callee's entry:
        # neither is a return address.
        pair = (table.id(site, False), table.id(callee, False))
        calls[pair] = calls.get(pair, 0) + count
    return calls
