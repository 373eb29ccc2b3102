"""What the unwinder needs to know about a process: its executable mappings.

`AddressSpace` is the protocol the collector implements, one per process.
`Mappings` is a small reference implementation (sorted starts + bisect) that
the tests use and the collector may reuse.
"""

from __future__ import annotations

import bisect
import itertools
from typing import Protocol

from .objcfi import ObjectCFI
from .rules import Rule


class AddressSpace(Protocol):
    """One process's executable mappings, as the unwinder sees them."""

    #: per-process cache the unwinder fills (lookup address -> compiled rule);
    #: the owner clears it whenever the executable mappings change
    rule_cache: dict[int, Rule]
    #: names this space's mappings as they are now: a new number whenever
    #: rule_cache is cleared, never one another space had (``new_serial``),
    #: so the unwinder's memo of whole walks can never outlive them
    serial: int

    def find(self, ip: int) -> tuple[ObjectCFI | None, int, int] | None:
        """(cfi, map_start, map_file_offset) of the executable mapping containing ip.

        cfi is None for an executable mapping without an object (JIT code,
        anonymous memory): frames there are kept and unwound through frame
        pointers. None when no executable mapping contains ip: such a return
        address is treated as garbage.
        """
        ...


new_serial = itertools.count(1).__next__
"""A number no AddressSpace had before (AddressSpace.serial)."""


class Mappings:
    """A simple AddressSpace: add and remove mappings; the rule cache is cleared on change."""

    __slots__ = ("_starts", "_maps", "rule_cache", "serial")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._maps: list[tuple[int, int, int, ObjectCFI | None]] = []  # (start, end, offset, cfi)
        self.rule_cache: dict[int, Rule] = {}
        self.serial = new_serial()

    def add(self, start: int, end: int, offset: int, cfi: ObjectCFI | None) -> None:
        """Map [start, end) at file offset `offset`, replacing any overlapped mapping."""
        self.remove(start, end)
        i = bisect.bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._maps.insert(i, (start, end, offset, cfi))
        self.rule_cache.clear()
        self.serial = new_serial()

    def remove(self, start: int, end: int) -> None:
        """Unmap [start, end) (mappings overlapping it are dropped whole)."""
        keep = [m for m in self._maps if m[1] <= start or m[0] >= end]
        if len(keep) != len(self._maps):
            self._maps = keep
            self._starts = [m[0] for m in keep]
            self.rule_cache.clear()
            self.serial = new_serial()

    def find(self, ip: int) -> tuple[ObjectCFI | None, int, int] | None:
        i = bisect.bisect_right(self._starts, ip) - 1
        if i < 0:
            return None
        start, end, offset, cfi = self._maps[i]
        return (cfi, start, offset) if ip < end else None

    def __len__(self) -> int:
        return len(self._maps)
