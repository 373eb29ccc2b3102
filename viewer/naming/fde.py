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

Every object (32- or 64-bit, either byte order) is read with the
`.eh_frame` parser the collector unwinds with (qformat.ehframe, cfi):
libc's 3,000 entries in tens of milliseconds, where pyelftools took half
a second. An object is untrusted input: any failure to parse gives no
ranges (the caller falls back to single addresses), and at most
``MAX_FDES`` entries, of at most ``MAX_EH_FRAME`` bytes, are read.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Iterator, NamedTuple

from qtools.qformat import open_regular
from qtools.qformat.objects.cfi import DW_CFA_UNDEFINED, UNDEFINED, cie_state, decode_fde
from qtools.qformat.objects.ehframe import (EH_FRAME, PARSE_ERRORS, CieCache, Fde, iter_fdes,
                                            layout, parse_fde)
from qtools.qformat.objects.elfhdr import SHT_NOBITS, ElfHeader, read_file_header, read_sections

from .symtab import RawSymbol, SymbolTable

MAX_EH_FRAME = 1 << 28  # bytes of .eh_frame read at most (libxul's is about 10 MB)
MAX_FDES = 1 << 20  # libxul, the largest object around, has about 200,000
NAME = "fde"  # every range has the same name: callers name it by its start
RA_UNDEFINED = "ra-undefined"  # a root range: the CFI says there is no caller
ENTRY = "entry"  # a root range: the function that holds the ELF entry point


def read_fde_ranges(path: str | os.PathLike[str]) -> SymbolTable:
    """The FDE ranges of the ELF file at ``path``, as a symbol table whose
    entries all carry the name ``NAME``; empty where there are none or they
    cannot be read."""
    try:
        with os.fdopen(open_regular(os.fspath(path)), "rb") as f:
            return _ranges(f)
    except Exception:  # hostile or damaged input: no ranges, single addresses
        return SymbolTable.empty()


class Entry(NamedTuple):
    """One FDE."""

    start: int
    size: int
    ra_undefined: list[tuple[int, int]] | None  # (begin, end) of rows without a caller


def _entries(f: BinaryIO, header: ElfHeader, roots: bool) -> Iterator[Entry]:
    """The FDEs of an object with a start and a size; with ``roots``, the
    rows of each that undefine the return address too."""
    size = os.fstat(f.fileno()).st_size
    sec = next((s for s in read_sections(f, size) if s.name == ".eh_frame"), None)
    if sec is None or sec.type == SHT_NOBITS or sec.offset >= size:
        return
    f.seek(sec.offset)
    data = f.read(min(sec.size, size - sec.offset, MAX_EH_FRAME))
    lay = layout(header.endian, 8 if header.is64 else 4)
    cies = CieCache(data, EH_FRAME, lay)

    def parse(off: int) -> Fde:  # offsets are the section's: its bytes load at sec.addr
        return parse_fde(data, off, len(data), EH_FRAME, sec.addr, 0, cies, lay)
    for fde in iter_fdes(data, 0, len(data), EH_FRAME, parse, MAX_FDES, lay):
        if fde.pc_begin <= 0 or fde.pc_range <= 0:
            continue
        yield Entry(fde.pc_begin, fde.pc_range, _undefined(fde) if roots else None)


def _undefined(fde: Fde) -> list[tuple[int, int]] | None:
    """The rows of ``fde`` whose return address is undefined (where a stack
    ends); None where its instructions cannot say so."""
    # Decoding every FDE's table would take long on a large library: only
    # entries whose bytes may say DW_CFA_undefined of the return address
    # (the opcode, then the register's ULEB128: one byte below 128) are.
    ra = fde.cie.ra_column
    mark = bytes([DW_CFA_UNDEFINED, ra] if ra < 0x80 else [DW_CFA_UNDEFINED])
    if mark not in fde.instructions and mark not in fde.cie.initial_instructions:
        return None
    try:
        rows = decode_fde(fde, cie_state(fde.cie))
    except PARSE_ERRORS:
        return []
    ends = (*rows.locs[1:], rows.pc_end)
    return [(begin, end) for begin, end, row in zip(rows.locs, ends, rows.rows)
            if (rule := row.rule(ra)) is not None and rule[0] == UNDEFINED and begin < end]


def _ranges(f: BinaryIO) -> SymbolTable:
    return SymbolTable.build(RawSymbol(e.start, e.size, 0, NAME)
                             for e in _entries(f, read_file_header(f), False))


def read_root_ranges(path: str | os.PathLike[str]) -> SymbolTable:
    """The pc ranges of ``path`` (link-time addresses) where a stack ends:
    rows of the CFI whose return-address rule is *undefined* (named
    ``RA_UNDEFINED``), and the FDE that holds the entry point (``ENTRY``).
    Empty where there is no CFI or it cannot be read."""
    try:
        with os.fdopen(open_regular(os.fspath(path)), "rb") as f:
            return _roots(f)
    except Exception:  # hostile or damaged input: no roots known
        return SymbolTable.empty()


def _roots(f: BinaryIO) -> SymbolTable:
    header = read_file_header(f)
    entry_point = header.entry
    raw: list[RawSymbol] = []
    for e in _entries(f, header, True):
        if e.start <= entry_point < e.start + e.size:
            raw.append(RawSymbol(e.start, e.size, 1, ENTRY))
        for begin, end in e.ra_undefined or ():
            raw.append(RawSymbol(begin, end - begin, 0, RA_UNDEFINED))
    return SymbolTable.build(raw)
