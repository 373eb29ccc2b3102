"""DWARF read with pyelftools: line programs and inlined subroutines.

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
import struct
from bisect import bisect_right
from typing import Any, BinaryIO, Callable, Iterable, Iterator, NamedTuple

from qtools.qformat import open_regular
from qtools.qformat.elfhdr import read_sections

from .diescan import SCOPES, subprograms
from .symtab import RawSymbol, SymbolTable

MAX_ROWS = 4_000_000  # line rows kept for one object (libpython has ~1M)
MAX_UNITS = 200_000  # compilation units listed for one object
MAX_ARANGES = 1 << 28  # bytes of .debug_aranges read at most (libxul's is some MB)


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


def has_lines(path: str) -> bool:
    """Whether the ELF file at ``path`` has a DWARF line table."""
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            found = read_sections(f, os.fstat(f.fileno()).st_size)
    except Exception:  # not ELF, unreadable: no lines from it
        return False
    return any(s.name in (".debug_line", ".zdebug_line") for s in found)


def read_index(path: str) -> LineIndex:
    """The unit ranges of the file at ``path``; no rows yet."""
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            ranges = _plain_aranges(f)
    except Exception:  # read as below, which says what is wrong
        ranges = None
    if ranges is not None:
        return LineIndex(SymbolTable.empty(), ranges, set(), not ranges, SymbolTable.empty(), [])
    return _with_dwarf(path, lambda dw: _ranges(dw))


_ARANGES_HEADER = struct.Struct("IHIBB")  # 32-bit DWARF: length, version, unit, sizes


def _plain_aranges(f: BinaryIO) -> list[tuple[int, int, int]] | None:
    """What ``_ranges`` reads through pyelftools, from the ``.debug_aranges``
    section alone, where it is plain (32-bit DWARF, no segments, not GNU
    ``.zdebug`` compressed): pyelftools would decompress every DWARF section
    first (a large debug file's 50 ms) and parse each entry with construct.
    None: read it through pyelftools."""
    from .lazydwarf import plain_sections, section_stream
    plain = plain_sections(f)
    if plain is None:
        return None
    header, sections = plain
    section = sections.get(".debug_aranges")
    if ".debug_info" not in sections or section is None:
        return None
    stream = section_stream(f, header, section)
    if stream is None or stream.size > MAX_ARANGES:
        return None
    data = stream.read()
    order = header.endian
    header_fmt = struct.Struct(order + _ARANGES_HEADER.format)
    pairs = {4: struct.Struct(order + "II"), 8: struct.Struct(order + "QQ")}
    ranges: list[tuple[int, int, int]] = []
    offset = 0
    while offset < len(data):
        length, _version, unit, address_size, segment_size = header_fmt.unpack_from(data, offset)
        pair = pairs.get(address_size)
        if length >= 0xFFFFFFF0 or segment_size or pair is None:
            return None
        pos = -(-(offset + header_fmt.size) // pair.size) * pair.size  # tuples are aligned
        while True:
            begin, size = pair.unpack_from(data, pos)
            pos += pair.size
            if begin == 0 and size == 0:
                break
            if size > 0:
                ranges.append((begin, begin + size, unit))
            if len(ranges) > MAX_UNITS * 16:
                raise LineProblem("too many address ranges")
        offset += length + 4
    ranges.sort()
    return ranges


def parse_rows(units: set[int] | None) -> Callable[[Any], tuple[SymbolTable, set[int]]]:
    """The line rows of ``units`` (None: of every unit) and the units read."""
    def work(dw: Any) -> tuple[SymbolTable, set[int]]:
        rows: list[RawSymbol] = []
        todo = _units(dw) if units is None else [dw.get_CU_at(u) for u in sorted(units)]
        for cu in todo:
            _unit_rows(dw, cu, rows)
            if len(rows) > MAX_ROWS:
                raise LineProblem(f"more than {MAX_ROWS} line rows")
        return SymbolTable.build(rows), {cu.cu_offset for cu in todo}
    return work


Functions = dict[int, list[tuple[int, int, int]]]  # unit -> (start, end, entry offset) sorted


def parse_inlines(unit: int, vaddr: int, functions: Functions
                  ) -> Callable[[Any], tuple[list[tuple[int, int]], SymbolTable]]:
    """The inlined code of the function of ``unit`` that holds ``vaddr``:
    its ranges, and its inlined ranges named by their chains. Only that
    function's entries are read whole (the unit's other entries are
    stepped over, diescan.py), so a view pays for the functions it shows."""
    def work(dw: Any) -> tuple[list[tuple[int, int]], SymbolTable]:
        cu = dw.get_CU_at(unit)
        top = cu.get_top_DIE()
        base = _low_pc(top)
        program = dw.line_program_for_CU(cu)
        file_name = _file_names(cu, program) if program is not None else (lambda i: "?")
        known = functions.get(unit)
        if known is None:
            found = subprograms(dw, cu, lambda offset: _die_ranges(
                dw, cu, dw.get_DIE_from_refaddr(offset, cu), base))
            if found is None:  # what the scan does not read: pyelftools, entry by entry
                found = [(lo, hi, die.offset) for lo, hi, die in _functions(dw, cu, top, base)]
            known = functions[unit] = sorted(found, key=lambda f: f[0])
        i = bisect_right(known, vaddr, key=lambda f: f[0]) - 1
        offset = next((known[j][2] for j in range(i, max(i - 8, -1), -1)
                       if known[j][0] <= vaddr < known[j][1]), None)
        if offset is None:
            return [(vaddr, vaddr + 1)], SymbolTable.empty()
        die = dw.get_DIE_from_refaddr(offset, cu)
        spans = [r for r in _die_ranges(dw, cu, die, base) if r[1] > r[0]]
        out: list[RawSymbol] = []
        _unit_inlines(dw, cu, file_name, out, _subtree(die))
        return spans, SymbolTable.build(out)
    return work




def _functions(dw: Any, cu: Any, parent: Any, base: int) -> Iterator[tuple[int, int, Any]]:
    """The subprogram DIEs with code (below ``parent``, through namespaces
    and classes), by each of their ranges; their children are skipped."""
    for die in parent.iter_children():
        if die.tag == "DW_TAG_subprogram":
            for lo, hi in _die_ranges(dw, cu, die, base):
                if hi > lo:
                    yield lo, hi, die
        elif die.tag in SCOPES and die.has_children:
            yield from _functions(dw, cu, die, base)


def _subtree(die: Any) -> Iterator[Any]:
    stack = [die]
    count = 0
    while stack:
        d = stack.pop()
        yield d
        count += 1
        if count > MAX_ROWS:
            raise LineProblem(f"more than {MAX_ROWS} entries in one function")
        if d.has_children:
            stack.extend(d.iter_children())


def _with_dwarf(path: str, work: Callable[[Any], Any]) -> Any:
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            return guarded(work, dwarf_of(f))
    except OSError as e:
        raise LineProblem(f"cannot read: {e.strerror or e}") from None


def dwarf_of(f: BinaryIO) -> Any:
    from .lazydwarf import NoDwarf, dwarf_info
    try:
        return dwarf_info(f)
    except NoDwarf:
        raise LineProblem("no DWARF") from None
    except Exception as e:  # pyelftools raises ELFError, DWARFError, struct errors, ...
        raise LineProblem(f"unreadable DWARF ({type(e).__name__}: {e})"[:200]) from None


def guarded(work: Callable[[Any], Any], dw: Any) -> Any:
    try:
        return work(dw)
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
    return LineIndex(SymbolTable.empty(), ranges, set(), not ranges, SymbolTable.empty(), [])


def raw_rows(table: SymbolTable) -> list[RawSymbol]:
    return [RawSymbol(s, e - s, 0, n) for s, e, n in zip(table.starts, table.ends, table.names)]


def _unit_rows(dw: Any, cu: Any, rows: list[RawSymbol]) -> Callable[[int], str]:
    """The rows of one unit's line program (each address range of one
    line) into ``rows``; returns how the program names its files."""
    program = dw.line_program_for_CU(cu)
    if program is None:
        return lambda index: "?"
    file_name = _file_names(cu, program)
    prev = None  # (address, file, line) of the row open
    for entry in program.get_entries():
        state = entry.state
        if state is None:
            continue
        if prev is not None and state.address > prev[0] and prev[2] > 0:
            rows.append(RawSymbol(prev[0], state.address - prev[0], 0,
                                  f"{file_name(prev[1])}:{prev[2]}"))
        prev = None if state.end_sequence else (state.address, state.file, state.line)
    return file_name


def _file_names(cu: Any, program: Any) -> Callable[[int], str]:
    """How the unit's line program names its files (by index), as paths."""
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

    return file_name


