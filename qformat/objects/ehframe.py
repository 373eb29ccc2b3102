"""`.eh_frame_hdr`, `.eh_frame` and `.debug_frame` entries: bytes in, named tuples out.

Everything here works on the whole object file (bytes or an mmap) addressed
by file offset. `delta` is "vaddr - file offset" of the bytes being read, so
pc-relative pointers resolve to link-time vaddrs without section headers.
Malformed input raises CfiError; callers turn that into "no rule". The
collector's unwinder and q-view's stack roots read the same entries here.
Entries are 64-bit little-endian (x86_64, aarch64: the collector's) unless
a ``Layout`` says otherwise: q-view reads 32-bit and big-endian objects'
entries with the same code.
Layouts: perf-event-abi.md section 7, LSB "Exception Frames", DWARF 5 6.4.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, NamedTuple



class CfiError(ValueError):
    """A CIE, FDE, CFA program or DWARF expression is malformed or unsupported."""


Buffer = Any  # bytes, memoryview or mmap: anything supporting len(), [i], [a:b] and struct

MASK64 = (1 << 64) - 1

# DW_EH_PE pointer encodings: low nibble = format, bits 4-6 = application, 0x80 = indirect
PE_ABSPTR, PE_ULEB128, PE_UDATA2, PE_UDATA4, PE_UDATA8 = 0x00, 0x01, 0x02, 0x03, 0x04
PE_SLEB128, PE_SDATA2, PE_SDATA4, PE_SDATA8 = 0x09, 0x0A, 0x0B, 0x0C
PE_PCREL, PE_DATAREL = 0x10, 0x30
PE_INDIRECT, PE_OMIT = 0x80, 0xFF



class Layout(NamedTuple):
    """How an object's call-frame entries are laid out: its byte order and
    address size (the size of a DW_EH_PE_absptr pointer)."""

    order: str  # "<" or ">"
    ptr_size: int  # 4 or 8
    u32: struct.Struct
    u64: struct.Struct
    fixed: dict[int, struct.Struct]  # DW_EH_PE format -> its struct
    mask: int  # of an address


@cache
def layout(order: str = "<", ptr_size: int = 8) -> Layout:
    """The ``Layout`` of a byte order ("<", ">") and address size (4, 8)."""
    fixed = {PE_ABSPTR: struct.Struct(order + ("Q" if ptr_size == 8 else "I")),
             PE_UDATA8: struct.Struct(order + "Q"), PE_SDATA8: struct.Struct(order + "q"),
             PE_UDATA4: struct.Struct(order + "I"), PE_SDATA4: struct.Struct(order + "i"),
             PE_UDATA2: struct.Struct(order + "H"), PE_SDATA2: struct.Struct(order + "h")}
    return Layout(order, ptr_size, struct.Struct(order + "I"), struct.Struct(order + "Q"), fixed,
                  (1 << 8 * ptr_size) - 1)


LE64 = layout("<", 8)  # x86_64, aarch64: the collector's

#: Which flavour of call-frame section an entry comes from.
EH_FRAME, DEBUG_FRAME = 0, 1


def uleb(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Unsigned LEB128 at pos; (value, next pos). At most 10 bytes (a u64)."""
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise CfiError("bad ULEB128")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return result, pos


