"""A set's `.threads` file (docs/q-format.md 5.8) as stacks of locations:
the metric ``--event`` picks (cpu, off-cpu, cpu-wait, wall), the threads
``--tid`` picks, each stack under its thread with ``--by thread``.

The stacks come out as ``locations.SetLocations``, like those of `.stack`,
so naming, merging and every report work on them unchanged. Weights are
nanoseconds whenever time off the CPU is part of the metric (CPU weights
converted with the set's histogram factor); the CPU metric alone keeps the
set's own counts.

The exports (profile/export.py) take every stack under its thread, and a
set's CPU samples by thread only where they add up to its `.hist`
(``locate_cpu_by_thread``), so that the export's flat profile stays the
CPU profile q-view shows from the `.stack`.
"""

from __future__ import annotations

from typing import NamedTuple

from qtools.qformat import LimitExceeded, MissingFile, QFormatError, ThreadName, ThreadWeight

from ..naming.addrspace import NOWHERE, AddressSpace
from ..naming.symbols import Warn
from ..model.frames import Frame
from ..inputs.load import StoredSet
from .locate import SetLocations, _Table

METRICS = ("cpu", "off-cpu", "cpu-wait", "wall")
KINDS = {"cpu": ("cpu",), "off-cpu": ("S", "D"), "cpu-wait": ("W",),
         "wall": ("cpu", "S", "D", "W")}
NANOSECOND = 1e-9
THREAD_OBJECT = "[thread]"


class ThreadView(NamedTuple):
    """What of the `.threads` files a report shows."""

    metric: str = "cpu"
    tids: frozenset[int] | None = None  # None: every thread
    by_thread: bool = False

    @property
    def needed(self) -> bool:
        """Does the report need `.threads` files (else `.stack` as always)?"""
        return self.metric != "cpu" or self.tids is not None or self.by_thread

    @property
    def in_time(self) -> bool:
        return self.metric != "cpu"


def thread_frame(tid: int, name: str | None) -> Frame:
    return Frame(f"{name or '?'} [tid {tid}]", THREAD_OBJECT, False)


def locate_threads(ts: StoredSet, index: int, space: AddressSpace, view: ThreadView,
                   warn: Warn) -> SetLocations:
    """The set's stacks of the metric and threads ``view`` asks for. A set
    without a `.threads` file (an earlier release, or no data) has none."""
    sl = _new(ts, index, space, view)
    read = _records(ts, view, warn)
    if read is not None:
        _fill(sl, _Table(sl, _threads_file(ts)), view, *read)
    return sl


def locate_cpu_by_thread(ts: StoredSet, index: int, space: AddressSpace,
                         warn: Warn) -> SetLocations | None:
    """The set's CPU samples, each stack under its thread (as ``--by
    thread``), held to its `.hist` as locations._check_hist holds a
    `.stack`: the same total and the same weight per leaf address, weight
    without a stack placed on the leaves the `.hist` has beyond the
    stacks' (under its thread where one thread has it all). None where
    the set has no `.threads` file or it does not add up; QFormatError
    (MissingFile among them) where the file cannot be read."""
    view = ThreadView("cpu", None, True)
    read = _records(ts, view, warn, quiet=True)
    if read is None:
        return None
    sl = _new(ts, index, space, view)
    table = _Table(sl, _threads_file(ts))
    roots = _fill(sl, table, view, *read)
    spread = _spread(ts, read[1])
    if spread is None:
        return None
    if spread:
        unkept = {w.tid for w in read[1] if not w.frames}
        for tid in unkept:
            sl.stacks.pop((roots[tid],), None)
        owner = roots[unkept.pop()] if len(unkept) == 1 else None
        for address, count in spread.items():
            leaf = table.id(address, False)
            if owner is None:
                sl.spread[leaf] = sl.spread.get(leaf, 0) + count
            else:
                sl.stacks[(leaf, owner)] = sl.stacks.get((leaf, owner), 0) + count
    return sl


