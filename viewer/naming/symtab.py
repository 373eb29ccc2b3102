"""Sorted symbol tables: address -> (name, start), by bisection.

A ``SymbolTable`` is what every symbol source turns into (an ELF object, a
kallsyms copy, a JIT perf map): three parallel arrays sorted by start, so a
lookup is one bisect and the table pickles to a few flat byte strings for the
on-disk cache. Names are kept raw (mangled); demangling happens on a hit.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import BinaryIO, Iterable, Iterator, NamedTuple


class RawSymbol(NamedTuple):
    """One candidate symbol before de-duplication."""

    start: int
    size: int
    rank: int  # lower wins when several symbols share a start (global < weak < local)
    name: str
    cap: int = 0  # for a sizeless symbol: where it ends at the latest (its section's end)


class SymbolTable:
    """Symbols sorted by start; ``ends`` are exclusive."""

    __slots__ = ("starts", "ends", "names")

    def __init__(self, starts: array, ends: array, names: list[str]) -> None:
        if not len(starts) == len(ends) == len(names):
            raise ValueError("symbol arrays differ in length")
        self.starts = starts
        self.ends = ends
        self.names = names

    def __len__(self) -> int:
        return len(self.names)

    @classmethod
    def empty(cls) -> SymbolTable:
        return cls(array("Q"), array("Q"), [])

    @classmethod
    def build(cls, symbols: Iterable[RawSymbol], limit: int | None = None) -> SymbolTable:
        """Sort, keep the best name per start, and give sizeless symbols an end.

        A symbol without a size reaches to the next symbol (to ``limit`` at
        most, for the last one), which is how assembly routines and kallsyms
        entries come.
        """
        best: dict[int, RawSymbol] = {}
        for sym in symbols:
            if sym.start <= 0 or not sym.name:
                continue
            old = best.get(sym.start)
            if old is None or _better(sym, old):
                best[sym.start] = sym
        order = sorted(best)
        starts = array("Q", order)
        ends = array("Q", bytes(8 * len(order)))
        names: list[str] = []
        for i, start in enumerate(order):
            sym = best[start]
            if sym.size > 0:
                end = start + sym.size
            else:
                end = order[i + 1] if i + 1 < len(order) else max(limit or 0, start + 1)
                if sym.cap > start:
                    end = min(end, sym.cap)
            ends[i] = min(end, (1 << 64) - 1)
            names.append(sym.name)
        return cls(starts, ends, names)

    def lookup(self, address: int) -> tuple[str, int] | None:
        """(raw name, start) of the symbol containing ``address``, else None."""
        i = bisect_right(self.starts, address) - 1
        # A sized symbol may be nested in a larger one (a local label inside a
        # function): look back a few entries for an enclosing symbol.
        for j in range(i, max(i - 4, -1), -1):
            if self.starts[j] <= address < self.ends[j]:
                return self.names[j], self.starts[j]
        return None


def _better(new: RawSymbol, old: RawSymbol) -> bool:
    """perf's rule of thumb: global over weak over local, sized over sizeless,
    fewer leading underscores, then the shorter name, then the first in
    order. Decided at the first that differs: most pairs differ in rank
    (a global symbol and its weak or local aliases)."""
    if new.rank != old.rank:
        return new.rank < old.rank
    if (not new.size) != (not old.size):
        return bool(new.size)
    a, b = new.name, old.name
    under_a, under_b = len(a) - len(a.lstrip("_")), len(b) - len(b.lstrip("_"))
    if under_a != under_b:
        return under_a < under_b
    if len(a) != len(b):
        return len(a) < len(b)
    return a < b


MAX_LINE = 1 << 16  # bytes: a longer line of a text copy is malformed


def bounded_lines(f: BinaryIO) -> Iterator[bytes]:
    """Lines of a text copy (kallsyms, a perf map), each at most MAX_LINE
    bytes (longer ones come in pieces and count as malformed), so a hostile
    copy cannot exhaust memory."""
    while True:
        line = f.readline(MAX_LINE)
        if not line:
            return
        yield line
