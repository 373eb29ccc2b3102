"""The few ELF facts unwinding needs, read straight from the file bytes.

Only 64-bit little-endian objects (x86_64, aarch64). Program headers give the
PT_LOAD segments (file offset <-> vaddr) and PT_GNU_EH_FRAME, so a stripped
object without section headers still unwinds; section headers are read only
to find `.eh_frame` / `.debug_frame` when there is no `.eh_frame_hdr` table.
Pure functions over bytes (or an mmap); malformed input raises ElfError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import ElfError

PT_LOAD = 1
PT_GNU_EH_FRAME = 0x6474E550
SHT_NOBITS = 8
PN_XNUM = 0xFFFF

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")


@dataclass(frozen=True, slots=True)
class Segment:
    """One program header."""

    type: int
    flags: int
    offset: int
    vaddr: int
    filesz: int
    memsz: int


@dataclass(frozen=True, slots=True)
class Section:
    """One section header, name resolved."""

    name: str
    type: int
    addr: int
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class ElfInfo:
    """What the unwinder needs from the headers."""

    machine: int
    loads: tuple[Segment, ...]
    eh_frame_hdr: Segment | None
    shoff: int
    shnum: int
    shstrndx: int


def parse_elf(data: bytes | memoryview | object) -> ElfInfo:
    """Parse the ELF header and program headers of a 64-bit little-endian object."""
    size = len(data)  # type: ignore[arg-type]
    if size < _EHDR.size:
        raise ElfError("file too short for an ELF header")
    (ident, _type, machine, _ver, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
     shentsize, shnum, shstrndx) = _EHDR.unpack_from(data, 0)  # type: ignore[arg-type]
    if ident[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise ElfError("only 64-bit little-endian ELF is supported")
    if shentsize != _SHDR.size:
        shoff, shnum = 0, 0  # no usable section headers; program headers are enough
    if phnum == PN_XNUM and shoff and shoff + _SHDR.size <= size:
        phnum = _SHDR.unpack_from(data, shoff)[7]  # type: ignore[arg-type]  # sh_info of section 0
    if phentsize != _PHDR.size or phoff + phnum * _PHDR.size > size:
        raise ElfError("program headers missing or truncated")
    loads: list[Segment] = []
    hdr: Segment | None = None
    for i in range(phnum):
        p_type, p_flags, p_offset, p_vaddr, _paddr, p_filesz, p_memsz, _align = _PHDR.unpack_from(
            data, phoff + i * _PHDR.size)  # type: ignore[arg-type]
        seg = Segment(p_type, p_flags, p_offset, p_vaddr, p_filesz, p_memsz)
        if p_type == PT_LOAD:
            loads.append(seg)
        elif p_type == PT_GNU_EH_FRAME:
            hdr = seg
    if shnum and (shoff + shnum * _SHDR.size > size or shstrndx >= shnum):
        shoff, shnum = 0, 0
    return ElfInfo(machine, tuple(loads), hdr, shoff, shnum, shstrndx)


def sections(data: bytes | memoryview | object, info: ElfInfo) -> list[Section]:
    """All section headers with their names (empty if the file has none)."""
    if not info.shnum:
        return []
    size = len(data)  # type: ignore[arg-type]
    raw = [_SHDR.unpack_from(data, info.shoff + i * _SHDR.size)  # type: ignore[arg-type]
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


def offset_to_vaddr(loads: tuple[Segment, ...], offset: int) -> int | None:
    """Link-time vaddr of a file offset, through the PT_LOAD segment holding it."""
    for seg in loads:
        if seg.offset <= offset < seg.offset + seg.filesz:
            return offset - seg.offset + seg.vaddr
    return None


def vaddr_to_offset(loads: tuple[Segment, ...], vaddr: int) -> int | None:
    """File offset of a link-time vaddr backed by file bytes (not .bss)."""
    for seg in loads:
        if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
            return vaddr - seg.vaddr + seg.offset
    return None
