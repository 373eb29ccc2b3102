"""The functions of one compilation unit, found by reading its entries' bytes.

To name the code inlined at an address, dwarflines.py needs the
subprogram holding it, among those at the unit's top level (and inside
namespaces and classes). pyelftools builds an object with every attribute
decoded for each entry on the way, and a unit's top level is mostly its
types and declarations: libc's ``libc-start.c`` has 1,249 entries there,
which cost two thirds of a first view's DWARF reading. Here the entries
are stepped over as the abbreviations lay them out, a subprogram's
children skipped by its ``DW_AT_sibling`` (or stepped over too), and only
``DW_AT_low_pc``, ``DW_AT_high_pc`` and ``DW_AT_ranges`` of subprograms are
read. Whatever this does not read itself (a form it does not know, an
indirect form, an address given by index, a range list) is left to
dwarfread.py: an entry of the kind gets its ranges from there, and a unit
the scan cannot step through is read there entry by entry
(``dwarflines.functions_by_entry``). The unit comes as bytes and an abbreviation lookup
(``UnitBytes``).
Nothing is trusted: a reference that does not lead forward, a truncated
unit or too many entries end the scan (None).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple

from qtools.qformat.objects.ehframe import uleb  # LEB128, as DWARF encodes it everywhere

SCOPES = frozenset(("DW_TAG_namespace", "DW_TAG_class_type", "DW_TAG_structure_type",
                    "DW_TAG_union_type", "DW_TAG_module"))
MAX_ENTRIES = 4_000_000  # entries stepped over in one unit
MAX_DEPTH = 256

# The forms by how they are laid out (dwarfread.py reads their values)
FIXED_WIDTHS = {
    "DW_FORM_data1": 1, "DW_FORM_ref1": 1, "DW_FORM_flag": 1, "DW_FORM_strx1": 1,
    "DW_FORM_addrx1": 1, "DW_FORM_data2": 2, "DW_FORM_ref2": 2, "DW_FORM_strx2": 2,
    "DW_FORM_addrx2": 2, "DW_FORM_strx3": 3, "DW_FORM_addrx3": 3, "DW_FORM_data4": 4,
    "DW_FORM_ref4": 4, "DW_FORM_ref_sup4": 4, "DW_FORM_strx4": 4, "DW_FORM_addrx4": 4,
    "DW_FORM_data8": 8, "DW_FORM_ref8": 8, "DW_FORM_ref_sig8": 8, "DW_FORM_ref_sup8": 8,
    "DW_FORM_data16": 16, "DW_FORM_flag_present": 0, "DW_FORM_implicit_const": 0,
}
OFFSET_FORMS = frozenset(("DW_FORM_strp", "DW_FORM_line_strp", "DW_FORM_sec_offset",
                     "DW_FORM_strp_sup", "DW_FORM_GNU_ref_alt", "DW_FORM_GNU_strp_alt"))
ULEB_FORMS = frozenset(("DW_FORM_udata", "DW_FORM_ref_udata", "DW_FORM_strx", "DW_FORM_addrx",
                   "DW_FORM_loclistx", "DW_FORM_rnglistx", "DW_FORM_GNU_addr_index",
                   "DW_FORM_GNU_str_index", "DW_FORM_sdata"))  # sdata: same length
BLOCK_FORMS = {"DW_FORM_block1": 1, "DW_FORM_block2": 2, "DW_FORM_block4": 4}
ULEB_BLOCK_FORMS = frozenset(("DW_FORM_block", "DW_FORM_exprloc"))
REF_FORMS = frozenset(("DW_FORM_ref1", "DW_FORM_ref2", "DW_FORM_ref4", "DW_FORM_ref8",
                   "DW_FORM_ref_udata"))
_CONSTANT = frozenset(("DW_FORM_data1", "DW_FORM_data2", "DW_FORM_data4", "DW_FORM_data8",
                       "DW_FORM_udata"))

# What an attribute is read for: its value kept (LOW, HIGH, SIBLING), or
# only seen (RANGES); anything else is stepped over.
SKIP, LOW, HIGH_ADDR, HIGH_OFFSET, SIBLING, RANGES, OTHER = range(7)


class ScanStop(Exception):
    """The unit holds what the scan does not read: the caller's reader reads it."""


Span = tuple[int, int, int]  # low, high, the subprogram's .debug_info offset


class UnitBytes(NamedTuple):
    """A unit as the scan reads it: its entries' bytes and how to read them."""

    data: bytes  # from the unit's first entry to its end
    begin: int  # the .debug_info offset of data[0]
    offset: int  # the unit's own offset (references count from it)
    version: int
    addr_size: int
    offset_size: int
    order: Any  # "little" or "big"
    abbrev: Callable[[int], tuple[str, bool, Iterable[tuple[str, str]]]]  # KeyError: none


def subprograms(unit: UnitBytes | None,
                ranges_of: Callable[[int], list[tuple[int, int]]]) -> list[Span] | None:
    """(low, high, entry offset) of each range of each subprogram with code
    below the unit's top entry (through SCOPES), in unit order; None where
    the unit cannot be stepped through here. ``ranges_of(offset)`` gives
    the ranges of an entry this scan does not read itself."""
    try:
        return _scan(unit, ranges_of) if unit is not None else None
    except (ScanStop, IndexError, KeyError, ValueError):
        return None


