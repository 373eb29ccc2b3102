"""Which JIT code was at an address at a given time.

jitdump has no unload record: code placed where other code was replaces it
from its timestamp on. ``PlacementIndex`` keeps the address space cut into
pieces, each with the history of placements that covered it, so a sample
is attributed to the code that was there when it was taken, whatever came
later (as ``perf inject --jit`` does by processing records in time order).

A dump is its writer's to make, and a user can write a million records
cheap to write and dear to index. So a record costs O(log n) whatever the
order of its address and time (the piece starts and any history written
out of time order are ``SortedBlocks``), and memory follows the entries
held: a piece cut in two copies its history, and the copy counts against
``max_entries`` as the placements themselves do.
"""

from __future__ import annotations

import bisect
from operator import attrgetter
from typing import TYPE_CHECKING, Union

from qtools.qformat.jit.jitaddr import JIT_STRIDE

from .sortedblocks import SortedBlocks

if TYPE_CHECKING:
    from qtools.qformat.jit.jitdump import Placement

MAX_ENTRIES = 1 << 20  # (piece, placement) pairs held: a placement costs one per piece it covers
SORTED_FROM = 64  # a history written out of time order this long becomes SortedBlocks

_TIME = attrgetter("time")

#: placements in time order (equal times in file order)
History = Union[list["Placement"], SortedBlocks["Placement"]]


class PlacementIndex:
    """Pieces of the address space with their placements in time order.

    A piece begins at a start in ``_starts`` and ends where the next one
    begins; ``_history`` holds its placements, or None for a gap (no
    placement covers it). The last piece is always a gap: the addresses
    past every placement."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._starts: SortedBlocks[int] = SortedBlocks()
        self._history: dict[int, History | None] = {}
        self.entries = 0  # placements held, counted once for each piece that holds them
        self.max_entries = max_entries

    def held(self) -> int:
        """The entries the pieces hold, counted one by one (``entries`` keeps the sum)."""
        return sum(len(h) for h in self._history.values() if h is not None)

    def _holding(self, address: int) -> tuple[int | None, History | None]:
        """The start and history of the piece that holds ``address``."""
        start = self._starts.floor(address)
        return start, (self._history[start] if start is not None else None)

    def _cut(self, at: int, start: int | None, history: History | None) -> None:
        """Make ``at`` the start of a piece, cutting the one (``start``,
        ``history``) that holds it: both halves keep the history."""
        if start != at:
            self._starts.add(at)
            self._history[at] = None if history is None else history.copy()

    def add(self, p: Placement) -> bool:
        """Add a placement; False (and nothing added) when that would pass
        ``max_entries``: hostile dumps of loads over loads cannot eat memory."""
        start, end = p.addr, p.addr + max(1, min(p.size, JIT_STRIDE))
        room = self.max_entries - self.entries
        inside = self._starts.between(start, end, room)
        history = self._history
        first = self._holding(start)
        # the piece holding end: its own, the last inside, or the one cut at start
        last = ((end, None) if end in history else
                (inside[-1], history[inside[-1]]) if inside else first)
        cost = 1 + len(inside) + _copied(start, *first) + _copied(end, *last)
        if cost > room:
            return False
        self._cut(start, *first)
        self._cut(end, *last)
        for at in (start, *inside):
            held = history[at]
            history[at] = [p] if held is None else _placed(held, p)
        self.entries += cost
        return True

    def at(self, address: int, time: int | None = None) -> Placement | None:
        """The placement covering ``address`` at ``time`` (None: the latest)."""
        _start, history = self._holding(address)
        if history is None:
            return None
        if isinstance(history, SortedBlocks):
            return history.last() if time is None else history.floor(time)
        if time is None:
            return history[-1]
        i = bisect.bisect_right(history, time, key=_TIME)
        return history[i - 1] if i else None


def _copied(at: int, start: int | None, history: History | None) -> int:
    """Entries that cutting the piece (``start``, ``history``) at ``at`` copies."""
    return 0 if history is None or start == at else len(history)


def _placed(history: History, p: Placement) -> History:
    """``history`` with ``p`` after the placements of earlier or equal times."""
    if isinstance(history, SortedBlocks):
        history.add(p)
    elif history[-1].time <= p.time:
        history.append(p)
    elif len(history) < SORTED_FROM:
        bisect.insort_right(history, p, key=_TIME)
    else:  # a list's insert moves all after it: a long history written backwards is n**2
        history = SortedBlocks(history, key=_TIME)
        history.add(p)
    return history
