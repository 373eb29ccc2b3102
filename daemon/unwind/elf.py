"""The few ELF facts unwinding needs, read straight from the file bytes.

Only 64-bit little-endian objects (x86_64, aarch64). Program headers
(qformat.elfhdr, shared with q-view) give the PT_LOAD segments (file offset
<-> vaddr) and PT_GNU_EH_FRAME, so a stripped object without section headers
still unwinds; section headers are read only to find `.eh_frame` /
`.debug_frame` when there is no `.eh_frame_hdr` table. Pure functions over
bytes (or an mmap); malformed input raises ElfError.
"""

from __future__ import annotations

from typing import NamedTuple

from qtools.qformat.elfhdr import SHDR64, ElfHeader, ElfHeaderError, read_header

from .errors import ElfError

SHT_NOBITS = 8


class Section(NamedTuple):
    """One section header, name resolved."""

    name: str
    type: int
    addr: int
    offset: int
    size: int


def parse_elf(data: bytes | memoryview | object) -> ElfHeader:
    """Parse the ELF header and program headers of a 64-bit little-endian object."""
    try:
        header = read_header(data)
    except ElfHeaderError as e:
        raise ElfError(str(e)) from None
    if not header.is64 or header.endian != "<":
        raise ElfError("only 64-bit little-endian ELF is supported")
    return header


def sections(data: bytes | memoryview | object, info: ElfHeader) -> list[Section]:
    """All section headers with their names (empty if the file has none)."""
    if not info.shnum:
        return []
    size = len(data)  # type: ignore[arg-type]
    raw = [SHDR64.unpack_from(data, info.shoff + i * SHDR64.size)  # type: ignore[arg-type]
           for i in range(info.shnum)]
    str_off, str_size = raw[info.shstrndx][4], raw[info.shstrndx][5]
    if str_off + str_size > size:
        return []
    strtab = bytes(data[str_off:str_off + str_size])  # type: ignore[index]
    out = []
    for sh_name, sh_type, _flags, sh_addr, sh_offset, sh_size, *_ in raw:
        end = strtab.find(b"\0", sh_name)
        name = strtab[sh_name:end if end >= 0 else len(strtab)].decode("latin-1")
        if sh_type != SHT_NOBITS and sh_offset + sh_size <= size:
            out.append(Section(name, sh_type, sh_addr, sh_offset, sh_size))
    return out
