"""The few ELF facts unwinding needs, read straight from the file bytes.

Only 64-bit little-endian objects (x86_64, aarch64). Program headers
(qformat.elfhdr, shared with q-view) give the PT_LOAD segments (file offset
<-> vaddr) and PT_GNU_EH_FRAME, so a stripped object without section headers
still unwinds; section headers are read to find where `.eh_frame` and
`.debug_frame` lie. Malformed input raises ElfError (or ElfHeaderError,
a ValueError).
"""

from __future__ import annotations

from qtools.qformat.objects.elfhdr import (SHT_NOBITS, ElfHeader, ElfHeaderError, read_file_header,
                                           read_header, read_sections)

from .unwinderrors import ElfError
from .filebytes import Cursor, Source

FRAME_SECTIONS = (".eh_frame", ".debug_frame")


def _checked(header: ElfHeader) -> ElfHeader:
    if not header.is64 or header.endian != "<":
        raise ElfError("only 64-bit little-endian ELF is supported")
    return header


def parse_elf(data: bytes | memoryview | object) -> ElfHeader:
    """Parse the ELF header and program headers of a 64-bit little-endian object."""
    try:
        return _checked(read_header(data))
    except ElfHeaderError as e:
        raise ElfError(str(e)) from None


def parse_elf_file(src: Source) -> ElfHeader:
    """``parse_elf`` of an object read from ``src`` (its first bytes only)."""
    try:
        return _checked(read_file_header(Cursor(src)))
    except ElfHeaderError as e:
        raise ElfError(str(e)) from None


def frame_sections(src: Source) -> dict[str, tuple[int, int]]:
    """(file offset, size) of `.eh_frame` and `.debug_frame` where the
    section headers name them with bytes in the file (empty without section
    headers)."""
    return {s.name: (s.offset, s.size)
            for s in read_sections(Cursor(src), src.size)
            if s.name in FRAME_SECTIONS and s.type != SHT_NOBITS
            and s.offset + s.size <= src.size}