def _scan(unit: UnitBytes, ranges_of: Callable[[int], list[tuple[int, int]]]) -> list[Span]:
    data, begin, order = unit.data, unit.begin, unit.order
    layouts = _Layouts(unit.abbrev, unit.version, unit.addr_size, unit.offset_size)
    out: list[Span] = []
    pos, depth, entries = 0, 0, 0
    size = len(data)
    # depth 0: the unit's entry; 1: its children; deeper: inside a scope
    # (read alike) or inside anything else (stepped over: "skipping" holds
    # the depth at which that began)
    skipping = 0
    while pos < size:
        at = pos
        code, pos = uleb(data, pos, size)
        if code == 0:  # the end of a list of children
            depth -= 1
            if depth <= 0:
                break
            if skipping and depth < skipping:
                skipping = 0
            continue
        entries += 1
        if entries > MAX_ENTRIES:
            raise ScanStop("too many entries")
        tag, children, steps = layouts.get(code)
        low = high = sibling = None
        high_is_offset = needs_reader = False
        for kind, form, width in steps:
            if kind == SKIP or skipping or depth == 0 or tag != "DW_TAG_subprogram" \
                    and kind != SIBLING:
                pos = _step(data, pos, form, width, order)
                continue
            if kind in (OTHER, RANGES):  # read by ranges_of, for this entry
                needs_reader = True
                pos = _step(data, pos, form, width, order)
            elif kind == SIBLING:
                sibling, pos = _value(data, pos, form, width, order)
            elif kind == LOW:
                low, pos = _value(data, pos, form, width, order)
            else:
                high, pos = _value(data, pos, form, width, order)
                high_is_offset = kind == HIGH_OFFSET
        if pos > size:
            raise ScanStop("truncated entry")
        offset = begin + at
        if not skipping and depth >= 1 and tag == "DW_TAG_subprogram":
            if needs_reader:
                out.extend((lo, hi, offset) for lo, hi in ranges_of(offset) if hi > lo)
            elif low is not None and high is not None:
                hi = low + high if high_is_offset else high
                if hi > low:
                    out.append((low, hi, offset))
        if not children:
            continue
        if depth == 0 or not skipping and tag in SCOPES:
            depth += 1
            if depth > MAX_DEPTH:
                raise ScanStop("nested too deeply")
            continue
        if skipping:
            depth += 1  # inside something stepped over already
            if depth > MAX_DEPTH:
                raise ScanStop("nested too deeply")
            continue
        target = None if sibling is None else unit.offset + sibling - begin
        if target is not None and pos <= target <= size:
            pos = target  # its children jumped over
            continue
        if target is not None:
            raise ScanStop("a sibling that does not lead forward")
        depth += 1  # no sibling: its children are stepped over
        skipping = depth
    return out  # (a unit may end without closing its lists)


class _Layouts:
    """Each abbreviation as (tag, has children, steps): (what, form, width)
    per attribute, width the fixed size in bytes or -1."""

    def __init__(self, abbrev: Callable[[int], tuple[str, bool, Iterable[tuple[str, str]]]],
                 version: int, addr_size: int, offset_size: int) -> None:
        self.abbrev = abbrev
        self.version, self.addr_size, self.offset_size = version, addr_size, offset_size
        self.known: dict[int, tuple[str, bool, list[tuple[int, str, int]]]] = {}

    def get(self, code: int) -> tuple[str, bool, list[tuple[int, str, int]]]:
        got = self.known.get(code)
        if got is None:
            tag, children, specs = self.abbrev(code)
            steps = [self._step(name, form) for name, form in specs]
            got = self.known[code] = (tag, children, steps)
        return got

    def _step(self, name: str, form: str) -> tuple[int, str, int]:
        if form == "DW_FORM_indirect":
            raise ScanStop("indirect form")
        width = self._width(form)
        if name == "DW_AT_sibling":
            return (SIBLING if form in REF_FORMS else SKIP), form, width
        if name == "DW_AT_low_pc":
            return (LOW if form == "DW_FORM_addr" else OTHER), form, width
        if name == "DW_AT_high_pc":
            if form == "DW_FORM_addr":
                return HIGH_ADDR, form, width
            return (HIGH_OFFSET if form in _CONSTANT else OTHER), form, width
        if name == "DW_AT_ranges":
            return RANGES, form, width
        return SKIP, form, width

    def _width(self, form: str) -> int:
        if form == "DW_FORM_addr":
            return self.addr_size
        if form == "DW_FORM_ref_addr":
            return self.offset_size if self.version >= 3 else self.addr_size
        if form in FIXED_WIDTHS:
            return FIXED_WIDTHS[form]
        if form in OFFSET_FORMS:
            return self.offset_size
        if form in ULEB_FORMS or form in BLOCK_FORMS or form in ULEB_BLOCK_FORMS \
                or form == "DW_FORM_string":
            return -1
        raise ScanStop(f"form {form}")


def _step(data: bytes, pos: int, form: str, width: int, order: str) -> int:
    if width >= 0:
        return pos + width
    if form in ULEB_FORMS:
        return uleb(data, pos, len(data))[1]
    if form == "DW_FORM_string":
        end = data.index(b"\0", pos)  # ValueError where there is none
        return end + 1
    if form in BLOCK_FORMS:
        n = BLOCK_FORMS[form]
        length = int.from_bytes(data[pos:pos + n], order)  # type: ignore[arg-type]
        return pos + n + length
    length, pos = uleb(data, pos, len(data))
    return pos + length


def _value(data: bytes, pos: int, form: str, width: int, order: str) -> tuple[int, int]:
    if width >= 0:
        if pos + width > len(data):
            raise ScanStop("truncated value")
        return int.from_bytes(data[pos:pos + width], order), pos + width  # type: ignore[arg-type]
    return uleb(data, pos, len(data))  # udata, ref_udata
