"""One collector's loop in time: when to drain its rings, checkpoint, cut
a slice, say how it goes, and stop. What a drain or a checkpoint does is
the collector's (collector.py, driven through ``Collecting``); this module
only knows the clock.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Protocol

from .clock import Clock
from .config import Options
from .kernel.source import EventSource
from .sets.objects import ObjectCopier

# A drain that found no more than this many records a second besides the
# idle task's samples, all of them samples (a kernel thread's tick, a
# daemon's timer; no fork, exec or mmap), is quiet (run).
QUIET_RECORDS_PER_SECOND = 4

# The longest quiet wait without a doorbell (a source without one, or a
# kernel that would not open it): a process that starts and ends within a
# wait is seen only through its records, its command line already gone.
BELL_LESS_QUIET = 5.0

# A checkpoint due this close to a timed run's end (either side) is left to
# the final one: the two would write the same sets twice within a moment.
END_SLACK = 1.0


class Flags:
    """Set from signal handlers, read by the loop."""

    __slots__ = ("stop", "checkpoint")

    def __init__(self) -> None:
        self.stop = False
        self.checkpoint = False


class Collecting(Protocol):
    """What the loop drives: one CPU's collector (``collector.CpuCollector``)."""

    @property
    def opts(self) -> Options: ...

    @property
    def source(self) -> EventSource: ...

    @property
    def copier(self) -> ObjectCopier: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def busy_records(self) -> int:
        """Records of the last drain other than the idle task's samples."""
        ...

    @property
    def sideband_seen(self) -> bool:
        """Whether a few of them (a quiet drain's) were not samples."""
        ...

    def step(self) -> int: ...

    def checkpoint(self, final: bool = False, complete: bool = False) -> bool: ...

    def rotate(self) -> bool: ...

    def start_counters(self) -> None: ...

    def finish(self) -> bool: ...

    def say(self, text: str) -> None: ...

    def say_tick(self, seconds: float) -> None: ...


def run(c: Collecting, flags: Flags, clock: Callable[[], float] = time.monotonic,
        drain_interval: float = 0.5, heartbeat: Callable[[], None] | None = None,
        quiet_interval: float | None = None) -> bool:
    """Collect until ``flags.stop``; then write a final checkpoint.

    The rings are drained every ``drain_interval`` seconds, or sooner when
    one is half full (the kernel wakes the poll). While drains find next
    to nothing but the idle task's samples, the interval doubles up to
    ``quiet_interval``: an idle machine wakes its collectors a few times a
    minute, not twice a second. Meanwhile the source's doorbell rings at
    the first fork, exit or exec on the CPU, and any activity a drain then
    finds brings the interval back at once (the rings' watermark wakes a
    busy CPU's collector in any case, so nothing is lost while waiting)."""
    opts = c.opts
    started = last_tick = clock()
    interval = drain_interval
    # The supervisor counts -t from after every collector has started:
    # the run ends at or after this collector's start plus that.
    ends = started + opts.run_seconds if opts.run_seconds is not None else None
    next_checkpoint = checkpoint_due(started + opts.checkpoint_interval, ends)
    rotate = opts.rotate
    next_slice = slice_end(c, clock, rotate) if rotate else None
    c.start_counters()
    bell = False
    while not flags.stop:
        now = clock()
        wait = min(interval, next_checkpoint - now,
                   (last_tick + 1.0 - now) if opts.verbose else interval)
        if next_slice is not None:
            wait = min(wait, next_slice - now)
        c.source.wait(max(0.0, wait))
        c.step()
        if quiet_interval is not None and quiet(c, clock() - now):
            bell = c.source.doorbell(True)
            longest = quiet_interval if bell else min(quiet_interval, BELL_LESS_QUIET)
            interval = min(max(interval * 2, drain_interval), longest)
        else:
            if bell:
                bell = c.source.doorbell(False)
            interval = drain_interval
        if heartbeat is not None:
            heartbeat()
        now = clock()
        if opts.verbose and now - last_tick >= 1.0:
            c.say_tick(now - last_tick)
            last_tick = now
        if next_slice is not None and now >= next_slice:
            c.rotate()
            next_slice = slice_end(c, clock, rotate)  # type: ignore[arg-type]
            next_checkpoint = checkpoint_due(clock() + opts.checkpoint_interval, ends)
        elif flags.checkpoint or now >= next_checkpoint:
            asked, flags.checkpoint = flags.checkpoint, False
            c.checkpoint(complete=asked)
            next_checkpoint = checkpoint_due(clock() + opts.checkpoint_interval, ends)
    if opts.verbose:
        c.say("termination-request received; shutting down")
    ok = c.finish()
    if opts.verbose:
        c.say_tick(clock() - last_tick)
    return ok


def checkpoint_due(at: float, ends: float | None) -> float:
    """When a checkpoint due ``at`` is written: then, unless the run ends
    within END_SLACK of it, when the final checkpoint writes the sets
    anyway; if the stop is late past that, END_SLACK after the end."""
    if ends is not None and ends - END_SLACK <= at < ends + END_SLACK:
        return ends + END_SLACK
    return at


def quiet(c: Collecting, waited: float) -> bool:
    """Did the last drain hold next to nothing but the idle task's
    samples? Then the next may wait longer (see run)."""
    return (c.busy_records <= QUIET_RECORDS_PER_SECOND * max(waited, 1.0)
            and not c.sideband_seen and not c.opts.off_cpu and not c.copier.copying)


def slice_end(c: Collecting, clock: Callable[[], float], every: float) -> float:
    """When this slice ends, on the loop's monotonic ``clock``: at the
    next wall-clock boundary as the wall clock reads now. A step of the
    wall clock later does not move it (a step back would stall rotation,
    a step forward cut a burst of slices); the next slice aligns again."""
    wall = c.clock.wall()
    return clock() + next_boundary(wall, every) - wall


def next_boundary(now: float, every: float) -> float:
    """The next multiple of ``every`` seconds of wall-clock time: every
    collector of a run cuts its slices at the same moments."""
    return (math.floor(now / every) + 1) * every
