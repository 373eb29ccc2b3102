"""pyelftools' DWARFInfo over sections read, and inflated, only as far as used.

``ELFFile.get_dwarf_info`` reads every DWARF section into memory first, and
a distribution's debug file has them compressed: libc's 5.8 MB of
``.debug_info`` (plus its line, abbreviation and location tables) take 40-50
ms to inflate, while naming the functions inlined at a few return
addresses reads one compilation unit. Here each section is a stream that
reads (and inflates, for ``SHF_COMPRESSED`` zlib sections) the file only as
far as pyelftools reads it. What pyelftools then parses is the same bytes.

The sections are found by qformat.elfhdr, not by pyelftools' ``ELFFile``,
whose import (every ELF structure it knows) was a sixth of a first view.
A file of another kind (GNU ``.zdebug`` sections, a machine not named
here) goes through ``ELFFile`` as before.
"""

from __future__ import annotations

import io
import os
import struct
from typing import TYPE_CHECKING, Any, BinaryIO

from zlib_ng import zlib_ng

from qtools.qformat.elfhdr import SHF_COMPRESSED, SHT_NOBITS, ElfHeader, SectionHeader, \
    read_file_header, read_sections

if TYPE_CHECKING:
    from elftools.dwarf.dwarfinfo import DWARFInfo

SECTIONS = ("info", "aranges", "abbrev", "frame", "str", "loc", "ranges", "line", "pubtypes",
            "pubnames", "addr", "str_offsets", "line_str", "loclists", "rnglists", "sup",
            "types")
ELFCOMPRESS_ZLIB = 1
CHUNK = 1 << 16  # compressed bytes inflated at a time
MAX_INFLATED = 4 << 30  # bytes a compressed section may say it holds (held in memory as read)
#: e_machine -> pyelftools' name of it (``ELFFile.get_machine_arch``, DwarfConfig)
MACHINES = {62: "x64", 183: "AArch64", 3: "x86", 40: "ARM", 243: "RISC-V", 21: "64-bit PowerPC",
            20: "PowerPC", 8: "MIPS", 22: "IBM S/390", 2: "SPARC", 43: "SPARC v9"}


class NoDwarf(Exception):
    """The file has no DWARF (nor ``.eh_frame``): pyelftools' ``has_dwarf_info``."""


