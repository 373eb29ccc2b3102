"""An object's DWARF as a view uses it: line rows and inlined subroutines.

Reading a whole line program of a large library (libpython: hundreds of
compilation units) costs seconds, so only the units that hold addresses
a view asks about are read: ``.debug_aranges`` says which unit holds an
address (aranges.py), and each unit is read when an address first falls
in it. What was read is kept as a ``SymbolTable`` of rows (start, end,
``PATH:LINE``) in the symbol cache, with the address ranges of the units
and which were parsed, so a warm view opens no DWARF at all. Without
``.debug_aranges`` every unit is read once.

Each ``Work`` is read from the bytes (dwarfread.py, lineprog.py,
diescan.py; ``run``). Nothing in the file is trusted: errors of any kind
make the object's lines unknown (one warning), and the rows kept are
capped.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterable, NamedTuple

from qtools.qformat.limits import DEFAULT_LIMITS

from .diescan import MAX_DEPTH, MAX_ENTRIES, SCOPES, Span, UnitBytes, subprograms
from .symtab import RawSymbol, SymbolTable

if TYPE_CHECKING:  # the readers are imported when a view first reads DWARF: not at start
    from .dwarfread import DwarfFile, Entry, Unit

MAX_ROWS = 4_000_000  # line rows kept for one object (libpython has ~1M)
MAX_UNITS = 200_000  # compilation units listed for one object


class LineProblem(Exception):
    """The DWARF of a file cannot be read."""


class LineIndex(NamedTuple):
    """What is known of one object's lines: the rows of the units parsed,
    the address ranges of all units (``.debug_aranges``) and which units
    were parsed; ``complete`` when every unit was (no aranges). Lines read
    later make a new index (``ObjectLines``)."""

    table: SymbolTable
    ranges: list[tuple[int, int, int]]  # (start, end, unit offset), sorted by start
    parsed: set[int]
    complete: bool
    # Inlined code: disjoint ranges, each named by its chain of inlined
    # functions, innermost first (``encode_chain``).
    inlines: SymbolTable
    # the functions (their ranges) whose inlined code ``inlines`` holds
    inline_done: list[tuple[int, int]]

    def unit_of(self, address: int) -> int | None:
        i = bisect_right(self.ranges, (address, 1 << 64, 0)) - 1
        for j in range(i, max(i - 8, -1), -1):
            start, end, unit = self.ranges[j]
            if start <= address < end:
                return unit
        return None

    def meta(self) -> dict[str, Any]:
        return {"ranges": [list(r) for r in self.ranges], "parsed": sorted(self.parsed),
                "complete": self.complete, "inline_done": [list(r) for r in self.inline_done]}

    @classmethod
    def from_meta(cls, table: SymbolTable, meta: dict[str, Any],
                  inlines: tuple[SymbolTable, dict[str, Any]] | None) -> LineIndex | None:
        """The index cached as ``table`` and ``meta``, with the inlined
        ranges cached beside it for the same units (else None: re-read)."""
        try:
            ranges = [(int(a), int(b), int(c)) for a, b, c in meta["ranges"]]
            parsed = {int(u) for u in meta["parsed"]}
            if inlines is None or {int(u) for u in inlines[1]["parsed"]} != parsed:
                return None
            done = sorted((int(a), int(b)) for a, b in inlines[1]["inline_done"])
            return cls(table, sorted(ranges), parsed, bool(meta["complete"]), inlines[0], done)
        except (KeyError, TypeError, ValueError):
            return None


InlineFrame = tuple[str, str, int]  # function, and the file and line it is at
_FRAME, _FIELD = "\x1e", "\x1f"


def encode_chain(chain: list[InlineFrame]) -> str:
    return _FRAME.join(f"{n}{_FIELD}{f}{_FIELD}{line}" for n, f, line in chain)


def decode_chain(text: str) -> list[InlineFrame]:
    out: list[InlineFrame] = []
    for part in text.split(_FRAME):
        fields = part.split(_FIELD)
        if len(fields) == 3:
            out.append((fields[0], fields[1], int(fields[2]) if fields[2].isdigit() else 0))
    return out


def split_line(name: str) -> tuple[str, int]:
    """``PATH:LINE`` of a row into its parts."""
    path, _, line = name.rpartition(":")
    return path, int(line) if line.isdigit() else 0


Work = Callable[["DwarfFile"], Any]  # what to read of an object's DWARF (``run``)


def parse_rows(units: set[int] | None) -> Work:
    """The line rows of ``units`` (None: of every unit) and the units read."""
    def work(df: DwarfFile) -> tuple[SymbolTable, set[int]]:
        from .lineprog import line_program
        rows: list[RawSymbol] = []
        todo = df.unit_offsets() if units is None else sorted(units)
        for offset in todo:
            program = line_program(df.unit(offset))
            if program is not None:
                _rows_of(program[1], program[0], rows)
            if len(rows) > MAX_ROWS:
                raise LineProblem(f"more than {MAX_ROWS} line rows")
        return SymbolTable.build(rows), set(todo)
    return work


Functions = dict[int, list[tuple[int, int, int]]]  # unit -> (start, end, entry offset) sorted


def parse_inlines(unit: int, vaddr: int, functions: Functions) -> Work:
    """The inlined code of the function of ``unit`` that holds ``vaddr``:
    its ranges, and its inlined ranges named by their chains. Only that
    function's entries are read whole (the unit's other entries are
    stepped over, diescan.py), so a view pays for the functions it shows."""
    def work(df: DwarfFile) -> tuple[list[tuple[int, int]], SymbolTable]:
        from .lineprog import line_program
        u = df.unit(unit)
        base = u.low_pc
        program = line_program(u)
        file_name = program[0] if program is not None else _no_file
        known = functions.get(unit)
        if known is None:
            found = subprograms(own_unit(u), lambda offset: u.ranges(u.entry(offset), base))
            if found is None:  # what the scan does not step through: entry by entry
                found = functions_by_entry(u, base)
            known = functions[unit] = sorted(found, key=lambda f: f[0])
        offset = _holding(known, vaddr)
        if offset is None:
            return [(vaddr, vaddr + 1)], SymbolTable.empty()
        spans = [r for r in u.ranges(u.entry(offset), base) if r[1] > r[0]]
        pieces: list[Piece] = []
        for entry in u.entries_below(offset):
            if entry.tag == "DW_TAG_inlined_subroutine":
                attrs = entry.attrs
                call_file = file_name(_constant(attrs["DW_AT_call_file"])) \
                    if "DW_AT_call_file" in attrs else ""
                call_line = _constant(attrs["DW_AT_call_line"]) if "DW_AT_call_line" in attrs \
                    else 0
                _add_piece(pieces, u.ranges(entry, base), own_origin_name(u, entry), call_file,
                           call_line)
        return spans, _sweep(pieces)
    return work


def _holding(known: list[tuple[int, int, int]], vaddr: int) -> int | None:
    i = bisect_right(known, vaddr, key=lambda f: f[0]) - 1
    return next((known[j][2] for j in range(i, max(i - 8, -1), -1)
                 if known[j][0] <= vaddr < known[j][1]), None)


def _no_file(index: int) -> str:
    return "?"


def _constant(attr: tuple[str, Any]) -> int:
    if not isinstance(attr[1], int) or isinstance(attr[1], bool):
        from .dwarfread import Unsupported
        raise Unsupported(f"a constant of form {attr[0]}")
    return attr[1]


def open_dwarf(f: BinaryIO, max_inflated: int = DEFAULT_LIMITS.debug_size) -> DwarfFile:
    """The DWARF of the open ELF file ``f`` (it must stay open), compressed
    sections inflated up to ``max_inflated`` bytes each (lazydwarf)."""
    from .dwarfread import DwarfFile
    try:
        return DwarfFile(f, max_inflated)
    except OSError:
        raise
    except Exception as e:  # not ELF, damaged, no .debug_info
        raise LineProblem(_unreadable(e)) from None


def run(work: Work, df: DwarfFile) -> Any:
    """``work`` read from the bytes of ``df``; LineProblem where they
    cannot be read."""
    try:
        return work(df)
    except (LineProblem, OSError):
        raise
    except Exception as e:  # Unsupported, or damage of any kind (IndexError, ValueError...)
        raise LineProblem(_unreadable(e)) from None


def _unreadable(e: Exception) -> str:
    return f"unreadable DWARF ({type(e).__name__}: {e})"[:200]


def raw_rows(table: SymbolTable) -> list[RawSymbol]:
    return [RawSymbol(s, e - s, 0, n) for s, e, n in zip(table.starts, table.ends, table.names)]


def _rows_of(states: Iterable[tuple[int, int, int, bool]], file_name: Callable[[int], str],
             rows: list[RawSymbol]) -> None:
    """A line program's rows (address, file, line, end of sequence) into
    ``rows``: each address range of one line, named ``PATH:LINE``."""
    prev = None  # (address, file, line) of the row open
    for address, file, line, end_sequence in states:
        if prev is not None and address > prev[0] and prev[2] > 0:
            rows.append(RawSymbol(prev[0], address - prev[0], 0,
                                  f"{file_name(prev[1])}:{prev[2]}"))
        prev = None if end_sequence else (address, file, line)


MAX_ORIGIN_HOPS = 8  # abstract_origin/specification links followed for a name
Piece = tuple[int, int, str, str, int]  # start, end, name, call file, call line


def _add_piece(pieces: list[Piece], ranges: list[tuple[int, int]], name: str, call_file: str,
               call_line: int) -> None:
    """An inlined subroutine's ranges into ``pieces``."""
    for start, end in ranges:
        if end > start:
            pieces.append((start, end, name, call_file, call_line))
    if len(pieces) > MAX_ROWS:
        raise LineProblem(f"more than {MAX_ROWS} inlined ranges")


