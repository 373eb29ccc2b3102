"""Source lines of link-time addresses, from DWARF line tables (pyelftools).

Reading a whole line program of a large library (libpython: hundreds of
compilation units) costs seconds in pyelftools, so only the units that
hold addresses a view asks about are read: ``.debug_aranges`` says which
unit holds an address, and each unit is parsed when an address first falls
in it. What was read is kept as a ``SymbolTable`` of rows (start, end,
``PATH:LINE``) in the symbol cache, with the address ranges of the units
and which were parsed, so a warm view opens no DWARF at all. Without
``.debug_aranges`` every unit is parsed once.

Nothing in the file is trusted: pyelftools errors of any kind make the
object's lines unknown (one warning), and the rows kept are capped.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Callable

from elftools.elf.elffile import ELFFile

from qtools.qformat import open_regular

from .symtab import RawSymbol, SymbolTable

MAX_ROWS = 4_000_000  # line rows kept for one object (libpython has ~1M)
MAX_UNITS = 200_000  # compilation units listed for one object


class LineProblem(Exception):
    """The DWARF of a file cannot be read."""


@dataclass
class LineIndex:
    """What is known of one object's lines: the rows of the units parsed,
    the address ranges of all units (``.debug_aranges``) and which units
    were parsed; ``complete`` when every unit was (no aranges)."""

    table: SymbolTable
    ranges: list[tuple[int, int, int]]  # (start, end, unit offset), sorted by start
    parsed: set[int] = field(default_factory=set)
    complete: bool = False

    def unit_of(self, address: int) -> int | None:
        i = bisect_right(self.ranges, (address, 1 << 64, 0)) - 1
        for j in range(i, max(i - 8, -1), -1):
            start, end, unit = self.ranges[j]
            if start <= address < end:
                return unit
        return None

    def meta(self) -> dict[str, Any]:
        return {"ranges": [list(r) for r in self.ranges], "parsed": sorted(self.parsed),
                "complete": self.complete}

    @classmethod
    def from_meta(cls, table: SymbolTable, meta: dict[str, Any]) -> LineIndex | None:
        try:
            ranges = [(int(a), int(b), int(c)) for a, b, c in meta["ranges"]]
            parsed = {int(u) for u in meta["parsed"]}
            return cls(table, sorted(ranges), parsed, bool(meta["complete"]))
        except (KeyError, TypeError, ValueError):
            return None


def split_line(name: str) -> tuple[str, int]:
    """``PATH:LINE`` of a row into its parts."""
    path, _, line = name.rpartition(":")
    return path, int(line) if line.isdigit() else 0


def has_lines(path: str) -> bool:
    """Whether the ELF file at ``path`` has a DWARF line table."""
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            elf = ELFFile(f)
            return elf.get_section_by_name(".debug_line") is not None \
                or elf.get_section_by_name(".zdebug_line") is not None
    except Exception:  # not ELF, unreadable: no lines from it
        return False


def read_index(path: str) -> LineIndex:
    """The unit ranges of the file at ``path``; no rows yet."""
    return _with_dwarf(path, lambda dw: _ranges(dw))


def parse_units(path: str, index: LineIndex, units: set[int]) -> LineIndex:
    """``index`` with the rows of ``units`` (None in ``units``: every unit)."""
    def work(dw: Any) -> LineIndex:
        rows = [RawSymbol(s, e - s, 0, n)
                for s, e, n in zip(index.table.starts, index.table.ends, index.table.names)]
        parsed = set(index.parsed)
        if index.complete or not index.ranges:
            todo = [cu for cu in _units(dw) if cu.cu_offset not in parsed]
            complete = True
        else:
            todo = [dw.get_CU_at(u) for u in sorted(units - parsed)]
            complete = False
        for cu in todo:
            parsed.add(cu.cu_offset)
            _unit_rows(dw, cu, rows)
            if len(rows) > MAX_ROWS:
                raise LineProblem(f"more than {MAX_ROWS} line rows")
        return LineIndex(SymbolTable.build(rows), index.ranges, parsed, complete)
    return _with_dwarf(path, work)


def _with_dwarf(path: str, work: Callable[[Any], Any]) -> Any:
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            elf = ELFFile(f)
            if not elf.has_dwarf_info():
                raise LineProblem("no DWARF")
            return work(elf.get_dwarf_info(relocate_dwarf_sections=False))
    except LineProblem:
        raise
    except OSError as e:
        raise LineProblem(f"cannot read: {e.strerror or e}") from None
    except Exception as e:  # pyelftools raises ELFError, DWARFError, struct errors, ...
        raise LineProblem(f"unreadable DWARF ({type(e).__name__}: {e})"[:200]) from None


def _units(dw: Any) -> list[Any]:
    units = []
    for cu in dw.iter_CUs():
        units.append(cu)
        if len(units) > MAX_UNITS:
            raise LineProblem(f"more than {MAX_UNITS} compilation units")
    return units


def _ranges(dw: Any) -> LineIndex:
    aranges = dw.get_aranges() if dw.has_debug_info else None
    ranges: list[tuple[int, int, int]] = []
    if aranges is not None:
        for entry in aranges.entries:
            if entry.length > 0:
                ranges.append((entry.begin_addr, entry.begin_addr + entry.length,
                               entry.info_offset))
            if len(ranges) > MAX_UNITS * 16:
                raise LineProblem("too many address ranges")
    ranges.sort()
    return LineIndex(SymbolTable.empty(), ranges, set(), not ranges)


def _unit_rows(dw: Any, cu: Any, rows: list[RawSymbol]) -> None:
    """The rows of one unit's line program: each address range of one line."""
    program = dw.line_program_for_CU(cu)
    if program is None:
        return
    top = cu.get_top_DIE()
    comp_dir = _text(top.attributes["DW_AT_comp_dir"].value) \
        if "DW_AT_comp_dir" in top.attributes else ""
    header = program.header
    version = header["version"]
    dirs = [_text(d) for d in header["include_directory"]]
    files = header["file_entry"]
    names: dict[int, str] = {}

    def file_name(index: int) -> str:
        name = names.get(index)
        if name is None:
            i = index if version >= 5 else index - 1
            if not 0 <= i < len(files):
                name = "?"
            else:
                entry = files[i]
                base = _text(entry.name)
                d = entry.dir_index
                if version >= 5:
                    directory = dirs[d] if 0 <= d < len(dirs) else ""
                else:
                    directory = dirs[d - 1] if 1 <= d <= len(dirs) else comp_dir
                if directory and not os.path.isabs(directory) and comp_dir:
                    directory = os.path.join(comp_dir, directory)
                name = os.path.normpath(os.path.join(directory, base))
            names[index] = name
        return name

    prev = None  # (address, file, line) of the row open
    for entry in program.get_entries():
        state = entry.state
        if state is None:
            continue
        if prev is not None and state.address > prev[0] and prev[2] > 0:
            rows.append(RawSymbol(prev[0], state.address - prev[0], 0,
                                  f"{file_name(prev[1])}:{prev[2]}"))
        prev = None if state.end_sequence else (state.address, state.file, state.line)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