class _Lazy(io.RawIOBase):
    """A section's bytes: read from the file (inflated) as far as asked."""

    def __init__(self, fd: int, offset: int, stored: int, size: int, zlib: bool) -> None:
        super().__init__()
        self._fd, self._offset, self._stored = fd, offset, stored
        self.size = size  # bytes, inflated
        self._inflate = zlib_ng.decompressobj() if zlib else None
        self._taken = 0  # stored bytes read so far
        self._buf = bytearray()
        self._pos = 0

    def _fill(self, end: int) -> None:
        end = min(end, self.size)
        while len(self._buf) < end and self._taken < self._stored:
            want = min(max(CHUNK, (end - len(self._buf)) // 4), self._stored - self._taken)
            data = os.pread(self._fd, want, self._offset + self._taken)
            if not data:
                break
            self._taken += len(data)
            self._buf += self._inflate.decompress(data) if self._inflate else data
        if len(self._buf) > self.size:  # more than the header said: as much as it said
            del self._buf[self.size:]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        self._pos = max(base + pos, 0)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self.size if size is None or size < 0 else self._pos + size
        if end > len(self._buf):
            self._fill(end)
        data = bytes(self._buf[self._pos:end])
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


def plain_sections(f: BinaryIO) -> tuple[ElfHeader, dict[str, SectionHeader]] | None:
    """The ELF header and the sections by name of ``f``, where its DWARF is
    read here; None where pyelftools' ``ELFFile`` must read it (GNU
    ``.zdebug`` sections, a machine not in MACHINES)."""
    header = read_file_header(f)
    sections = {s.name: s for s in read_sections(f, os.fstat(f.fileno()).st_size)}
    if header.machine not in MACHINES or ".zdebug_info" in sections:
        return None
    return header, sections


def dwarf_info(f: BinaryIO) -> DWARFInfo:
    """The DWARF of the ELF file ``f`` (which must stay open while it is
    used), as ``ELFFile(f).get_dwarf_info(relocate_dwarf_sections=False)``
    gives it; NoDwarf where it has none."""
    plain = plain_sections(f)
    if plain is None:
        return _through_elffile(f)
    header, sections = plain
    if ".debug_info" not in sections and ".eh_frame" not in sections:
        raise NoDwarf()
    from elftools.dwarf import dwarfinfo
    found: dict[str, dwarfinfo.DebugSectionDescriptor | None] = {}
    for name in [f".debug_{s}" for s in SECTIONS] + [".gnu_debugaltlink", ".eh_frame"]:
        sec = sections.get(name)
        stream = None if sec is None else section_stream(f, header, sec)
        if sec is None or stream is None:
            found[name] = None
            continue
        found[name] = dwarfinfo.DebugSectionDescriptor(
            stream=stream,  # type: ignore[arg-type]  # a raw stream, read as a file
            name=name, global_offset=sec.offset, size=stream.size, address=sec.addr)
    return dwarfinfo.DWARFInfo(
        config=dwarfinfo.DwarfConfig(little_endian=header.endian == "<",
                           default_address_size=8 if header.is64 else 4,
                           machine_arch=MACHINES[header.machine]),
        debug_info_sec=found[".debug_info"], debug_aranges_sec=found[".debug_aranges"],
        debug_abbrev_sec=found[".debug_abbrev"], debug_frame_sec=found[".debug_frame"],
        eh_frame_sec=found[".eh_frame"], debug_str_sec=found[".debug_str"],
        debug_loc_sec=found[".debug_loc"], debug_ranges_sec=found[".debug_ranges"],
        debug_line_sec=found[".debug_line"], debug_pubtypes_sec=found[".debug_pubtypes"],
        debug_pubnames_sec=found[".debug_pubnames"], debug_addr_sec=found[".debug_addr"],
        debug_str_offsets_sec=found[".debug_str_offsets"],
        debug_line_str_sec=found[".debug_line_str"],
        debug_loclists_sec=found[".debug_loclists"],
        debug_rnglists_sec=found[".debug_rnglists"], debug_sup_sec=found[".debug_sup"],
        gnu_debugaltlink_sec=found[".gnu_debugaltlink"],
        debug_types_sec=found[".debug_types"])


def section_stream(f: BinaryIO, header: ElfHeader, sec: SectionHeader) -> _Lazy | None:
    """The bytes of ``sec`` as a stream, inflated where compressed; None for
    one without bytes in the file (SHT_NOBITS: a debug file's copy of
    ``.eh_frame``), compressed other than by zlib, or saying it inflates
    to more than MAX_INFLATED."""
    if sec.type == SHT_NOBITS:
        return None
    if not sec.flags & SHF_COMPRESSED:
        return _Lazy(f.fileno(), sec.offset, sec.size, sec.size, False)
    # Elf64_Chdr: type, reserved, size, addralign; Elf32_Chdr: type, size, addralign
    chdr = struct.Struct(header.endian + ("IIQQ" if header.is64 else "III"))
    raw = os.pread(f.fileno(), chdr.size, sec.offset)
    if len(raw) < chdr.size or sec.size < chdr.size:
        return None
    fields = chdr.unpack(raw)
    if fields[0] != ELFCOMPRESS_ZLIB:
        return None
    size = fields[2] if header.is64 else fields[1]
    if size > MAX_INFLATED:  # a zlib bomb's header: read as if it were not there
        return None
    return _Lazy(f.fileno(), sec.offset + chdr.size, sec.size - chdr.size, size, True)


def _through_elffile(f: BinaryIO) -> DWARFInfo:
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(f)
    if not elf.has_dwarf_info():
        raise NoDwarf()
    return elf.get_dwarf_info(relocate_dwarf_sections=False)