def _sweep(pieces: list[Piece]) -> SymbolTable:
    """A function's inlined subroutines as disjoint ranges named by their
    chain, innermost first: each range's function with the line it is at
    (its callee's call site; the innermost's own line comes from the line
    table, so it is 0 here)."""
    out: list[RawSymbol] = []
    # Sweep the boundaries: each elementary range gets the pieces over it,
    # the smallest (innermost) first.
    bounds = sorted({p[0] for p in pieces} | {p[1] for p in pieces})
    pieces.sort()
    active: list[Piece] = []
    k = 0
    for lo, hi in zip(bounds, bounds[1:]):
        while k < len(pieces) and pieces[k][0] <= lo:
            active.append(pieces[k])
            k += 1
        active = [p for p in active if p[1] > lo]
        if not active:
            continue
        inner = sorted(active, key=lambda p: (p[1] - p[0], -p[0]))
        # a frame is at the line where the frame inside it was inlined
        chain = [(inner[0][2], "", 0)] + [
            (outer[2], inner[i][3], inner[i][4]) for i, outer in enumerate(inner[1:])]
        # the containing function is at the outermost piece's call site
        chain.append(("", inner[-1][3], inner[-1][4]))
        out.append(RawSymbol(lo, hi - lo, 0, encode_chain(chain)))
    return SymbolTable.build(out)


