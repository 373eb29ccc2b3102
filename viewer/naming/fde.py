"""Function ranges and stack roots of an object, from its `.eh_frame` FDEs.

A stripped program or library has no symbol for most of its functions,
but every compiled function keeps its unwind entry (an FDE: a start and a
length; a function's `.cold` part has its own), because exceptions and
debuggers need it. Grouping the addresses of unnamed code by FDE gives one
row per function, named as the original q-view named unnamed code:
``0xSTART<object>``.

The same entries say where a stack ends: the outermost frame of a thread
is code whose call-frame information marks the return address undefined
(glibc's ``_start`` and the child side of ``clone``/``clone3``), which is
where the collector's unwinder stops on purpose. ``read_root_ranges``
gives those pc ranges, plus the function holding the entry point.

A 64-bit little-endian object (x86_64, aarch64) is read with the
`.eh_frame` parser the collector unwinds with (qformat.ehframe, cfi):
libc's 3,000 entries in tens of milliseconds, where pyelftools took half
a second. Any other object is read with pyelftools, over lazydwarf's
streams (no other section is read, a compressed one no further than
``max_inflated`` bytes). An object is
untrusted input: any failure to parse gives no ranges (the caller falls
back to single addresses), and at most ``MAX_FDES`` entries are read.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Iterator, NamedTuple

from qtools.qformat import open_regular
from qtools.qformat.cfi import DW_CFA_UNDEFINED, UNDEFINED, cie_state, decode_fde
from qtools.qformat.ehframe import EH_FRAME, PARSE_ERRORS, CieCache, Fde, iter_fdes, parse_fde
from qtools.qformat.elfhdr import SHT_NOBITS, ElfHeader, read_file_header, read_sections
from qtools.qformat.limits import DEFAULT_LIMITS

from .symtab import RawSymbol, SymbolTable

MAX_EH_FRAME = 1 << 28  # bytes of .eh_frame read at most (libxul's is about 10 MB)
MAX_FDES = 1 << 20  # libxul, the largest object around, has about 200,000
NAME = "fde"  # every range has the same name: callers name it by its start
RA_UNDEFINED = "ra-undefined"  # a root range: the CFI says there is no caller
ENTRY = "entry"  # a root range: the function that holds the ELF entry point


def read_fde_ranges(path: str | os.PathLike[str],
                    max_inflated: int = DEFAULT_LIMITS.debug_size) -> SymbolTable:
    """The FDE ranges of the ELF file at ``path``, as a symbol table whose
    entries all carry the name ``NAME``; empty where there are none or they
    cannot be read."""
    try:
        with os.fdopen(open_regular(os.fspath(path)), "rb") as f:
            return _ranges(f, max_inflated)
    except Exception:  # hostile or damaged input: no ranges, single addresses
        return SymbolTable.empty()


class Entry(NamedTuple):
    """What both readers give of one FDE."""

    start: int
    size: int
    ra_undefined: list[tuple[int, int]] | None  # (begin, end) of rows without a caller


def _entries(f: BinaryIO, header: ElfHeader, roots: bool, max_inflated: int) -> Iterator[Entry]:
    """The FDEs of an object with a start and a size; with ``roots``, the
    rows of each that undefine the return address too."""
    if header.is64 and header.endian == "<":
        yield from _shared_entries(f, roots)
    else:
        yield from _pyelftools_entries(f, roots, max_inflated)


def _shared_entries(f: BinaryIO, roots: bool) -> Iterator[Entry]:
    size = os.fstat(f.fileno()).st_size
    sec = next((s for s in read_sections(f, size) if s.name == ".eh_frame"), None)
    if sec is None or sec.type == SHT_NOBITS or sec.offset >= size:
        return
    f.seek(sec.offset)
    data = f.read(min(sec.size, size - sec.offset, MAX_EH_FRAME))
    cies = CieCache(data, EH_FRAME)

    def parse(off: int) -> Fde:  # offsets are the section's: its bytes load at sec.addr
        return parse_fde(data, off, len(data), EH_FRAME, sec.addr, 0, cies)
    for fde in iter_fdes(data, 0, len(data), EH_FRAME, parse, MAX_FDES):
        if fde.pc_begin <= 0 or fde.pc_range <= 0:
            continue
        undefined = None
        # Decoding every FDE's table would take long on a large library: only
        # entries whose bytes may say DW_CFA_undefined of the return address
        # (the opcode, then the register's ULEB128: one byte below 128) are.
        ra = fde.cie.ra_column
        mark = bytes([DW_CFA_UNDEFINED, ra] if ra < 0x80 else [DW_CFA_UNDEFINED])
        if roots and (mark in fde.instructions or mark in fde.cie.initial_instructions):
            undefined = []
            try:
                rows = decode_fde(fde, cie_state(fde.cie))
            except PARSE_ERRORS:
                rows = None
            if rows is not None:
                ends = (*rows.locs[1:], rows.pc_end)
                for begin, end, row in zip(rows.locs, ends, rows.rows):
                    rule = row.rule(fde.cie.ra_column)
                    if rule is not None and rule[0] == UNDEFINED and begin < end:
                        undefined.append((begin, end))
        yield Entry(fde.pc_begin, fde.pc_range, undefined)


def _pyelftools_entries(f: BinaryIO, roots: bool,
                        max_inflated: int = DEFAULT_LIMITS.debug_size) -> Iterator[Entry]:
    from elftools.dwarf.callframe import FDE

    from .lazydwarf import NoDwarf, dwarf_info
    try:
        dwarf = dwarf_info(f, max_inflated)
    except NoDwarf:
        return
    if not dwarf.has_EH_CFI():
        return
    for n, e in enumerate(dwarf.EH_CFI_entries()):
        if n >= MAX_FDES:
            return
        if not isinstance(e, FDE):
            continue
        start, size = e.header["initial_location"], e.header["address_range"]
        if start <= 0 or size <= 0:
            continue
        yield Entry(start, size, _pyelftools_undefined(e, start + size) if roots else None)


def _pyelftools_undefined(fde: Any, end: int) -> list[tuple[int, int]] | None:
    cie = fde.cie
    if cie is None:
        return None
    ra = cie.header["return_address_register"]
    if not any(i.opcode == DW_CFA_UNDEFINED and i.args and i.args[0] == ra
               for i in (*cie.instructions, *fde.instructions)):
        return None
    rows = fde.get_decoded().table
    out = []
    for i, row in enumerate(rows):
        rule = row.get(ra)
        if rule is not None and rule.type == "UNDEFINED":
            row_end = rows[i + 1]["pc"] if i + 1 < len(rows) else end
            if row["pc"] < row_end:
                out.append((row["pc"], row_end))
    return out


def _ranges(f: BinaryIO, max_inflated: int) -> SymbolTable:
    return SymbolTable.build(RawSymbol(e.start, e.size, 0, NAME)
                             for e in _entries(f, read_file_header(f), False, max_inflated))


def read_root_ranges(path: str | os.PathLike[str],
                     max_inflated: int = DEFAULT_LIMITS.debug_size) -> SymbolTable:
    """The pc ranges of ``path`` (link-time addresses) where a stack ends:
    rows of the CFI whose return-address rule is *undefined* (named
    ``RA_UNDEFINED``), and the FDE that holds the entry point (``ENTRY``).
    Empty where there is no CFI or it cannot be read."""
    try:
        with os.fdopen(open_regular(os.fspath(path)), "rb") as f:
            return _roots(f, max_inflated)
    except Exception:  # hostile or damaged input: no roots known
        return SymbolTable.empty()


def _roots(f: BinaryIO, max_inflated: int) -> SymbolTable:
    header = read_file_header(f)
    entry_point = header.entry
    raw: list[RawSymbol] = []
    for e in _entries(f, header, True, max_inflated):
        if e.start <= entry_point < e.start + e.size:
            raw.append(RawSymbol(e.start, e.size, 1, ENTRY))
        for begin, end in e.ra_undefined or ():
            raw.append(RawSymbol(begin, end - begin, 0, RA_UNDEFINED))
    return SymbolTable.build(raw)
