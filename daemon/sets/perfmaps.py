"""Which copy of a JIT's perf map a set names: not a map an earlier
program of the pid left (``left_before``), and a map copied again only
when it grew (``recopy_due``).

A perf map (/tmp/perf-PID.map) is its owner's to write, and each set of
the task names a copy of it. Copied again at every change, a map its owner
rewrote a byte a second was copied at every checkpoint: 13 copies of a
sparse 60 MiB map in a 26-second run with --checkpoint 2 (847 MB). A JIT
only appends to its map, so a new copy is worth making when the map grew
by a real amount, a quarter of what the last copy holds and at least
MIN_GROWTH, and at most once per RECOPY_SECONDS; a set written for the
last time (its task ended, its time slice closed, the run ended) takes
whatever the map grew by since. A change that does not grow the map is
not copied again, nor is a map whose copy was cut at --max-map-size.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from qtools.qformat import Stored

MIN_GROWTH = 16 << 10  # bytes: some 400 lines of a perf map
GROWTH_SHARE = 4  # a quarter of the last copy
RECOPY_SECONDS = 60.0


class MapCopy(NamedTuple):
    """The last copy made of a task's perf map."""

    stored: Stored
    size: int  # the map's length when it was copied
    at: float  # monotonic seconds: when


def recopy_due(last: MapCopy | None, size: int, now: float, closing: bool = False) -> bool:
    """Is a map now ``size`` bytes long worth copying again after ``last``?
    ``closing``: the set is written for the last time."""
    if last is None:
        return True
    if last.stored.truncated or size <= last.size:
        return False
    if closing:
        return True
    grown = size - last.size
    return grown >= max(MIN_GROWTH, last.size // GROWTH_SHARE) and now - last.at >= RECOPY_SECONDS


STALE_SLACK_NS = 1_000_000_000
"""How much older than a process's fork or exec its perf map may look:
file times come from the kernel's coarse clock, and a map is written
after the program began (a pid is reused far less often than this)."""


def left_before(st: os.stat_result, began: int) -> bool:
    """Was a file last changed before perf time ``began`` (CLOCK_MONOTONIC ns;
    0: unknown)? Its change time, which no user can set back, says."""
    if not began:
        return False
    began_wall = began + time.time_ns() - time.monotonic_ns()
    return st.st_ctime_ns < began_wall - STALE_SLACK_NS
