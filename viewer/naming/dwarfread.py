"""DWARF units read from their bytes: entries, range lists and line programs.

A first view names the inlined code and the source line of a few return
addresses. Here the one unit that holds an address is read as plain data:
its header and abbreviations, the entries of the function asked about,
its range lists (``.debug_ranges``, ``.debug_rnglists``) and its line
program (versions 2 to 5, lineprog.py), the sections through lazydwarf
(inflated only as far as read). This is q-view's only DWARF reader:
pyelftools (which built an object per entry and per row, and cost 22 ms
to import) is the tests' oracle, never imported here.

Read: DWARF 2 to 5, 32- and 64-bit DWARF, either byte order, addresses
of 2, 4 or 8 bytes; every unit type (a type unit's or a split skeleton's
header is stepped over; a skeleton has its line program here, its
entries in a ``.dwo`` file q-view does not open); indirect forms;
indexed strings and addresses (``DW_FORM_strx*``, ``DW_FORM_addrx*``,
their GNU forms). A string or reference into a supplementary file
(``.gnu_debugaltlink``, ``.debug_sup``: dwz) is not followed: such a name
is "?" (``SUPPLEMENTARY``). Nothing is trusted: every offset is checked
against its section, every count bounded; damage raises ``Unsupported``,
which the caller reports as the object's unreadable DWARF.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, BinaryIO, Iterator, NamedTuple

from qtools.qformat.objects.ehframe import sleb, uleb
from qtools.qformat.limits import DEFAULT_LIMITS

from .diescan import BLOCK_FORMS, FIXED_WIDTHS, OFFSET_FORMS, REF_FORMS, ULEB_BLOCK_FORMS, \
    ULEB_FORMS

MAX_UNITS = 200_000  # unit headers walked to find the unit of a cross-unit reference
MAX_ABBREVS = 100_000  # abbreviations in one table
MAX_ENTRIES = 4_000_000  # entries read below one function
MAX_STRING = 1 << 16  # bytes of one string
MAX_RANGES = 1_000_000  # entries of one range list

TAGS = {0x11: "DW_TAG_compile_unit", 0x3C: "DW_TAG_partial_unit", 0x2E: "DW_TAG_subprogram",
        0x1D: "DW_TAG_inlined_subroutine", 0x39: "DW_TAG_namespace", 0x02: "DW_TAG_class_type",
        0x13: "DW_TAG_structure_type", 0x17: "DW_TAG_union_type", 0x1E: "DW_TAG_module"}
ATTRS = {0x01: "DW_AT_sibling", 0x03: "DW_AT_name", 0x10: "DW_AT_stmt_list",
         0x11: "DW_AT_low_pc", 0x12: "DW_AT_high_pc", 0x1B: "DW_AT_comp_dir",
         0x31: "DW_AT_abstract_origin", 0x47: "DW_AT_specification", 0x55: "DW_AT_ranges",
         0x58: "DW_AT_call_file", 0x59: "DW_AT_call_line", 0x6E: "DW_AT_linkage_name",
         0x72: "DW_AT_str_offsets_base", 0x73: "DW_AT_addr_base", 0x74: "DW_AT_rnglists_base",
         0x2007: "DW_AT_MIPS_linkage_name", 0x2133: "DW_AT_GNU_addr_base"}
FORMS = {0x01: "DW_FORM_addr", 0x03: "DW_FORM_block2", 0x04: "DW_FORM_block4",
         0x05: "DW_FORM_data2", 0x06: "DW_FORM_data4", 0x07: "DW_FORM_data8",
         0x08: "DW_FORM_string", 0x09: "DW_FORM_block", 0x0A: "DW_FORM_block1",
         0x0B: "DW_FORM_data1", 0x0C: "DW_FORM_flag", 0x0D: "DW_FORM_sdata",
         0x0E: "DW_FORM_strp", 0x0F: "DW_FORM_udata", 0x10: "DW_FORM_ref_addr",
         0x11: "DW_FORM_ref1", 0x12: "DW_FORM_ref2", 0x13: "DW_FORM_ref4", 0x14: "DW_FORM_ref8",
         0x15: "DW_FORM_ref_udata", 0x16: "DW_FORM_indirect", 0x17: "DW_FORM_sec_offset",
         0x18: "DW_FORM_exprloc", 0x19: "DW_FORM_flag_present", 0x1A: "DW_FORM_strx",
         0x1B: "DW_FORM_addrx", 0x1C: "DW_FORM_ref_sup4", 0x1D: "DW_FORM_strp_sup",
         0x1E: "DW_FORM_data16", 0x1F: "DW_FORM_line_strp", 0x20: "DW_FORM_ref_sig8",
         0x21: "DW_FORM_implicit_const", 0x22: "DW_FORM_loclistx", 0x23: "DW_FORM_rnglistx",
         0x24: "DW_FORM_ref_sup8", 0x25: "DW_FORM_strx1", 0x26: "DW_FORM_strx2",
         0x27: "DW_FORM_strx3", 0x28: "DW_FORM_strx4", 0x29: "DW_FORM_addrx1",
         0x2A: "DW_FORM_addrx2", 0x2B: "DW_FORM_addrx3", 0x2C: "DW_FORM_addrx4",
         0x1F01: "DW_FORM_GNU_addr_index", 0x1F02: "DW_FORM_GNU_str_index",
         0x1F20: "DW_FORM_GNU_ref_alt", 0x1F21: "DW_FORM_GNU_strp_alt"}
_STRX = frozenset(("DW_FORM_strx", "DW_FORM_strx1", "DW_FORM_strx2", "DW_FORM_strx3",
                   "DW_FORM_strx4", "DW_FORM_GNU_str_index"))
_ADDRX = frozenset(("DW_FORM_addrx", "DW_FORM_addrx1", "DW_FORM_addrx2", "DW_FORM_addrx3",
                    "DW_FORM_addrx4", "DW_FORM_GNU_addr_index"))
#: forms that point into a supplementary file (dwz's), which is not opened
SUPPLEMENTARY = frozenset(("DW_FORM_GNU_strp_alt", "DW_FORM_strp_sup", "DW_FORM_GNU_ref_alt",
                           "DW_FORM_ref_sup4", "DW_FORM_ref_sup8"))
# unit types (DWARF 5 7.5.1) and what their header holds after the abbreviation offset
DW_UT_COMPILE, DW_UT_TYPE, DW_UT_PARTIAL, DW_UT_SKELETON, DW_UT_SPLIT_COMPILE, \
    DW_UT_SPLIT_TYPE = 1, 2, 3, 4, 5, 6
_DWO_ID, _TYPE_HEADER = (DW_UT_SKELETON, DW_UT_SPLIT_COMPILE), (DW_UT_TYPE, DW_UT_SPLIT_TYPE)


class Unsupported(Exception):
    """What this reader cannot read, or cannot trust (damage)."""


class Entry(NamedTuple):
    """One debugging information entry: its attributes by name, as (form, value)."""

    offset: int  # in .debug_info
    tag: str
    attrs: dict[str, tuple[str, Any]]


Abbrev = tuple[str, bool, list[tuple[str, str, int]]]  # tag, children, (name, form, const)


class DwarfFile:
    """The DWARF sections of one open ELF file (it must stay open)."""

    def __init__(self, f: BinaryIO, max_inflated: int = DEFAULT_LIMITS.debug_size) -> None:
        from .lazydwarf import plain_sections, section_stream
        self._section_stream = section_stream
        self._max_inflated = max_inflated  # bytes of a compressed section (debug-size)
        self.header, self._sections = plain_sections(f)
        if ".debug_info" not in self._sections:
            raise Unsupported("no .debug_info")
        self.order: Any = "little" if self.header.endian == "<" else "big"
        self._f = f
        self._streams: dict[str, Any] = {}
        self._units: dict[int, Unit] = {}
        self._starts: list[int] | None = None  # every unit's offset, once walked

    def _stream(self, name: str) -> Any:
        """Section ``name`` as a lazydwarf stream; None where there is none to read."""
        if name not in self._streams:
            sec = self._sections.get(name)
            self._streams[name] = None if sec is None else \
                self._section_stream(self._f, self.header, sec, self._max_inflated)
        return self._streams[name]

    def read(self, name: str, offset: int, size: int) -> bytes:
        """``size`` bytes of section ``name`` at ``offset``, all there or Unsupported."""
        stream = self._stream(name)
        if stream is None or offset < 0 or size < 0 or offset + size > stream.size:
            raise Unsupported(f"{name}: {size} bytes at {offset:#x} are not there")
        stream.seek(offset)
        data: bytes = stream.read(size)
        if len(data) != size:  # a compressed section that inflates to less than it says
            raise Unsupported(f"{name}: {size} bytes at {offset:#x} are not there")
        return data

    def size(self, name: str) -> int:
        stream = self._stream(name)
        return stream.size if stream is not None else 0  # type: ignore[no-any-return]

    def cstr(self, name: str, offset: int) -> bytes:
        """The NUL-terminated string at ``offset`` of section ``name``."""
        end = min(self.size(name), offset + MAX_STRING)
        chunk = 64
        while True:
            data = self.read(name, offset, min(chunk, end - offset))
            nul = data.find(b"\0")
            if nul >= 0:
                return data[:nul]
            if offset + len(data) >= end:
                raise Unsupported(f"{name}: no string end at {offset:#x}")
            chunk *= 8

    def unit(self, offset: int) -> Unit:
        unit = self._units.get(offset)
        if unit is None:
            unit = self._units[offset] = Unit(self, offset)
        return unit

    def unit_offsets(self) -> list[int]:
        """Where each unit of ``.debug_info`` begins."""
        if self._starts is None:
            starts: list[int] = []
            at, end = 0, self.size(".debug_info")
            while at < end:
                if len(starts) >= MAX_UNITS:
                    raise Unsupported("too many units")
                starts.append(at)
                head = self.read(".debug_info", at, min(12, end - at))
                length, width = initial_length(head, self.order)
                at += width + length
            self._starts = starts
        return self._starts

    def unit_holding(self, offset: int) -> Unit:
        """The unit whose entries hold a ``.debug_info`` offset (DW_FORM_ref_addr)."""
        starts = self.unit_offsets()
        i = bisect_right(starts, offset) - 1
        if i < 0:
            raise Unsupported(f"no unit holds {offset:#x}")
        return self.unit(starts[i])


class Unit:
    """One compilation unit: its header, abbreviations and entries' bytes."""

    def __init__(self, df: DwarfFile, offset: int) -> None:
        self.df, self.offset = df, offset
        order = df.order
        head = df.read(".debug_info", offset, min(48, df.size(".debug_info") - offset))
        length, pos = initial_length(head, order)
        self.offset_size = 8 if pos == 12 else 4
        self.end = offset + pos + length
        self.version = int_at(head, pos, 2, order)
        pos += 2
        if self.version >= 5:
            if pos + 2 > len(head):
                raise Unsupported("a truncated unit header")
            kind = head[pos]
            self.addr_size = head[pos + 1]
            abbrev_at = int_at(head, pos + 2, self.offset_size, order)
            pos += 2 + self.offset_size
            if kind in _DWO_ID:
                pos += 8
            elif kind in _TYPE_HEADER:
                pos += 8 + self.offset_size  # type signature, type offset
            elif kind not in (DW_UT_COMPILE, DW_UT_PARTIAL):
                raise Unsupported(f"unit type {kind}")
        elif self.version >= 2:
            abbrev_at = int_at(head, pos, self.offset_size, order)
            self.addr_size = head[pos + self.offset_size]
            pos += self.offset_size + 1
        else:
            raise Unsupported(f"DWARF version {self.version}")
        if self.addr_size not in (2, 4, 8):
            raise Unsupported(f"address size {self.addr_size}")
        self.die_offset = offset + pos
        if self.end <= self.die_offset:
            raise Unsupported("an empty unit")
        self.data = df.read(".debug_info", self.die_offset, self.end - self.die_offset)
        self.abbrevs = _abbrevs(df, abbrev_at)
        self.top = self.entry(self.die_offset)
        # the bases DWARF 5's indexed forms count from (where a unit does not say:
        # past a 32-bit section header, as pyelftools reads them)
        self.str_offsets_base = self._base("DW_AT_str_offsets_base", 8)
        self.addr_base = self._base("DW_AT_addr_base", 8, "DW_AT_GNU_addr_base")
        self.rnglists_base = self._base("DW_AT_rnglists_base", 12)
        low = self.top.attrs.get("DW_AT_low_pc")
        self.low_pc = low[1] if low is not None and isinstance(low[1], int) else 0

    def _base(self, name: str, default: int, other: str | None = None) -> int:
        got = self.top.attrs.get(name) or (self.top.attrs.get(other) if other else None)
        return got[1] if got is not None else default  # type: ignore[no-any-return]

    def abbrev(self, code: int) -> Abbrev:
        return self.abbrevs[code]  # KeyError: damage, the caller's to handle

    def entry(self, offset: int) -> Entry:
        """The entry at a ``.debug_info`` offset inside this unit."""
        return self.step(offset - self.die_offset)[0]

    def step(self, pos: int) -> tuple[Entry, int, bool]:
        """(entry, next position, has children) at a position of ``data``;
        the entry's tag is "" at a null entry (an end of children)."""
        data = self.data
        code, nxt = uleb(data, pos, len(data))
        if code == 0:
            return Entry(self.die_offset + pos, "", {}), nxt, False
        tag, children, specs = self.abbrevs.get(code) or _no_abbrev(code)
        attrs: dict[str, tuple[str, Any]] = {}
        for name, form, const in specs:
            if form == "DW_FORM_indirect":  # the form comes first, in the entry
                number, nxt = uleb(data, nxt, len(data))
                form = FORMS.get(number, f"DW_FORM_{number:#x}")
                if form in ("DW_FORM_indirect", "DW_FORM_implicit_const"):
                    raise Unsupported(f"{form} given indirectly")
            value, nxt = self.value(data, form, nxt, const)
            attrs[name] = (form, value)
        if nxt > len(data):
            raise Unsupported("a truncated entry")
        return Entry(self.die_offset + pos, tag, attrs), nxt, children

    def value(self, data: bytes, form: str, pos: int, const: int = 0,
              offset_size: int = 0) -> tuple[Any, int]:
        """(value, next position) of an attribute of ``form`` at ``pos`` of
        ``data``: this unit's entries, or its line program's tables, whose
        offsets are ``offset_size`` bytes (the program's own DWARF format)."""
        order = self.df.order
        width = FIXED_WIDTHS.get(form)
        if width is not None:
            if form == "DW_FORM_implicit_const":
                return const, pos
            if form == "DW_FORM_flag_present":
                return True, pos
            if form == "DW_FORM_data16":
                return None, pos + 16
            return int_at(data, pos, width, order), pos + width
        if form == "DW_FORM_addr":
            return int_at(data, pos, self.addr_size, order), pos + self.addr_size
        if form in OFFSET_FORMS or form == "DW_FORM_ref_addr":
            size = offset_size or self.offset_size if form != "DW_FORM_ref_addr" \
                or self.version >= 3 else self.addr_size
            return int_at(data, pos, size, order), pos + size
        if form == "DW_FORM_sdata":
            return sleb(data, pos, len(data))
        if form in ULEB_FORMS:
            return uleb(data, pos, len(data))
        if form == "DW_FORM_string":
            end = data.find(b"\0", pos)
            if end < 0:
                raise Unsupported("an unterminated string")
            text: bytes = data[pos:end]
            return text, end + 1
        if form in BLOCK_FORMS:
            n = BLOCK_FORMS[form]
            return None, pos + n + int_at(data, pos, n, order)
        if form in ULEB_BLOCK_FORMS:
            length, pos = uleb(data, pos, len(data))
            return None, pos + length
        raise Unsupported(f"form {form}")  # forms no table names: their size is unknown

    def entries_below(self, offset: int) -> Iterator[Entry]:
        """The entry at ``offset`` and every entry below it, in file order."""
        pos = offset - self.die_offset
        if not 0 <= pos < len(self.data):
            raise Unsupported(f"no entry at {offset:#x}")
        depth, count = 0, 0
        while True:
            entry, pos, children = self.step(pos)
            if not entry.tag:
                depth -= 1
                if depth <= 0:
                    return
                continue
            count += 1
            if count > MAX_ENTRIES:
                raise Unsupported(f"more than {MAX_ENTRIES} entries in one function")
            yield entry
            if children:
                depth += 1
            elif depth == 0:
                return
            if pos >= len(self.data):
                return  # (a unit may end without closing its lists)

    # -- attribute values -----------------------------------------------------------

    def text(self, attr: tuple[str, Any]) -> str:
        form, value = attr
        if form == "DW_FORM_string":
            raw = value
        elif form == "DW_FORM_strp":
            raw = self.df.cstr(".debug_str", value)
        elif form == "DW_FORM_line_strp":
            raw = self.df.cstr(".debug_line_str", value)
        elif form in _STRX:
            at = self.str_offsets_base + value * self.offset_size
            where = int_at(self.df.read(".debug_str_offsets", at, self.offset_size), 0,
                         self.offset_size, self.df.order)
            raw = self.df.cstr(".debug_str", where)
        else:
            raise Unsupported(f"a string of form {form}")
        return raw.decode("utf-8", "replace")  # type: ignore[no-any-return]

    def address(self, attr: tuple[str, Any]) -> int:
        form, value = attr
        if form in _ADDRX:
            return self.indexed_address(value)
        if form != "DW_FORM_addr":
            raise Unsupported(f"an address of form {form}")
        return value  # type: ignore[no-any-return]

    def indexed_address(self, index: int) -> int:
        at = self.addr_base + index * self.addr_size
        return int_at(self.df.read(".debug_addr", at, self.addr_size), 0, self.addr_size,
                    self.df.order)

    def reference(self, attr: tuple[str, Any]) -> tuple[Unit, Entry]:
        """The entry a reference attribute leads to, and its unit."""
        form, value = attr
        if form in REF_FORMS:
            return self, self.entry(self.offset + value)
        if form == "DW_FORM_ref_addr":
            unit = self if self.die_offset <= value < self.end else self.df.unit_holding(value)
            return unit, unit.entry(value)
        raise Unsupported(f"a reference of form {form}")

    def ranges(self, entry: Entry, base: int) -> list[tuple[int, int]]:
        """The address ranges of an entry (low/high pc, or its range list)."""
        attrs = entry.attrs
        low, high = attrs.get("DW_AT_low_pc"), attrs.get("DW_AT_high_pc")
        if low is not None and high is not None:
            start = self.address(low)
            if high[0] == "DW_FORM_addr" or high[0] in _ADDRX:
                return [(start, self.address(high))]
            if not isinstance(high[1], int):
                raise Unsupported(f"DW_AT_high_pc of form {high[0]}")
            return [(start, start + high[1])]
        got = attrs.get("DW_AT_ranges")
        if got is None:
            return []
        form, value = got
        if self.version < 5:
            return self._ranges_v4(value, base)
        if form == "DW_FORM_rnglistx":
            at = self.rnglists_base + value * self.offset_size
            value = self.rnglists_base + int_at(
                self.df.read(".debug_rnglists", at, self.offset_size), 0, self.offset_size,
                self.df.order)
        return self._rnglists(value, base)

    def _ranges_v4(self, offset: int, base: int) -> list[tuple[int, int]]:
        size, order = self.addr_size, self.df.order
        top = (1 << 8 * size) - 1
        out: list[tuple[int, int]] = []
        for _ in range(MAX_RANGES):
            pair = self.df.read(".debug_ranges", offset, 2 * size)
            begin, end = int_at(pair, 0, size, order), int_at(pair, size, size, order)
            offset += 2 * size
            if begin == 0 and end == 0:
                return out
            if begin == top:
                base = end
            else:
                out.append((base + begin, base + end))
        raise Unsupported("a range list without end")

    def _rnglists(self, offset: int, base: int) -> list[tuple[int, int]]:
        df, size = self.df, self.addr_size
        data = df.read(".debug_rnglists", offset, min(df.size(".debug_rnglists") - offset,
                                                       1 << 16))
        pos, out = 0, []  # type: tuple[int, list[tuple[int, int]]]

        def addr() -> int:
            nonlocal pos
            pos += size
            if pos > len(data):
                raise Unsupported("a truncated range list")
            return int_at(data, pos - size, size, df.order)

        def index() -> int:
            nonlocal pos
            value, pos = uleb(data, pos, len(data))
            return value

        for _ in range(MAX_RANGES):
            if pos >= len(data):
                raise Unsupported("a truncated range list")
            kind = data[pos]
            pos += 1
            if kind == 0:  # DW_RLE_end_of_list
                return out
            if kind == 1:  # base_addressx
                base = self.indexed_address(index())
            elif kind == 2:  # startx_endx
                start = self.indexed_address(index())
                out.append((start, self.indexed_address(index())))
            elif kind == 3:  # startx_length
                start = self.indexed_address(index())
                out.append((start, start + index()))
            elif kind == 4:  # offset_pair
                start = index()
                out.append((base + start, base + index()))
            elif kind == 5:  # base_address
                base = addr()
            elif kind == 6:  # start_end
                start = addr()
                out.append((start, addr()))
            elif kind == 7:  # start_length
                start = addr()
                out.append((start, start + index()))
            else:
                raise Unsupported(f"range list entry kind {kind}")
        raise Unsupported("a range list without end")


