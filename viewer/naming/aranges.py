"""Which compilation unit holds an address: an object's ``.debug_aranges``.

Read from the bytes where the section is plain (32-bit DWARF, no
segments; inflated where ``SHF_COMPRESSED``), else through pyelftools.
The ranges make a ``LineIndex`` with no rows yet: ``ObjectLines`` reads
a unit when an address first falls in it.
"""

from __future__ import annotations

import os
import struct
from typing import Any, BinaryIO, Callable

from qtools.qformat import open_regular
from qtools.qformat.elfhdr import read_sections

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


def _with_dwarf(path: str, work: Callable[[Any], Any]) -> Any:
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            return guarded(work, dwarf_of(f))
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
