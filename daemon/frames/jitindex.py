"""Which JIT code was at an address at a given time.

jitdump has no unload record: code placed where other code was replaces it
from its timestamp on. ``PlacementIndex`` keeps the address space cut into
segments, each with the history of placements that covered it, so a sample
is attributed to the code that was there when it was taken, whatever came
later (as ``perf inject --jit`` does by processing records in time order).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from qtools.qformat.jitaddr import JIT_STRIDE

if TYPE_CHECKING:
    from qtools.qformat.jitdump import Placement

MAX_ENTRIES = 1 << 20  # (segment, placement) pairs: overlapping loads cost one per segment covered


class PlacementIndex:
    """Segments [start, end) with their placements in time order."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._history: list[list[tuple[int, Placement]]] = []
        self.entries = 0
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._starts)

    def _split(self, at: int) -> None:
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and self._starts[i] < at < self._ends[i]:
            self._starts.insert(i + 1, at)
            self._ends.insert(i + 1, self._ends[i])
            self._history.insert(i + 1, list(self._history[i]))
            self._ends[i] = at

    def add(self, p: Placement) -> bool:
        """Add a placement; False (and nothing added) when that would pass
        ``max_entries``: hostile dumps of loads over loads cannot eat memory."""
        start, end = p.addr, p.addr + max(1, min(p.size, JIT_STRIDE))
        covered = (bisect.bisect_left(self._starts, end)
                   - bisect.bisect_right(self._starts, start) + 3)
        if self.entries + covered > self.max_entries:
            return False
        self._split(start)
        self._split(end)
        entry = (p.time, p)
        i = bisect.bisect_left(self._starts, start)
        first = i
        pos = start
        while pos < end:
            if i < len(self._starts) and self._starts[i] == pos:
                hist = self._history[i]
                if not hist or hist[-1][0] <= p.time:
                    hist.append(entry)
                else:  # written out of time order: keep the history sorted
                    bisect.insort(hist, entry, key=lambda e: e[0])
                pos = self._ends[i]
                i += 1
                continue
            gap_end = min(end, self._starts[i]) if i < len(self._starts) else end
            self._starts.insert(i, pos)
            self._ends.insert(i, gap_end)
            self._history.insert(i, [entry])
            pos = gap_end
            i += 1
        self.entries += i - first
        return True

    def at(self, address: int, time: int | None = None) -> Placement | None:
        """The placement covering ``address`` at ``time`` (None: the latest)."""
        i = bisect.bisect_right(self._starts, address) - 1
        if i < 0 or address >= self._ends[i]:
            return None
        hist = self._history[i]
        if time is None:
            return hist[-1][1]
        j = bisect.bisect_right(hist, time, key=lambda e: e[0]) - 1
        return hist[j][1] if j >= 0 else None