def _abbrevs(df: DwarfFile, offset: int) -> dict[int, Abbrev]:
    size = df.size(".debug_abbrev")
    data = df.read(".debug_abbrev", offset, min(size - offset, 1 << 20)) if offset < size \
        else b""
    out: dict[int, Abbrev] = {}
    pos, end = 0, len(data)
    while True:
        code, pos = uleb(data, pos, end)
        if code == 0:
            return out
        if len(out) >= MAX_ABBREVS:
            raise Unsupported("too many abbreviations")
        tag, pos = uleb(data, pos, end)
        if pos >= end:
            raise Unsupported("a truncated abbreviation")
        children = data[pos] != 0
        pos += 1
        specs = []
        while True:
            name, pos = uleb(data, pos, end)
            form, pos = uleb(data, pos, end)
            if name == 0 and form == 0:
                break
            const = 0
            if form == 0x21:  # implicit_const: the value is here
                const, pos = sleb(data, pos, end)
            specs.append((ATTRS.get(name, f"DW_AT_{name:#x}"),
                          FORMS.get(form, f"DW_FORM_{form:#x}"), const))
        out[code] = (TAGS.get(tag, f"DW_TAG_{tag:#x}"), children, specs)


def _no_abbrev(code: int) -> Abbrev:
    raise Unsupported(f"no abbreviation {code}")


def initial_length(data: bytes, order: Any) -> tuple[int, int]:
    """A unit's length and where its header goes on (4 or 12: 64-bit DWARF)."""
    length = int_at(data, 0, 4, order)
    if length == 0xFFFFFFFF:
        return int_at(data, 4, 8, order), 12
    if length >= 0xFFFFFFF0:
        raise Unsupported("a reserved unit length")
    return length, 4


def int_at(data: bytes, pos: int, size: int, order: Any) -> int:
    if pos + size > len(data):
        raise Unsupported("truncated")
    return int.from_bytes(data[pos:pos + size], order)
