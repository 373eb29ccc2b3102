"""Source lines and inlined functions of one object, read as a view asks.

``ObjectLines`` answers for link-time addresses from what is cached
(``LineIndex``) and reads more through ``dwarflines`` when an address
falls in a unit (or function) not read yet; ``flush`` merges what was read
into the symbol cache's entry.
"""

from __future__ import annotations

import hashlib
import os
from bisect import bisect_right
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

from qtools.qformat import open_regular
from qtools.qformat.limits import DEFAULT_LIMITS

from .aranges import has_lines, read_index
from .dwarflines import (Functions, InlineFrame, LineIndex, LineProblem, Work, decode_chain,
                         open_dwarf, parse_inlines, parse_rows, raw_rows, run, split_line)
from .symtab import SymbolTable

if TYPE_CHECKING:
    from .dwarfread import DwarfFile

__all__ = ["InlineFrame", "LineIndex", "LineProblem", "ObjectLines", "has_lines", "read_index",
           "path_opener", "path_tag"]


Opener = Callable[[], Any]  # a context manager yielding a path to read, or None


class ObjectLines:
    """The lines of one object, read as addresses are asked about; what was
    read goes to the symbol cache when the symbolizer closes (``flush``)."""

    def __init__(self, index: LineIndex, opener: Opener, label: str,
                 store: Callable[[LineIndex], None], warn: Callable[[str], None],
                 max_inflated: int = DEFAULT_LIMITS.debug_size) -> None:
        self.index = index
        self.max_inflated = max_inflated  # bytes of a compressed section (debug-size)
        self.opener = opener
        self.label = label  # the file the lines come from, for warnings
        self.store = store
        self.warn = warn
        self.failed = False
        # read since the cache entry: rows per unit, inlined code per function
        self.units: dict[int, SymbolTable] = {}
        self.functions: list[tuple[int, int, SymbolTable]] = []  # (start, end, chains)
        # The file stays open until ``flush``: its reader keeps the units
        # (headers, abbreviations, entries' bytes) it has read.
        self._open = ExitStack()
        self._dwarf: DwarfFile | None = None
        self._functions: Functions = {}

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(source path, line) of a link-time address, else None."""
        hit = self.index.table.lookup(vaddr)
        if hit is None:
            table = self._unit_table(vaddr)
            hit = table.lookup(vaddr) if table is not None else None
        return split_line(hit[0]) if hit is not None else None

    def _unit_table(self, vaddr: int) -> SymbolTable | None:
        index = self.index
        if index.complete or self.failed:
            return None
        unit = index.unit_of(vaddr)
        if index.ranges and (unit is None or unit in index.parsed):
            return None
        key = unit if unit is not None else -1
        if key not in self.units:
            got = self._read(parse_rows({unit} if unit is not None else None))
            if got is None:
                return None
            table, units = got
            if unit is None:  # no aranges: every unit was read
                self.index = LineIndex(table, [], units, True, index.inlines,
                                       index.inline_done)
                self.units[key] = SymbolTable.empty()
                return table
            self.units[key] = table
        return self.units[key]

    def _read(self, work: Work) -> Any:
        try:
            if self._dwarf is None:
                path = self._open.enter_context(self.opener())
                if path is None:
                    self.failed = True
                    return None
                f = self._open.enter_context(os.fdopen(open_regular(path), "rb"))
                self._dwarf = open_dwarf(f, self.max_inflated)
            return run(work, self._dwarf)
        except OSError as e:
            self.warn(f"{self.label}: cannot read: {e.strerror or e}; its source lines "
                      "are unknown")
            self.failed = True
            return None
        except LineProblem as e:
            self.warn(f"{self.label}: {e}; its source lines are unknown")
            self.failed = True
            return None

    def inlined(self, vaddr: int, with_line: bool = True) -> list[InlineFrame]:
        """The functions inlined at a link-time address, innermost first,
        each with the file and line it is at (the innermost's from the line
        table); the last entry, named "", is where the containing function
        is. Empty where no inlined code is (or the object has no
        ``.debug_aranges`` to find its unit by). Without ``with_line`` the
        innermost's line is 0 (and no line table is read)."""
        hit = self._chain(vaddr)
        if hit is None:
            return []
        chain = decode_chain(hit)
        line = self.lookup(vaddr) if with_line else None
        if chain and line is not None:
            chain[0] = (chain[0][0], line[0], line[1])
        return chain

    def _chain(self, vaddr: int) -> str | None:
        if _covered(self.index.inline_done, vaddr):
            hit = self.index.inlines.lookup(vaddr)
            return hit[0] if hit is not None else None
        for start, end, table in self.functions:
            if start <= vaddr < end:
                hit = table.lookup(vaddr)
                return hit[0] if hit is not None else None
        unit = self.index.unit_of(vaddr)
        if unit is None or self.failed:
            return None
        got = self._read(parse_inlines(unit, vaddr, self._functions))
        if got is None:
            return None
        spans, table = got
        for start, end in spans:
            self.functions.append((start, end, table))
        if not any(start <= vaddr < end for start, end in spans):
            self.functions.append((vaddr, vaddr + 1, SymbolTable.empty()))
        hit = table.lookup(vaddr)
        return hit[0] if hit is not None else None

    def flush(self) -> None:
        """Store what was read, merged into the cached entry; close the file."""
        self._open.close()
        self._dwarf = None
        self._functions.clear()
        if not self.units and not self.functions:
            return
        index = self.index
        rows = raw_rows(index.table)
        for table in self.units.values():
            rows += raw_rows(table)
        chains = raw_rows(index.inlines)
        seen: set[int] = set()
        for _start, _end, table in self.functions:
            if id(table) not in seen:
                seen.add(id(table))
                chains += raw_rows(table)
        parsed = index.parsed | {u for u in self.units if u >= 0}
        done = sorted(set(index.inline_done) | {(s, e) for s, e, _t in self.functions})
        self.store(LineIndex(SymbolTable.build(rows), index.ranges, parsed, index.complete,
                             SymbolTable.build(chains), done))
        self.units.clear()
        self.functions.clear()


def _covered(spans: list[tuple[int, int]], vaddr: int) -> bool:
    i = bisect_right(spans, (vaddr, 1 << 64)) - 1
    return any(spans[j][0] <= vaddr < spans[j][1] for j in range(max(i - 8, 0), i + 1))


@contextmanager
def _path_cm(path: str) -> Iterator[str]:
    yield path


def path_opener(path: str) -> Callable[[], Any]:
    """An ``Opener`` of a plain path (a debug file)."""
    return lambda: _path_cm(path)


def path_tag(path: str) -> str:
    """Which debug file lines came from, in their cache key (another debug
    file for the same copy is another entry)."""
    try:
        st = os.stat(path)
    except OSError:
        return "0"
    return hashlib.sha256(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
