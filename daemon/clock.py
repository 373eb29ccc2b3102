"""Time that cannot jump: wall times derived from a monotonic clock.

The wall clock (CLOCK_REALTIME) may be stepped at any moment, by an
administrator, by NTP at boot, or by anyone who can. A set's start is
stamped with both the wall clock and CLOCK_BOOTTIME (monotonic, and counting
suspend, as the wall clock does); every later time of the set is its start
wall time plus the boottime elapsed since, so end >= start always and a
step after the start moves nothing. A step is still noticed: the wall
clock and the derived time then disagree by more than ``STEP_THRESHOLD``
seconds, and the set records by how much (``q:clock-step``).

Nothing here decides anything: the collector stamps, retention measures
ages with ``since`` (see daemon/sets/retention.py).
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

STEP_THRESHOLD = 2.0
"""Seconds of disagreement between the wall clock and the derived time that
count as a step. NTP slews both clocks alike, so in a boot without steps
they agree to well under a millisecond; 2 s leaves room for scheduling
delays between the two reads and for a leap second."""


def boottime() -> float:
    """Seconds since boot, including suspend; never goes back."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Stamp(NamedTuple):
    """One moment, as both clocks saw it."""

    wall: float  # Unix seconds
    mono: float  # CLOCK_BOOTTIME seconds


class Clock:
    """The two clocks, injectable for tests."""

    def __init__(self, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = boottime) -> None:
        self.wall = wall
        self.mono = mono

    def stamp(self) -> Stamp:
        return Stamp(self.wall(), self.mono())

    def since(self, stamp: Stamp) -> float:
        """Seconds elapsed since ``stamp``, by the monotonic clock."""
        return max(0.0, self.mono() - stamp.mono)

    def wall_after(self, stamp: Stamp) -> float:
        """Now as a wall time derived from ``stamp``: its wall time plus the
        monotonic time elapsed since. Never earlier than ``stamp.wall``."""
        return stamp.wall + self.since(stamp)

    def step(self, stamp: Stamp) -> float | None:
        """How far the wall clock now differs from the time derived from
        ``stamp`` (positive: stepped forward), or None within the threshold."""
        offset = self.wall() - self.wall_after(stamp)
        return round(offset, 3) if abs(offset) > STEP_THRESHOLD else None


SYSTEM = Clock()
