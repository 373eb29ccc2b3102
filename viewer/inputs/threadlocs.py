"""A set's `.threads` file (docs/q-format.md 5.8) as stacks of locations:
the metric ``--event`` picks (cpu, off-cpu, cpu-wait, wall), the threads
``--tid`` picks, each stack under its thread with ``--by thread``.

The stacks come out as ``locations.SetLocations``, like those of `.stack`,
so naming, merging and every report work on them unchanged. Weights are
nanoseconds whenever time off the CPU is part of the metric (CPU weights
converted with the set's histogram factor); the CPU metric alone keeps the
set's own counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from qtools.qformat import MissingFile, ThreadName, ThreadWeight

from ..naming.space import AddressSpace
from ..naming.symbols import Warn
from ..profile.model import Frame, Location
from .load import StoredSet
from .locations import SetLocations, _Table

METRICS = ("cpu", "off-cpu", "cpu-wait", "wall")
KINDS = {"cpu": ("cpu",), "off-cpu": ("S", "D"), "cpu-wait": ("W",),
         "wall": ("cpu", "S", "D", "W")}
NANOSECOND = 1e-9
THREAD_OBJECT = "[thread]"


@dataclass(frozen=True)
class ThreadView:
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
    sl = SetLocations(index, ts, space)
    sl.from_stacks = True
    sl.factor_override = NANOSECOND if view.in_time else None
    records = ts.threads()
    if records is None:
        if view.metric == "cpu":
            warn(f"{ts.path}: no per-thread data (collected by an earlier q-syscollect)")
        return sl
    table = _Table(sl)
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
        warn(f"{e}; no per-thread data from this set")
        return sl
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
                root = roots[w.tid] = len(sl.locations)
                sl.locations.append(Location(index, w.tid, False, False, None, None, None,
                                             None, None))
                sl.thread_roots[root] = thread_frame(w.tid, names.get(w.tid))
            ids = ids + (root,)
        if not ids:
            sl.unkept += weight
            continue
        acc[ids] = acc.get(ids, 0) + weight
    sl.stack_locations = len(sl.locations)
    return sl


def _ids(table: _Table, space: AddressSpace, frames: tuple[int, ...]) -> tuple[int, ...]:
    """As locations._add_stacks does: the leaf exact, the first user frame
    under kernel frames exact, every other a return address."""
    if not frames:
        return ()
    ids = [table.id(frames[0], False)]
    in_kernel = table.sl.locations[ids[0]].kernel
    for address in frames[1:]:
        exact = in_kernel and not space.is_kernel(address)
        lid = table.id(address, not exact)
        in_kernel = table.sl.locations[lid].kernel
        ids.append(lid)
    return tuple(ids)
