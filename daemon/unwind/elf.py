"""The few ELF facts unwinding needs, read straight from the file bytes.

Only 64-bit little-endian objects (x86_64, aarch64). Program headers
(qformat.elfhdr, shared with q-view) give the PT_LOAD segments (file offset
<-> vaddr) and PT_GNU_EH_FRAME, so a stripped object without section headers
still unwinds; section headers are read only to find `.eh_frame` /
`.debug_frame` when there is no `.eh_frame_hdr` table. Pure functions over
bytes (or an mmap); malformed input raises ElfError.
"""

from __future__ import annotations

from qtools.qformat.elfhdr import SHT_NOBITS, ElfHeader, ElfHeaderError, SectionHeader, \
    read_header, sections_of

from .errors import ElfError


def parse_elf(data: bytes | memoryview | object) -> ElfHeader:
    """Parse the ELF header and program headers of a 64-bit little-endian object."""
    try:
        header = read_header(data)
    except ElfHeaderError as e:
        raise ElfError(str(e)) from None
    if not header.is64 or header.endian != "<":
        raise ElfError("only 64-bit little-endian ELF is supported")
    return header


def sections(data: bytes | memoryview | object, info: ElfHeader) -> list[SectionHeader]:
    """The section headers whose bytes are in the file, with their names
    (empty if it has none)."""
    if not info.shnum:
        return []
    size = len(data)  # type: ignore[arg-type]
    return [s for s in sections_of(data) if s.type != SHT_NOBITS and s.offset + s.size <= size]
