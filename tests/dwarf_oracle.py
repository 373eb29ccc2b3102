"""pyelftools' reading of an object's DWARF and call-frame entries: the
independent oracle q-view's own readers (viewer/naming: dwarfread,
lineprog, diescan, aranges, fde) are checked against, as sexpdata is for
the ``.info`` tokenizer. q-view itself never imports pyelftools.

Everything here is read by pyelftools' ``ELFFile`` (its sections inflated
whole, its units, entries, range lists and line programs its own); only
the last step, turning rows and inlined pieces into the tables q-view
keeps (``_rows_of``, ``_add_piece``, ``_sweep``, ``file_namer``), is
q-view's, so both readers' answers come out in the same shape.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, BinaryIO, Iterator, NamedTuple

from elftools.dwarf.callframe import FDE
from elftools.elf.elffile import ELFFile

from qtools.viewer.naming.diescan import SCOPES
from qtools.viewer.naming.dwarflines import Piece, _add_piece, _rows_of, _sweep
from qtools.viewer.naming.lineprog import file_namer
from qtools.viewer.naming.symtab import RawSymbol, SymbolTable

MAX_ENTRIES = 4_000_000


def dwarf_of(f: BinaryIO) -> Any:
    """The DWARF of the open ELF file ``f``, as pyelftools reads it (no
    relocations applied: q-view applies none either)."""
    return ELFFile(f).get_dwarf_info(relocate_dwarf_sections=False)


def unit_offsets(dw: Any) -> list[int]:
    return [cu.cu_offset for cu in dw.iter_CUs()]


def rows(dw: Any, units: set[int] | None) -> tuple[SymbolTable, set[int]]:
    """The line rows of ``units`` (None: every unit), and the units read."""
    out: list[RawSymbol] = []
    todo = list(dw.iter_CUs()) if units is None else [dw.get_CU_at(u) for u in sorted(units)]
    for cu in todo:
        program = dw.line_program_for_CU(cu)
        if program is not None:
            _rows_of(((e.state.address, e.state.file, e.state.line, e.state.end_sequence)
                      for e in program.get_entries() if e.state is not None),
                     _file_names(cu, program), out)
    return SymbolTable.build(out), {cu.cu_offset for cu in todo}


def functions(dw: Any, unit: int) -> list[tuple[int, int, int]]:
    """(low, high, entry offset) of each range of each subprogram with
    code of ``unit`` (through namespaces and classes), sorted by low."""
    cu = dw.get_CU_at(unit)
    top = cu.get_top_DIE()
    base = _low_pc(top)
    found = [(lo, hi, die.offset) for lo, hi, die in _functions(dw, cu, top, base)]
    return sorted(found, key=lambda f: f[0])


def inlines(dw: Any, unit: int, vaddr: int,
            known: list[tuple[int, int, int]]) -> tuple[list[tuple[int, int]], SymbolTable]:
    """The function of ``unit`` holding ``vaddr`` (by ``known``, as
    ``functions`` gives them): its ranges, and its inlined code by chain."""
    cu = dw.get_CU_at(unit)
    top = cu.get_top_DIE()
    base = _low_pc(top)
    program = dw.line_program_for_CU(cu)
    file_name = _file_names(cu, program) if program is not None else (lambda i: "?")
    i = bisect_right(known, vaddr, key=lambda f: f[0]) - 1
    offset = next((known[j][2] for j in range(i, max(i - 8, -1), -1)
                   if known[j][0] <= vaddr < known[j][1]), None)
    if offset is None:
        return [(vaddr, vaddr + 1)], SymbolTable.empty()
    die = dw.get_DIE_from_refaddr(offset, cu)
    spans = [r for r in _die_ranges(dw, cu, die, base) if r[1] > r[0]]
    pieces: list[Piece] = []
    for d in _subtree(die):
        if d.tag == "DW_TAG_inlined_subroutine":
            attrs = d.attributes
            call_file = file_name(attrs["DW_AT_call_file"].value) \
                if "DW_AT_call_file" in attrs else ""
            call_line = attrs["DW_AT_call_line"].value if "DW_AT_call_line" in attrs else 0
            _add_piece(pieces, _die_ranges(dw, cu, d, base), _origin_name(d), call_file,
                       call_line)
    return spans, _sweep(pieces)


def aranges(dw: Any) -> list[tuple[int, int, int]]:
    """(start, end, unit offset) of every ``.debug_aranges`` entry with a length."""
    table = dw.get_aranges() if dw.has_debug_info else None
    if table is None:
        return []
    return sorted((e.begin_addr, e.begin_addr + e.length, e.info_offset)
                  for e in table.entries if e.length > 0)


class FdeEntry(NamedTuple):
    start: int
    size: int
    ra_undefined: list[tuple[int, int]] | None


def fde_entries(f: BinaryIO, roots: bool) -> Iterator[FdeEntry]:
    """The ``.eh_frame`` FDEs with a start and a size; with ``roots``, the
    rows of each that undefine the return address."""
    elf = ELFFile(f)
    if elf.get_section_by_name(".eh_frame") is None:
        return
    dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
    if not dwarf.has_EH_CFI():
        return
    for e in dwarf.EH_CFI_entries():
        if not isinstance(e, FDE):
            continue
        start, size = e.header["initial_location"], e.header["address_range"]
        if start <= 0 or size <= 0:
            continue
        yield FdeEntry(start, size, _undefined(e, start + size) if roots else None)


def _undefined(fde: Any, end: int) -> list[tuple[int, int]] | None:
    cie = fde.cie
    if cie is None:
        return None
    ra = cie.header["return_address_register"]
    undefined = 0x07  # DW_CFA_undefined
    if not any(i.opcode == undefined and i.args and i.args[0] == ra
               for i in (*cie.instructions, *fde.instructions)):
        return None
    table = fde.get_decoded().table
    out = []
    for i, row in enumerate(table):
        rule = row.get(ra)
        if rule is not None and rule.type == "UNDEFINED":
            row_end = table[i + 1]["pc"] if i + 1 < len(table) else end
            if row["pc"] < row_end:
                out.append((row["pc"], row_end))
    return out


# -- pyelftools' entries -----------------------------------------------------------

def _functions(dw: Any, cu: Any, parent: Any, base: int,
               budget: list[int] | None = None) -> Iterator[tuple[int, int, Any]]:
    budget = budget if budget is not None else [MAX_ENTRIES]
    for die in _children(parent, budget):
        if die.tag == "DW_TAG_subprogram":
            for lo, hi in _die_ranges(dw, cu, die, base):
                if hi > lo:
                    yield lo, hi, die
        elif die.tag in SCOPES and die.has_children:
            yield from _functions(dw, cu, die, base, budget)


def _subtree(die: Any) -> Iterator[Any]:
    stack = [die]
    budget = [MAX_ENTRIES]
    while stack:
        d = stack.pop()
        yield d
        if d.has_children:
            stack.extend(_children(d, budget))


def _children(die: Any, budget: list[int]) -> Iterator[Any]:
    last = die.offset
    for child in die.iter_children():
        budget[0] -= 1
        if budget[0] < 0 or child.offset <= last:
            raise ValueError("endless children")
        last = child.offset
        yield child


def _file_names(cu: Any, program: Any) -> Any:
    top = cu.get_top_DIE()
    comp_dir = _text(top.attributes["DW_AT_comp_dir"].value) \
        if "DW_AT_comp_dir" in top.attributes else ""
    header = program.header
    return file_namer(header["version"], comp_dir,
                      [_text(d) for d in header["include_directory"]],
                      [(_text(e.name), e.dir_index) for e in header["file_entry"]])


_NAMES = ("DW_AT_linkage_name", "DW_AT_MIPS_linkage_name", "DW_AT_name")
_LINKS = ("DW_AT_abstract_origin", "DW_AT_specification")


def _origin_name(die: Any) -> str:
    for _ in range(8):
        attrs = die.attributes
        for key in _NAMES:
            if key in attrs:
                return _text(attrs[key].value)
        for link in _LINKS:
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
        end = high.value if high.form == "DW_FORM_addr" or high.form.startswith(
            "DW_FORM_addrx") else low + high.value
        return [(low, end)]
    if "DW_AT_ranges" not in attrs:
        return []
    lists = dw.range_lists()
    if lists is None:
        return []
    out = []
    # (a DW_FORM_rnglistx value comes translated to its offset)
    for entry in lists.get_range_list_at_offset(attrs["DW_AT_ranges"].value, cu=cu):
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


# -- both readers -------------------------------------------------------------------

class Compared(NamedTuple):
    """What one comparison covered."""

    units: int  # units whose rows and functions were compared
    rows: int
    addresses: int  # addresses whose inlined chain was compared
    inlined: int  # inlined ranges among them
    fdes: int


def _table(t: SymbolTable) -> tuple[list[int], list[int], list[str]]:
    return list(t.starts), list(t.ends), list(t.names)


def compare(path: Any, units: int = 10_000, per_unit: int = 40, seed: int = 5) -> Compared:
    """Read ``path`` with q-view's readers and with pyelftools and assert
    they agree: the units, the aranges, the line rows of up to ``units``
    units (picked by ``seed``), each unit's functions, the inlined chains
    at up to ``per_unit`` addresses of each (row starts, and addresses
    inside rows), and the ``.eh_frame`` FDEs with their root rows."""
    import random

    from qtools.qformat.objects.elfhdr import read_file_header
    from qtools.viewer.naming import aranges as own_aranges
    from qtools.viewer.naming import dwarflines, fde
    rng = random.Random(f"{seed}:{path}")
    rows_seen = addresses = inlined = 0
    with open(path, "rb") as f1, open(path, "rb") as f2:
        dw = dwarf_of(f1)
        df = dwarflines.open_dwarf(f2)
        offsets = unit_offsets(dw)
        assert df.unit_offsets() == offsets, path
        assert own_aranges.read_index(str(path)).ranges == aranges(dw), path
        picked = offsets if len(offsets) <= units else sorted(rng.sample(offsets, units))
        for unit in picked:
            slow = rows(dw, {unit})
            fast = dwarflines.run(dwarflines.parse_rows({unit}), df)
            assert _table(fast[0]) == _table(slow[0]), (path, hex(unit))
            assert fast[1] == slow[1]
            rows_seen += len(slow[0].starts)
            known = functions(dw, unit)
            found: dwarflines.Functions = {}
            starts = list(slow[0].starts)
            ends = list(slow[0].ends)
            spots = [s for s in starts] + [(s + e) // 2 for s, e in zip(starts, ends)]
            spots += [lo for lo, _hi, _off in known]
            for address in (spots if len(spots) <= per_unit else rng.sample(spots, per_unit)):
                theirs = inlines(dw, unit, address, known)
                ours = dwarflines.run(dwarflines.parse_inlines(unit, address, found), df)
                assert ours[0] == theirs[0], (path, hex(unit), hex(address))
                assert _table(ours[1]) == _table(theirs[1]), (path, hex(unit), hex(address))
                addresses += 1
                inlined += len(theirs[1].names)
            if unit in found:
                assert found[unit] == known, (path, hex(unit))
    with open(path, "rb") as f1, open(path, "rb") as f2:
        theirs_fde = [(e.start, e.size, e.ra_undefined or None) for e in fde_entries(f1, True)]
        ours_fde = [(e.start, e.size, e.ra_undefined or None)
                    for e in fde._entries(f2, read_file_header(f2), True)]
        assert ours_fde == theirs_fde, path
    return Compared(len(picked), rows_seen, addresses, inlined, len(ours_fde))
