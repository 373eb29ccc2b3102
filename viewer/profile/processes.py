"""Stacks with the process at the root, for whole-machine folded stacks.

``build_samples`` merges the stacks of every set by frame, so two programs
that both run ``_start;__libc_start_main;main`` would fold into one tower.
Here each set is built alone and its stacks get one more, outermost frame:
the process (``comm``, or ``comm-pid`` with ``--per-pid``), as perf script
and flamegraph.pl's stackcollapse scripts put it.

``--weight samples`` turns each set's weights into sample counts: its
weight over the weight of one sample (``q:y-granularity``), exact for count
events (a tracepoint hit weighs 1), an estimate from the set's mean period
for clocks.
"""

from __future__ import annotations

import math
from typing import Iterable

from qtools.qformat import LimitExceeded

from ..model.errors import ViewError
from ..inputs.load import StoredSet
from ..naming.symbols import Symbols, Warn
from ..inputs.load import IDLE, KERNEL, kernel_only_run
from ..render.units import SECONDS
from .build import build_samples
from .threadlocs import ThreadView
from ..model.escape import printable
from ..model.frames import Frame, FrameTable
from ..model.graph import Samples
from ..model.quality import StackQuality
from .processors import PROCESS_OBJECT

WEIGHTS = ("event", "samples")
NANOSECOND = 1e-9  # in seconds: the count of a clock event


def process_label(ts: StoredSet, per_pid: bool) -> str:
    """The root frame of a set's stacks: the command, or ``idle`` for the
    idle task's kernel sets (``kernel`` where a -k run put every pid there)."""
    if ts.is_kernel:
        if kernel_only_run(ts):
            return KERNEL
        return f"{IDLE}-0" if per_pid else IDLE
    comm = printable(ts.comm or ts.name)
    if per_pid and ts.pid is not None:
        return f"{comm}-{ts.pid}"
    return comm


def process_frame(label: str) -> Frame:
    return Frame(label, PROCESS_OBJECT, False)


def by_process(sets: Iterable[StoredSet], symbols: Symbols, by: str, warn: Warn,
               per_pid: bool = False, weight: str = "event", inline: bool = False,
               view: ThreadView | None = None) -> Samples:
    """The stacks of ``sets``, each under its process frame, merged."""
    parts = [(ts, build_samples([ts], symbols, by, warn, inline=inline, view=view))
             for ts in sets]
    if not parts:
        raise ViewError("no task sets to show")
    if weight == "samples":
        scales = [_per_sample(ts, part) for ts, part in parts]
        unit, count_unit = "samples", 1.0
    else:
        scales, unit, count_unit = _event_counts([part for _ts, part in parts], warn)
    table = FrameTable(parts[0][0].limits.addresses)
    stacks: dict[tuple[int, ...], float] = {}
    for (ts, part), scale in zip(parts, scales):
        try:
            root = table.id(process_frame(process_label(ts, per_pid)))
            local = [table.id(f) for f in part.frames]
        except LimitExceeded as e:
            raise e.located(ts.path) from None
        for stack, w in part.stacks.items():
            if w > 0:
                key = tuple(local[f] for f in stack) + (root,)
                stacks[key] = stacks.get(key, 0.0) + w * scale
    samples = [part for _ts, part in parts]
    return samples[0].replace(
        event=",".join(dict.fromkeys(p.event for p in samples)), unit=unit,
        granularities=sorted({g for p in samples for g in p.granularities}),
        count_unit=count_unit, lost_samples=sum(p.lost_samples for p in samples),
        tasks=[t for p in samples for t in p.tasks], frames=table.frames, stacks=stacks,
        has_stacks=any(p.has_stacks for p in samples), calls=None, quality=StackQuality())


def _event_counts(parts: list[Samples], warn: Warn) -> tuple[list[float], str, float]:
    """How each set's weights (output units) become the event counts folded
    stacks show: (scale of each set, unit, output units per count).

    Sets whose counts are the same size keep them (nanoseconds for clocks,
    events for count events). Where they differ, one unit is made for all:
    nanoseconds for time (cycles at different clock rates), the output
    unit otherwise. Sets in different units cannot be made the same: each
    keeps its own counts, and a warning says so."""
    weighed = [p for p in parts if p.stacks] or parts  # a set without samples has no say
    first = weighed[0]
    units = sorted({p.unit for p in weighed})
    if len(units) > 1:
        warn("the merged sets are measured in different units (" + ", ".join(units)
             + "); each set's stacks weigh its own event counts")
        return [1.0 / (p.count_unit or 1.0) for p in parts], "events", 1.0
    if all(math.isclose(p.count_unit, first.count_unit, rel_tol=1e-12) for p in weighed):
        return [1.0] * len(parts), first.unit, first.count_unit
    return [1.0] * len(parts), first.unit, NANOSECOND if first.unit == SECONDS else 1.0


def _per_sample(ts: StoredSet, part: Samples) -> float:
    """1 / the weight of one sample of ``ts``, in output units."""
    h = ts.info.histogram
    g = h.y_granularity if h else None
    if not part.stacks:
        return 1.0
    if not g or g <= 0:
        raise ViewError("--weight samples: the set does not say what one sample weighs "
                        "(no q:y-granularity)", ts.path)
    return 1.0 / g
