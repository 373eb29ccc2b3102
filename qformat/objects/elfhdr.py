"""ELF headers read straight from the bytes: the collector's and q-view's one reader.

Both need the same facts about an object: where its file bytes load (the
PT_LOAD segments, which turn a file offset into a link-time address and
back); the collector's unwinder also wants PT_GNU_EH_FRAME and where the
section headers are. A few struct unpacks give them for 32- and 64-bit
objects of either byte order, a stripped object without section headers
included; pyelftools would build an object per header for the same answer.

An object may come from anyone: counts and offsets are checked against the
data, and anything malformed raises ``ElfHeaderError``.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple, Protocol

PT_LOAD = 1
PT_GNU_EH_FRAME = 0x6474E550
PN_XNUM = 0xFFFF  # e_phnum of an object with more program headers: see section 0's sh_info

EHDR64 = struct.Struct("<16sHHIQQQIHHHHHH")
PHDR64 = struct.Struct("<IIQQQQQQ")  # type, flags, offset, vaddr, paddr, filesz, memsz, align
SHDR64 = struct.Struct("<IIQQQQIIQQ")



class Seekable(Protocol):
    """What the header readers need of a file: an open binary file, or the
    collector's bounded reader of one (daemon/unwind/filebytes.py)."""

    def seek(self, pos: int, /) -> object: ...

    def read(self, size: int, /) -> bytes: ...

class ElfHeaderError(ValueError):
    """Not an ELF object, or its headers do not fit in it."""


class Segment(NamedTuple):
    """A loadable segment: file bytes [offset, offset+filesz) load at vaddr."""

    offset: int
    vaddr: int
    filesz: int

    def vaddr_of(self, file_offset: int) -> int | None:
        if self.offset <= file_offset < self.offset + self.filesz:
            return file_offset - self.offset + self.vaddr
        return None


class ElfHeader(NamedTuple):
    """The ELF header and what the program headers say."""

    is64: bool
    endian: str  # struct's "<" or ">"
    machine: int
    loads: tuple[Segment, ...]
    eh_frame_hdr: Segment | None
    shoff: int  # 0 and shnum 0 when the section headers are absent or unusable
    shnum: int
    shstrndx: int
    entry: int = 0  # e_entry: the link-time address where the program starts


def _formats(is64: bool, endian: str) -> tuple[struct.Struct, struct.Struct, struct.Struct]:
    if is64:
        return (struct.Struct(endian + EHDR64.format[1:]),
                struct.Struct(endian + PHDR64.format[1:]),
                struct.Struct(endian + SHDR64.format[1:]))
    return (struct.Struct(endian + "16sHHIIIIIHHHHHH"), struct.Struct(endian + "8I"),
            struct.Struct(endian + "10I"))


_FORMATS = {(is64, e): _formats(is64, e) for is64 in (True, False) for e in "<>"}


def read_header(data: Any) -> ElfHeader:
    """Read the ELF header and program headers of ``data`` (bytes, a
    memoryview or an mmap of the whole file)."""
    size = len(data)
    if size < 16 or bytes(data[:4]) != b"\x7fELF":
        raise ElfHeaderError("not an ELF file")
    elf_class, elf_data = data[4], data[5]
    if elf_class not in (1, 2) or elf_data not in (1, 2):
        raise ElfHeaderError("unknown ELF class or byte order")
    is64, endian = elf_class == 2, "<" if elf_data == 1 else ">"
    ehdr, phdr, shdr = _FORMATS[is64, endian]
    if size < ehdr.size:
        raise ElfHeaderError("file too short for an ELF header")
    (_ident, _type, machine, _version, entry, phoff, shoff, _flags, _ehsize, phentsize, phnum,
     shentsize, shnum, shstrndx) = ehdr.unpack_from(data, 0)
    if shentsize != shdr.size:
        shoff, shnum = 0, 0  # no usable section headers; program headers are enough
    if phnum == PN_XNUM and shoff and shoff + shdr.size <= size:
        phnum = shdr.unpack_from(data, shoff)[7]  # sh_info of section 0
    if phentsize != phdr.size or phoff + phnum * phdr.size > size:
        raise ElfHeaderError("program headers missing or truncated")
    loads: list[Segment] = []
    eh_frame_hdr: Segment | None = None
    for i in range(phnum):
        p = phdr.unpack_from(data, phoff + i * phdr.size)
        if is64:
            p_type, _pflags, p_offset, p_vaddr, _paddr, p_filesz = p[:6]
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz = p[:5]
        if p_type == PT_LOAD:
            loads.append(Segment(p_offset, p_vaddr, p_filesz))
        elif p_type == PT_GNU_EH_FRAME:
            eh_frame_hdr = Segment(p_offset, p_vaddr, p_filesz)
    if shnum and (shoff + shnum * shdr.size > size or shstrndx >= shnum):
        shoff, shnum = 0, 0
    return ElfHeader(is64, endian, machine, tuple(loads), eh_frame_hdr, shoff, shnum, shstrndx,
                     entry)


