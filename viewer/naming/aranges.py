"""Which compilation unit holds an address: an object's ``.debug_aranges``.

Read from the bytes where the section is plain (32-bit DWARF, no
segments; inflated where compressed), else through pyelftools.
The ranges make a ``LineIndex`` with no rows yet: ``ObjectLines`` reads
a unit when an address first falls in it.
"""

from __future__ import annotations

import os
import struct
from typing import Any, BinaryIO, Callable

from qtools.qformat import open_regular
from qtools.qformat.elfhdr import read_sections
from qtools.qformat.limits import DEFAULT_LIMITS, exceeded

from .dwarflines import MAX_UNITS, LineIndex, LineProblem, dwarf_of, guarded
from .symtab import SymbolTable

MAX_ARANGES = 1 << 28  # bytes of .debug_aranges read at most (libxul's is some MB)


def has_lines(path: str) -> bool:
    """Whether the ELF file at ``path`` has a DWARF line table."""
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            found = read_sections(f, os.fstat(f.fileno()).st_size)
    except Exception:  # not ELF, unreadable: no lines from it
        return False
    return any(s.name in (".debug_line", ".zdebug_line") for s in found)


def read_index(path: str, max_inflated: int = DEFAULT_LIMITS.debug_size) -> LineIndex:
    """The unit ranges of the file at ``path``; no rows yet. LineProblem
    where a DWARF section says it inflates to more than ``max_inflated``
    bytes (the object's lines are not read, rather than read in part)."""
    from .lazydwarf import oversized
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            too_large = oversized(f, max_inflated)
            ranges = None if too_large else _plain_aranges(f, max_inflated)
    except Exception:  # read as below, which says what is wrong
        too_large = ranges = None
    if too_large:
        raise LineProblem(f"{exceeded(too_large, None, 'debug-size', max_inflated).message}; "
                          "raise it with --limits debug-size=N")
    if ranges is not None:
        return LineIndex(SymbolTable.empty(), ranges, set(), not ranges, SymbolTable.empty(), [])
    return _with_dwarf(path, lambda dw: _ranges(dw), max_inflated)


_ARANGES_HEADER = struct.Struct("IHIBB")  # 32-bit DWARF: length, version, unit, sizes


def _plain_aranges(f: BinaryIO, max_inflated: int) -> list[tuple[int, int, int]] | None:
    """What ``_ranges`` reads through pyelftools, from the ``.debug_aranges``
    section alone, where it is plain (32-bit DWARF, no segments): pyelftools
    would parse each entry with construct. None: read it through pyelftools."""
    from .lazydwarf import plain_sections, section_stream
    header, sections = plain_sections(f)
    section = sections.get(".debug_aranges")
    if ".debug_info" not in sections or section is None:
        return None
    stream = section_stream(f, header, section, max_inflated)
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


def _with_dwarf(path: str, work: Callable[[Any], Any], max_inflated: int) -> Any:
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            return guarded(work, dwarf_of(f, max_inflated))
    except OSError as e:
        raise LineProblem(f"cannot read: {e.strerror or e}") from None


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
