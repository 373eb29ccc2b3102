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

from array import array
from typing import TYPE_CHECKING, Iterable, Iterator

from qtools.qformat import Arc, LimitExceeded, MissingFile, QFormatError, Stack
from qtools.qformat.limits import exceeded

from ..naming.space import KERNEL, AddressSpace
from ..naming.symbols import Symbols, Warn
from ..model.frames import Frame, Location
from ..inputs.load import StoredSet

if TYPE_CHECKING:
    from .threadlocs import ThreadView


class LocationTable:
    """A set's locations by id, kept as columns (address, return address or
    not, ``AddressSpace.place``): 13 bytes each, where a ``Location`` tuple
    took about 200, and a crafted set holds millions of distinct addresses.
    ``table[lid]`` makes the Location."""

    def __init__(self, space: AddressSpace, set_index: int) -> None:
        self._space = space
        self._set = set_index
        self.addresses = array("Q")
        self.returns = bytearray()  # 1: a return address
        self.places = array("i")

    def add(self, address: int, is_return: bool, place: int) -> int:
        """A new location; its id."""
        self.addresses.append(address)
        self.returns.append(is_return)
        self.places.append(place)
        return len(self.places) - 1

    def kernel(self, lid: int) -> bool:
        return self.places[lid] == KERNEL

    def __len__(self) -> int:
        return len(self.places)

    def __getitem__(self, lid: int) -> Location:
        return self._space.location(self._set, self.addresses[lid], bool(self.returns[lid]),
                                    self.places[lid])


class SetLocations:
    """One set's samples: stacks of location ids, innermost first (filled
    in by ``locate_set``, or threadlocs.py)."""

    def __init__(self, index: int, stored: StoredSet, space: AddressSpace) -> None:
        self.index = index  # the set's place among those loaded (``Location.set``)
        self.stored = stored
        self.space = space  # names the locations (``lookup``)
        self.locations = LocationTable(space, index)  # id -> location
        # From the `.stack` (in order of first appearance), or without one from
        # the `.hist` (stacks of one location); event counts.
        self.stacks: dict[tuple[int, ...], int] = {}
        self.from_stacks = False  # ``stacks`` came from a `.stack`
        self.stack_locations = 0  # locations [0, this) are those of ``stacks``
        self.stack_file: str | None = None  # its path (where the distinct-stacks limit is told)
        # Stacks not kept by the collector, placed on the leaves the `.hist`
        # has beyond the stacks' (added after ``stacks``), and what is left
        # unplaced (``build.UNKEPT``).
        self.spread: dict[int, int] = {}
        self.unkept = 0
        # (call site, callee) -> calls, from the `.edge` (None: no call counts).
        self.calls: dict[tuple[int, int], int] | None = None
        self.no_stack_file = False  # the `.info` names no `.stack` though it has samples
        # From a `.threads` file (threadlocs.py): counts in these units when
        # not the set's own, and the locations that stand for a thread
        self.factor_override: float | None = None
        self.thread_roots: dict[int, Frame] = {}
        self.thread_names: dict[int, str] = {}  # tid -> its name

    @property
    def factor(self) -> float:
        """Output units (seconds, usually) per count, of this set alone."""
        return self.stored.factor if self.factor_override is None else self.factor_override


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


def locate(sets: Iterable[StoredSet], symbols: Symbols, warn: Warn,
           view: ThreadView | None = None) -> Iterator[SetLocations]:
    """Each set's locations, one set at a time (see the module's docstring);
    from its `.threads` file where ``view`` needs one (threadlocs.py)."""
    for index, ts in enumerate(sets):
        space = symbols.space(ts.directory, ts.info)
        if view is not None and view.needed:
            from .threadlocs import locate_threads
            yield locate_threads(ts, index, space, view, warn)
        else:
            yield locate_set(ts, index, space, warn)


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