MAX_ORIGIN_HOPS = 8  # abstract_origin/specification links followed for a name


def _unit_inlines(dw: Any, cu: Any, file_name: Callable[[int], str],
                  out: list[RawSymbol], dies: Iterable[Any]) -> None:
    """The unit's inlined subroutines as disjoint ranges named by their
    chain, innermost first: each range's function with the line it is at
    (its callee's call site; the innermost's own line comes from the line
    table, so it is 0 here)."""
    pieces: list[tuple[int, int, str, str, int]] = []  # start, end, name, call file, line
    base = _low_pc(cu.get_top_DIE())
    for die in dies:
        if die.tag != "DW_TAG_inlined_subroutine":
            continue
        name = _origin_name(die)
        attrs = die.attributes
        call_file = file_name(attrs["DW_AT_call_file"].value) \
            if "DW_AT_call_file" in attrs else ""
        call_line = attrs["DW_AT_call_line"].value if "DW_AT_call_line" in attrs else 0
        for start, end in _die_ranges(dw, cu, die, base):
            if end > start:
                pieces.append((start, end, name, call_file, call_line))
        if len(pieces) > MAX_ROWS:
            raise LineProblem(f"more than {MAX_ROWS} inlined ranges")
    if not pieces:
        return
    # Sweep the boundaries: each elementary range gets the pieces over it,
    # the smallest (innermost) first.
    bounds = sorted({p[0] for p in pieces} | {p[1] for p in pieces})
    pieces.sort()
    active: list[tuple[int, int, str, str, int]] = []
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


