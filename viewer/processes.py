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

import dataclasses
from typing import Iterable

from .build import build_samples
from .errors import ViewError
from .load import StoredSet
from .model import Frame, Samples, StackQuality, printable
from .overview_rows import IDLE, KERNEL, kernel_only_run
from .processors import PROCESS_OBJECT
from .symbols import Symbols, Warn
WEIGHTS = ("event", "samples")


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
               per_pid: bool = False, weight: str = "event") -> Samples:
    """The stacks of ``sets``, each under its process frame, merged."""
    frames: list[Frame] = []
    ids: dict[Frame, int] = {}
    stacks: dict[tuple[int, ...], float] = {}
    parts: list[Samples] = []

    def fid(frame: Frame) -> int:
        i = ids.get(frame)
        if i is None:
            i = ids[frame] = len(frames)
            frames.append(frame)
        return i

    for ts in sets:
        part = build_samples([ts], symbols, by, warn)
        parts.append(part)
        scale = 1.0
        if weight == "samples":
            scale = _per_sample(ts, part)
        root = fid(process_frame(process_label(ts, per_pid)))
        local = [fid(f) for f in part.frames]
        for stack, w in part.stacks.items():
            if w > 0:
                key = tuple(local[f] for f in stack) + (root,)
                stacks[key] = stacks.get(key, 0.0) + w * scale
    if not parts:
        raise ViewError("no task sets to show")
    units = sorted({p.unit for p in parts})
    if len(units) > 1:
        raise ViewError("cannot merge task sets measured in different units ("
                        + ", ".join(units) + "); select sets of one event")
    first = parts[0]
    merged = dataclasses.replace(
        first, event=",".join(dict.fromkeys(p.event for p in parts)),
        granularities=sorted({g for p in parts for g in p.granularities}),
        lost_samples=sum(p.lost_samples for p in parts),
        tasks=[t for p in parts for t in p.tasks], frames=frames, stacks=stacks,
        has_stacks=any(p.has_stacks for p in parts), calls=None, quality=StackQuality())
    if weight == "samples":
        merged = dataclasses.replace(merged, unit="samples", count_unit=1.0)
    return merged


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
