"""Which compilation unit holds an address: an object's ``.debug_aranges``.

Read from the section's bytes (inflated where compressed): 32- and 64-bit
DWARF, either byte order, with or without segment selectors (the segment
is not kept). The ranges make a ``LineIndex`` with no rows yet:
``ObjectLines`` reads a unit when an address first falls in it.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

from qtools.qformat import open_regular
from qtools.qformat.objects.elfhdr import read_sections
from qtools.qformat.limits import DEFAULT_LIMITS, exceeded

from .dwarflines import MAX_UNITS, LineIndex, LineProblem
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
    """The unit ranges of the file at ``path`` (none without
    ``.debug_aranges``); no rows yet. LineProblem
    where a DWARF section says it inflates to more than ``max_inflated``
    bytes (the object's lines are not read, rather than read in part)."""
    from .lazydwarf import oversized
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            too_large = oversized(f, max_inflated)
            ranges = [] if too_large else _aranges(f, max_inflated)
    except OSError as e:
        raise LineProblem(f"cannot read: {e.strerror or e}") from None
    except Exception as e:  # Unsupported, or damage of any kind: not ELF, truncated...
        raise LineProblem(f"unreadable DWARF ({type(e).__name__}: {e})"[:200]) from None
    if too_large:
        raise LineProblem(f"{exceeded(too_large, None, 'debug-size', max_inflated).message}; "
                          "raise it with --limits debug-size=N")
    # (without ranges no unit is known by address: ObjectLines reads them all, once)
    return LineIndex(SymbolTable.empty(), ranges, set(), False, SymbolTable.empty(), [])


def _aranges(f: BinaryIO, max_inflated: int) -> list[tuple[int, int, int]]:
    """(start, end, unit offset) of each range of ``.debug_aranges`` that
    has a length, sorted; none where there is no such section."""
    from .dwarfread import Unsupported
    from .lazydwarf import plain_sections, section_stream
    header, sections = plain_sections(f)
    section = sections.get(".debug_aranges")
    if ".debug_info" not in sections or section is None:
        return []
    stream = section_stream(f, header, section, max_inflated)
    if stream is None or stream.size > MAX_ARANGES:
        return []
    data = stream.read()
    narrow, wide = (struct.Struct(header.endian + f) for f in _HEADERS)
    tuples: dict[int, struct.Struct] = {}
    ranges: list[tuple[int, int, int]] = []
    offset = 0
    while offset < len(data):
        length, _version, unit, address_size, segment_size = narrow.unpack_from(data, offset)
        pos, end = offset + narrow.size, offset + 4 + length
        if length == 0xFFFFFFFF:  # 64-bit DWARF
            _, length, _version, unit, address_size, segment_size = wide.unpack_from(data, offset)
            pos, end = offset + wide.size, offset + 12 + length
        elif length >= 0xFFFFFFF0:
            raise Unsupported("a reserved unit length")
        tuple_ = tuples.get(segment_size << 8 | address_size) or tuples.setdefault(
            segment_size << 8 | address_size, _tuple(header.endian, segment_size, address_size))
        pos = -(-pos // tuple_.size) * tuple_.size  # aligned (in the section, as readelf)
        stop = (end if end < len(data) else len(data)) - tuple_.size
        if len(ranges) + (stop - pos) // tuple_.size > MAX_UNITS * 16:
            raise LineProblem("too many address ranges")
        while pos <= stop:
            begin, span = tuple_.unpack_from(data, pos)
            pos += tuple_.size
            if begin == 0 and span == 0:
                break
            if span > 0:
                ranges.append((begin, begin + span, unit))
        offset = end
    ranges.sort()
    return ranges


_SIZES = {2: "H", 4: "I", 8: "Q"}
# a set's header: 32-bit DWARF, 64-bit (length, version, unit, sizes of address and segment)
_HEADERS = ("IHIBB", "IQHQBB")


def _tuple(endian: str, segment_size: int, address_size: int) -> struct.Struct:
    """How the address and length of one (segment, address, length) tuple
    of ``.debug_aranges`` are laid out (the segment is skipped)."""
    from .dwarfread import Unsupported
    if address_size not in _SIZES:
        raise Unsupported(f".debug_aranges: addresses of {address_size} bytes")
    return struct.Struct(f"{endian}{segment_size}x{2 * _SIZES[address_size]}")