def _origin_name(die: Any) -> str:
    for _ in range(MAX_ORIGIN_HOPS):
        attrs = die.attributes
        for key in ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name", "DW_AT_name"):
            if key in attrs:
                return _text(attrs[key].value)
        for link in ("DW_AT_abstract_origin", "DW_AT_specification"):
            if link in attrs:
                die = die.get_DIE_from_attribute(link)
                break
        else:
            break
    return "?"


def _low_pc(die: Any) -> int:
    attr = die.attributes.get("DW_AT_low_pc")
    return int(attr.value) if attr is not None else 0


def _die_ranges(dw: Any, cu: Any, die: Any, base: int) -> list[tuple[int, int]]:
    attrs = die.attributes
    if "DW_AT_low_pc" in attrs and "DW_AT_high_pc" in attrs:
        low = attrs["DW_AT_low_pc"].value
        high = attrs["DW_AT_high_pc"]
        end = low + high.value if high.form != "DW_FORM_addr" else high.value
        return [(low, end)]
    if "DW_AT_ranges" not in attrs:
        return []
    lists = dw.range_lists()
    if lists is None:
        return []
    out = []
    # (a DW_FORM_rnglistx value comes translated to its offset)
    entries = lists.get_range_list_at_offset(attrs["DW_AT_ranges"].value, cu=cu)
    for entry in entries:
        if hasattr(entry, "base_address"):
            base = entry.base_address
            continue
        absolute = getattr(entry, "is_absolute", False)
        start = entry.begin_offset if absolute else base + entry.begin_offset
        end = entry.end_offset if absolute else base + entry.end_offset
        out.append((start, end))
    return out


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