def _new(ts: StoredSet, index: int, space: AddressSpace, view: ThreadView) -> SetLocations:
    sl = SetLocations(index, ts, space)
    sl.from_stacks = True
    if view.in_time:  # docs/q-format.md 4.9: nanoseconds
        sl.factor, sl.counts_in_time = NANOSECOND, True
    return sl


def _threads_file(ts: StoredSet) -> str:
    """The path of the set's `.threads` file (where its addresses are read)."""
    return ts.data_path(ts.info.threads.file) if ts.info.threads else ts.path


def _records(ts: StoredSet, view: ThreadView, warn: Warn, quiet: bool = False
             ) -> tuple[dict[int, str], list[ThreadWeight]] | None:
    """The thread names and the weights of the metric and threads ``view``
    asks for; None (said once) without a file to read. ``quiet``: None
    without a `.threads` file, MissingFile where it is missing."""
    records = ts.threads()
    if records is None:
        if view.metric == "cpu" and not quiet:
            warn(f"{ts.path}: no per-thread data (collected by an earlier q-syscollect)")
        return None
    kinds = KINDS[view.metric]
    names: dict[int, str] = {}
    weights: list[ThreadWeight] = []
    try:
        for rec in records:
            if isinstance(rec, ThreadName):
                names[rec.tid] = rec.name
            elif rec.kind in kinds and (view.tids is None or rec.tid in view.tids):
                weights.append(rec)
    except MissingFile as e:
        if quiet:
            raise
        warn(f"{e}; no per-thread data from this set")
        return None
    return names, weights


def _fill(sl: SetLocations, table: _Table, view: ThreadView, names: dict[int, str],
          weights: list[ThreadWeight]) -> dict[int, int]:
    """Add ``weights`` to ``sl``; return each thread's root location (--by thread)."""
    ts, space = sl.stored, sl.space
    cpu_scale = ts.factor / NANOSECOND if view.in_time else 1.0
    roots: dict[int, int] = {}
    acc = sl.stacks
    for w in weights:
        weight = round(w.weight * cpu_scale) if w.kind == "cpu" else w.weight
        if not weight:
            continue
        ids = _ids(table, space, w.frames)
        if view.by_thread:
            root = roots.get(w.tid)
            if root is None:
                root = roots[w.tid] = sl.locations.add(w.tid, False, NOWHERE)
                sl.thread_roots[root] = (w.tid, names.get(w.tid))
            ids = ids + (root,)
        if not ids:
            sl.unkept += weight
            continue
        acc[ids] = acc.get(ids, 0) + weight
    sl.stack_locations = len(sl.locations)
    return roots


def _spread(ts: StoredSet, weights: list[ThreadWeight]) -> dict[int, int] | None:
    """The `.hist` weight beyond the stacks' leaves, by address, where the
    `cpu` lines ``weights`` add up to the `.hist` as a `.stack` must; None
    where they do not (or the `.hist` cannot be read)."""
    per_leaf: dict[int, int] = {}
    remainder = total = 0
    for w in weights:
        total += w.weight
        if w.frames:
            per_leaf[w.frames[0]] = per_leaf.get(w.frames[0], 0) + w.weight
        else:
            remainder += w.weight
    spread: dict[int, int] = {}
    hist_total = 0
    try:
        for address, count in ts.hist():
            hist_total += count
            leaf = per_leaf.pop(address, 0)
            if count > leaf and remainder:
                spread[address] = count - leaf
            elif count != leaf:
                return None
    except LimitExceeded:
        raise
    except (QFormatError, MissingFile):
        return None
    if per_leaf or hist_total != total or sum(spread.values()) != remainder:
        return None
    return spread


def _ids(table: _Table, space: AddressSpace, frames: tuple[int, ...]) -> tuple[int, ...]:
    """As locations._add_stacks does: the leaf exact, the first user frame
    under kernel frames exact, every other a return address."""
    if not frames:
        return ()
    ids = [table.id(frames[0], False)]
    kernel = table.sl.locations.kernel
    in_kernel = kernel(ids[0])
    for address in frames[1:]:
        exact = in_kernel and not space.is_kernel(address)
        lid = table.id(address, not exact)
        in_kernel = kernel(lid)
        ids.append(lid)
    return tuple(ids)