Opener = Callable[[], Any]  # a context manager yielding a path to read, or None


class ObjectLines:
    """The lines of one object, read as addresses are asked about; what was
    read goes to the symbol cache when the symbolizer closes (``flush``)."""

    def __init__(self, index: LineIndex, opener: Opener, label: str,
                 store: Callable[[LineIndex], None], warn: Callable[[str], None]) -> None:
        self.index = index
        self.opener = opener
        self.label = label  # the file the lines come from, for warnings
        self.store = store
        self.warn = warn
        self.dirty = False
        self.failed = False

    def lookup(self, vaddr: int) -> tuple[str, int] | None:
        """(source path, line) of a link-time address, else None."""
        hit = self.index.table.lookup(vaddr)
        if hit is None and self._parse_for(vaddr):
            hit = self.index.table.lookup(vaddr)
        return split_line(hit[0]) if hit is not None else None

    def _parse_for(self, vaddr: int) -> bool:
        index = self.index
        if self.failed or index.complete:
            return False
        unit = index.unit_of(vaddr)
        if index.ranges and (unit is None or unit in index.parsed):
            return False
        try:
            with self.opener() as path:
                if path is None:
                    self.failed = True
                    return False
                self.index = parse_units(path, index, {unit} if unit is not None else set())
        except LineProblem as e:
            self.warn(f"{self.label}: {e}; its source lines are unknown")
            self.failed = True
            return False
        self.dirty = True
        return True

    def flush(self) -> None:
        if self.dirty:
            self.store(self.index)
            self.dirty = False