_NAMES = ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name", "DW_AT_name")
_LINKS = ("DW_AT_abstract_origin", "DW_AT_specification")


def own_origin_name(unit: Unit, entry: Entry) -> str:
    """The name of an inlined subroutine: its own (linkage name first), or
    its abstract origin's, or that one's specification's; "?" where there
    is none, or it is in a supplementary file (dwz's), which is not read."""
    from .dwarfread import SUPPLEMENTARY
    for _ in range(MAX_ORIGIN_HOPS):
        attrs = entry.attrs
        for key in _NAMES:
            if key in attrs:
                return unit.text(attrs[key]) if attrs[key][0] not in SUPPLEMENTARY else "?"
        for link in _LINKS:
            if link in attrs:
                if attrs[link][0] in SUPPLEMENTARY:
                    return "?"
                unit, entry = unit.reference(attrs[link])
                break
        else:
            break
    return "?"


def own_unit(unit: Unit) -> UnitBytes:
    """A unit dwarfread has read the header of."""
    def abbrev(code: int) -> tuple[str, bool, Iterable[tuple[str, str]]]:
        tag, children, specs = unit.abbrev(code)
        return tag, children, [(name, form) for name, form, _const in specs]
    return UnitBytes(unit.data, unit.die_offset, unit.offset, unit.version, unit.addr_size,
                     unit.offset_size, unit.df.order, abbrev)


def functions_by_entry(unit: Unit, base: int) -> list[Span]:
    """What ``subprograms`` finds, every entry of the unit read whole by
    dwarfread (``base``: the unit's base address): for the units the scan
    does not step through."""
    from .dwarfread import Unsupported
    out: list[Span] = []
    _top, pos, children = unit.step(0)
    scopes = [True] if children else []  # per open list: whether its entries are read
    count = 0
    while scopes and pos < len(unit.data):
        entry, pos, children = unit.step(pos)
        if not entry.tag:
            scopes.pop()
            continue
        count += 1
        if count > MAX_ENTRIES:
            raise Unsupported(f"more than {MAX_ENTRIES} entries in one unit")
        if scopes[-1] and entry.tag == "DW_TAG_subprogram":
            out.extend((lo, hi, entry.offset) for lo, hi in unit.ranges(entry, base) if hi > lo)
        if children:
            scopes.append(scopes[-1] and entry.tag in SCOPES)
            if len(scopes) > MAX_DEPTH:
                raise Unsupported("entries nested too deeply")
    return out