def sleb(data: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Signed LEB128 at pos; (value, next pos): the unsigned bits, their
    last byte's bit 6 the sign."""
    value, nxt = uleb(data, pos, end)
    if data[nxt - 1] & 0x40:
        value -= 1 << 7 * (nxt - pos)
    return value, nxt


def read_encoded(data: Buffer, pos: int, end: int, enc: int, delta: int,
                 datarel: int | None = None, lay: Layout = LE64) -> tuple[int, int]:
    """Decode one DW_EH_PE-encoded pointer at pos; (value, next pos).

    pcrel is relative to the field's own vaddr (pos + delta); datarel is only
    defined for `.eh_frame_hdr` (its own vaddr). Indirect pointers would need
    the loaded image, so they are refused.
    """
    if enc == PE_OMIT or enc & PE_INDIRECT:
        raise CfiError(f"unsupported pointer encoding {enc:#x}")
    fmt, app = enc & 0x0F, enc & 0x70
    start = pos
    if fmt == PE_ULEB128:
        value, pos = uleb(data, pos, end)
    elif fmt == PE_SLEB128:
        value, pos = sleb(data, pos, end)
    else:
        st = lay.fixed.get(fmt)
        if st is None or pos + st.size > end:
            raise CfiError(f"bad pointer encoding {enc:#x} or truncated pointer")
        (value,) = st.unpack_from(data, pos)
        pos += st.size
    if app == PE_PCREL:
        value += start + delta
    elif app == PE_DATAREL:
        if datarel is None:
            raise CfiError("datarel pointer outside .eh_frame_hdr")
        value += datarel
    elif app:
        raise CfiError(f"unsupported pointer application {app:#x}")
    return value & lay.mask, pos


class Cie(NamedTuple):
    """A Common Information Entry."""

    offset: int
    version: int
    augmentation: str
    code_align: int
    data_align: int
    ra_column: int
    #: DW_EH_PE encoding of the FDEs' pc_begin / pc_range
    fde_encoding: int
    #: "z" augmentation: FDEs carry an augmentation-data length to skip
    has_aug_data: bool
    #: "S" augmentation: frames of this CIE are signal trampolines
    signal: bool
    initial_instructions: bytes
    layout: Layout = LE64


class Fde(NamedTuple):
    """A Frame Description Entry, its CIE resolved."""

    offset: int
    cie: Cie
    pc_begin: int
    pc_range: int
    instructions: bytes
    #: vaddr of instructions[0], for pc-relative DW_CFA_set_loc
    insn_vaddr: int


class EntryHeader(NamedTuple):
    """Length and id/pointer field of a CIE or FDE."""

    offset: int
    end: int          # offset just past the entry
    id_pos: int       # offset of the CIE id / CIE pointer field
    id_value: int
    body: int         # offset just past the id field


def entry_header(data: Buffer, off: int, limit: int, kind: int,
                 lay: Layout = LE64) -> EntryHeader | None:
    """Header of the entry at off; None for a zero terminator."""
    if off + 4 > limit:
        raise CfiError("truncated entry length")
    (length,) = lay.u32.unpack_from(data, off)
    if length == 0:
        return None
    pos = off + 4
    wide = length == 0xFFFFFFFF
    if wide:
        if pos + 8 > limit:
            raise CfiError("truncated 64-bit entry length")
        (length,) = lay.u64.unpack_from(data, pos)
        pos += 8
    end = pos + length
    if end > limit or length < 4:
        raise CfiError(f"entry at {off:#x} overruns its section")
    # .eh_frame keeps a 4-byte id even in the 64-bit format; .debug_frame widens it
    if wide and kind == DEBUG_FRAME:
        if pos + 8 > end:
            raise CfiError("truncated CIE id")
        (ident,) = lay.u64.unpack_from(data, pos)
        return EntryHeader(off, end, pos, ident, pos + 8)
    (ident,) = lay.u32.unpack_from(data, pos)
    return EntryHeader(off, end, pos, ident, pos + 4)


def is_cie(h: EntryHeader, kind: int) -> bool:
    """Whether the entry is a CIE (id 0 in .eh_frame, all ones in .debug_frame)."""
    if kind == EH_FRAME:
        return h.id_value == 0
    return h.id_value in (0xFFFFFFFF, MASK64)


def parse_cie(data: Buffer, off: int, limit: int, kind: int, lay: Layout = LE64) -> Cie:
    """The CIE at file offset off."""
    h = entry_header(data, off, limit, kind, lay)
    if h is None or not is_cie(h, kind):
        raise CfiError(f"no CIE at {off:#x}")
    pos, end = h.body, h.end
    if pos >= end:
        raise CfiError("truncated CIE")
    version = data[pos]
    pos += 1
    if version not in (1, 3, 4):
        raise CfiError(f"CIE version {version}")
    nul = bytes(data[pos:min(end, pos + 32)]).find(b"\0")
    if nul < 0:
        raise CfiError("unterminated CIE augmentation")
    aug = bytes(data[pos:pos + nul]).decode("latin-1")
    pos += nul + 1
    if version == 4:
        if pos + 2 > end or data[pos] != lay.ptr_size:
            raise CfiError(f"a CIE of {data[pos] if pos < end else '?'}-byte addresses")
        pos += 2  # address_size, segment_selector_size
    code_align, pos = uleb(data, pos, end)
    data_align, pos = sleb(data, pos, end)
    if version == 1:
        if pos >= end:
            raise CfiError("truncated CIE")
        ra_column = data[pos]
        pos += 1
    else:
        ra_column, pos = uleb(data, pos, end)
    fde_enc = PE_ABSPTR
    signal = False
    has_z = aug.startswith("z")
    if has_z:
        aug_len, pos = uleb(data, pos, end)
        aug_end = pos + aug_len
        if aug_end > end:
            raise CfiError("CIE augmentation data overruns the CIE")
        for ch in aug[1:]:
            if ch == "R":
                fde_enc = data[pos]
                pos += 1
            elif ch == "L":
                pos += 1
            elif ch == "P":
                # the personality pointer is not needed: decode only its format to skip it
                _, pos = read_encoded(data, pos + 1, aug_end, data[pos] & 0x0F, 0, None, lay)
            elif ch == "S":
                signal = True
            elif ch in "BG":  # aarch64 BTI / MTE markers carry no data
                continue
            else:
                break  # unknown letter: its data is skipped through the 'z' length
        pos = aug_end
    elif aug == "eh":
        pos += 8  # old GCC: an eh_ptr field we do not need
    elif aug:
        raise CfiError(f"unknown CIE augmentation {aug!r}")
    if "S" in aug:
        signal = True
    if code_align == 0:
        raise CfiError("CIE code alignment 0")
    return Cie(off, version, aug, code_align, data_align, ra_column, fde_enc, has_z, signal,
               bytes(data[pos:end]), lay)


def parse_fde(data: Buffer, off: int, limit: int, kind: int, delta: int, section_start: int,
              cie_at: Callable[[int], Cie], lay: Layout = LE64) -> Fde:
    """The FDE at file offset off; cie_at resolves (and caches) its CIE by offset.

    delta = vaddr - file offset around the FDE (for pc-relative pointers);
    section_start is needed for .debug_frame, whose CIE pointers are section offsets.
    """
    h = entry_header(data, off, limit, kind, lay)
    if h is None or is_cie(h, kind):
        raise CfiError(f"no FDE at {off:#x}")
    if kind == EH_FRAME:
        cie_off = h.id_pos - h.id_value  # distance back from the pointer field itself
    else:
        cie_off = section_start + h.id_value
    if not 0 <= cie_off < limit:
        raise CfiError(f"FDE at {off:#x} points outside the file")
    cie = cie_at(cie_off)
    pos, end = h.body, h.end
    pc_begin, pos = read_encoded(data, pos, end, cie.fde_encoding, delta, None, lay)
    pc_range, pos = read_encoded(data, pos, end, cie.fde_encoding & 0x0F, delta, None, lay)
    if cie.has_aug_data:
        aug_len, pos = uleb(data, pos, end)
        pos += aug_len
        if pos > end:
            raise CfiError("FDE augmentation data overruns the FDE")
    return Fde(off, cie, pc_begin, pc_range, bytes(data[pos:end]), pos + delta)


def iter_entries(data: Buffer, start: int, end: int, kind: int,
                 lay: Layout = LE64) -> Iterator[EntryHeader]:
    """Walk the entries of a call-frame section, stopping at a terminator or a bad length."""
    off = start
    while off + 4 <= end:
        try:
            h = entry_header(data, off, end, kind, lay)
        except CfiError:
            return
        if h is None:
            if kind == EH_FRAME:
                return
            off += 4  # .debug_frame may carry padding words
            continue
        yield h
        off = h.end


#: What malformed bytes can raise while an entry is parsed (CfiError is a ValueError).
PARSE_ERRORS = (ValueError, IndexError, OverflowError, struct.error)


class CieCache:
    """The CIEs of one call-frame section by offset, each parsed once: an
    object's thousands of FDEs share a handful of them. Called with an
    offset, as ``parse_fde`` calls its ``cie_at``."""

    __slots__ = ("data", "kind", "parsed", "layout")

    def __init__(self, data: Buffer, kind: int, lay: Layout = LE64) -> None:
        self.data, self.kind, self.layout = data, kind, lay
        self.parsed: dict[int, Cie] = {}

    def __call__(self, off: int) -> Cie:
        cie = self.parsed.get(off)
        if cie is None:
            cie = self.parsed[off] = parse_cie(self.data, off, len(self.data), self.kind,
                                               self.layout)
        return cie


def iter_fdes(data: Buffer, start: int, end: int, kind: int, parse: Callable[[int], Fde],
              max_entries: int | None = None, lay: Layout = LE64) -> Iterator[Fde]:
    """The FDEs of one call-frame section in file order, each read by
    ``parse`` from its offset (the caller knows where the bytes load). A CIE,
    or an FDE that does not parse, is passed over; at most ``max_entries``
    entries, CIEs included, are walked."""
    for n, h in enumerate(iter_entries(data, start, end, kind, lay)):
        if max_entries is not None and n >= max_entries:
            return
        if is_cie(h, kind):
            continue
        try:
            fde = parse(h.offset)
        except PARSE_ERRORS:
            continue
        yield fde


class HdrTable(NamedTuple):
    """The decoded `.eh_frame_hdr`.

    `locs` and `fdes` are the sorted search table, both relative to `base`
    (datarel|sdata4 entries are kept as the signed ints of the file so the
    table is unpacked once with a single struct call); empty when the table
    is omitted. `eh_frame` is the vaddr of `.eh_frame`, or None.
    """

    eh_frame: int | None
    base: int
    locs: tuple[int, ...]
    fdes: tuple[int, ...]


def parse_hdr(data: Buffer, off: int, size: int, vaddr: int) -> HdrTable:
    """Decode the `.eh_frame_hdr` at file offset off (size bytes, link-time vaddr)."""
    end = min(off + size, len(data))
    if off + 4 > end:
        raise CfiError("truncated .eh_frame_hdr")
    version, ptr_enc, cnt_enc, tab_enc = data[off], data[off + 1], data[off + 2], data[off + 3]
    if version != 1:
        raise CfiError(f".eh_frame_hdr version {version}")
    delta = vaddr - off
    pos = off + 4
    eh_frame: int | None = None
    if ptr_enc != PE_OMIT:
        eh_frame, pos = read_encoded(data, pos, end, ptr_enc, delta, datarel=vaddr)
    if cnt_enc == PE_OMIT or tab_enc == PE_OMIT:
        return HdrTable(eh_frame, 0, (), ())
    count, pos = read_encoded(data, pos, end, cnt_enc, delta, datarel=vaddr)
    if tab_enc == PE_DATAREL | PE_SDATA4:
        count = min(count, (end - pos) // 8)  # a corrupt count cannot read past the table
        flat = struct.unpack_from(f"<{2 * count}i", data, pos)
        return HdrTable(eh_frame, vaddr, flat[0::2], flat[1::2])
    locs: list[int] = []
    fdes: list[int] = []
    try:
        while len(locs) < count:
            loc, pos = read_encoded(data, pos, end, tab_enc, delta, datarel=vaddr)
            fde, pos = read_encoded(data, pos, end, tab_enc, delta, datarel=vaddr)
            locs.append(loc)
            fdes.append(fde)
    except CfiError:
        pass  # a truncated table keeps the entries read so far
    return HdrTable(eh_frame, 0, tuple(locs), tuple(fdes))