def vaddr_of(loads: tuple[Segment, ...] | list[Segment], file_offset: int) -> int | None:
    """Link-time address of a file offset, through the segment holding it."""
    for seg in loads:
        if seg.offset <= file_offset < seg.offset + seg.filesz:
            return file_offset - seg.offset + seg.vaddr
    return None


def offset_of(loads: tuple[Segment, ...] | list[Segment], vaddr: int) -> int | None:
    """File offset of a link-time address backed by file bytes (not .bss)."""
    for seg in loads:
        if seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
            return vaddr - seg.vaddr + seg.offset
    return None


SHN_XINDEX = 0xFFFF  # e_shstrndx of an object with many sections: see section 0's sh_link
SHT_SYMTAB, SHT_RELA, SHT_NOTE, SHT_NOBITS, SHT_REL, SHT_DYNSYM = 2, 4, 7, 8, 9, 11
SHF_EXECINSTR, SHF_COMPRESSED = 0x4, 0x800
MAX_SECTIONS = 1 << 16  # real objects have tens; a hostile header may claim millions
MAX_NAMES = 1 << 24  # bytes of section names read at most


class SectionHeader(NamedTuple):
    """One section header, its name resolved."""

    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    entsize: int


def read_sections(f: Seekable, file_size: int) -> list[SectionHeader]:
    """The section headers of the open ELF file ``f`` (``file_size`` bytes
    long), names resolved; [] where it has none or they do not fit in it.
    Raises ``ElfHeaderError`` where it is no ELF file."""
    f.seek(0)
    head = f.read(64)
    if len(head) < 16 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) \
            or head[5] not in (1, 2):
        raise ElfHeaderError("not an ELF file")
    ehdr, _phdr, shdr = _FORMATS[head[4] == 2, "<" if head[5] == 1 else ">"]
    if len(head) < ehdr.size:
        raise ElfHeaderError("file too short for an ELF header")
    fields = ehdr.unpack_from(head, 0)
    shoff, shentsize, shnum, shstrndx = fields[6], fields[11], fields[12], fields[13]
    if not shoff or shentsize != shdr.size or shoff + shdr.size > file_size:
        return []
    if shnum == 0 or shstrndx == SHN_XINDEX:  # the real values are in section 0
        f.seek(shoff)
        first = shdr.unpack(f.read(shdr.size))
        shnum = shnum or first[5]
        shstrndx = first[6] if shstrndx == SHN_XINDEX else shstrndx
    if not 0 < shnum <= MAX_SECTIONS or shoff + shnum * shdr.size > file_size:
        return []
    f.seek(shoff)
    raw = list(shdr.iter_unpack(f.read(shnum * shdr.size)))
    names = b""
    if shstrndx < shnum:
        str_off, str_size = raw[shstrndx][4], min(raw[shstrndx][5], MAX_NAMES)
        if str_off < file_size:
            f.seek(str_off)
            names = f.read(min(str_size, file_size - str_off))
    out = []
    for sh_name, sh_type, flags, addr, offset, size, link, info, _align, entsize in raw:
        end = names.find(b"\0", sh_name) if sh_name < len(names) else -1
        name = names[sh_name:end].decode("utf-8", "replace") if end >= 0 else ""
        out.append(SectionHeader(name, sh_type, flags, addr, offset, size, link, info, entsize))
    return out


class _Reader:
    """seek and read over a buffer (bytes, memoryview, mmap), for ``read_sections``."""

    def __init__(self, data: Any) -> None:
        self.data, self.pos = data, 0

    def seek(self, pos: int) -> None:
        self.pos = pos

    def read(self, n: int) -> bytes:
        out = bytes(self.data[self.pos:self.pos + n])
        self.pos += len(out)
        return out


def sections_of(data: Any) -> list[SectionHeader]:
    """``read_sections`` of a whole file's bytes (or an mmap of it)."""
    return read_sections(_Reader(data), len(data))  # type: ignore[arg-type]


HEAD_BYTES = 4096
"""What ``read_file_header`` reads first: linkers put the program headers
right after the ELF header, well within it."""


def read_file_header(f: Seekable, max_bytes: int = 1 << 20) -> ElfHeader:
    """``read_header`` of an open file, reading only its first bytes (up to
    ``max_bytes`` where the program headers lie further in); section headers
    beyond what was read count as absent."""
    f.seek(0)
    head = f.read(HEAD_BYTES)
    try:
        return read_header(head)
    except ElfHeaderError:
        if len(head) < HEAD_BYTES or head[:4] != b"\x7fELF":
            raise
    f.seek(0)
    return read_header(f.read(max_bytes))
