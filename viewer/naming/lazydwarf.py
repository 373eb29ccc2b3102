"""pyelftools' DWARFInfo over sections read, and inflated, only as far as used.

``ELFFile.get_dwarf_info`` reads every DWARF section into memory first, and
a distribution's debug file has them compressed: libc's 5.8 MB of
``.debug_info`` (plus its line, abbreviation and location tables) take 40-50
ms to inflate, while naming the functions inlined at a few return
addresses reads one compilation unit. Here each section is a stream that
reads (and inflates, for ``SHF_COMPRESSED`` zlib sections) the file only as
far as pyelftools reads it. What pyelftools then parses is the same bytes.
"""

from __future__ import annotations

import io
import os
import struct
from typing import Any, BinaryIO

from elftools.dwarf.dwarfinfo import DebugSectionDescriptor, DwarfConfig, DWARFInfo
from elftools.elf.elffile import ELFFile
from zlib_ng import zlib_ng

SECTIONS = ("info", "aranges", "abbrev", "frame", "str", "loc", "ranges", "line", "pubtypes",
            "pubnames", "addr", "str_offsets", "line_str", "loclists", "rnglists", "sup",
            "types")
ELFCOMPRESS_ZLIB = 1
CHUNK = 1 << 16  # compressed bytes inflated at a time


class _Lazy(io.RawIOBase):
    """A section's bytes: read from the file (inflated) as far as asked."""

    def __init__(self, fd: int, offset: int, stored: int, size: int, zlib: bool) -> None:
        super().__init__()
        self._fd, self._offset, self._stored, self._size = fd, offset, stored, size
        self._inflate = zlib_ng.decompressobj() if zlib else None
        self._taken = 0  # stored bytes read so far
        self._buf = bytearray()
        self._pos = 0

    def _fill(self, end: int) -> None:
        end = min(end, self._size)
        while len(self._buf) < end and self._taken < self._stored:
            want = min(max(CHUNK, (end - len(self._buf)) // 4), self._stored - self._taken)
            data = os.pread(self._fd, want, self._offset + self._taken)
            if not data:
                break
            self._taken += len(data)
            self._buf += self._inflate.decompress(data) if self._inflate else data
        if len(self._buf) > self._size:  # more than the header said: as much as it said
            del self._buf[self._size:]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(base + pos, 0)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = self._size if size is None or size < 0 else self._pos + size
        if end > len(self._buf):
            self._fill(end)
        data = bytes(self._buf[self._pos:end])
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


def dwarf_info(elf: ELFFile, f: BinaryIO) -> DWARFInfo:
    """The DWARF of the ELF file ``f`` (which must stay open while it is
    used), as ``elf.get_dwarf_info(relocate_dwarf_sections=False)`` gives
    it; that is what files of other kinds (GNU ``.zdebug`` sections, other
    compression, byte-doubling targets) get."""
    if elf.has_section(".zdebug_info") or elf.has_phantom_bytes():
        return elf.get_dwarf_info(relocate_dwarf_sections=False)
    chdr = struct.Struct(("<" if elf.little_endian else ">") + "I")
    chdr_size = elf.structs.Elf_Chdr.sizeof()
    found: dict[str, DebugSectionDescriptor | None] = {}
    for name in [f".debug_{s}" for s in SECTIONS] + [".gnu_debugaltlink", ".eh_frame"]:
        section = elf.get_section_by_name(name)
        if section is None:
            found[name] = None
            continue
        offset, stored = section["sh_offset"], section["sh_size"]
        if section["sh_type"] == "SHT_NOBITS":
            stream: BinaryIO = io.BytesIO(bytes(section.data_size))
        elif section.compressed:
            (kind,) = chdr.unpack(os.pread(f.fileno(), chdr.size, offset))
            if kind != ELFCOMPRESS_ZLIB:
                return elf.get_dwarf_info(relocate_dwarf_sections=False)  # it says what is wrong
            stream = _Lazy(f.fileno(), offset + chdr_size, stored - chdr_size, section.data_size,
                           True)  # type: ignore[assignment]
        else:
            stream = _Lazy(f.fileno(), offset, stored, section.data_size,
                           False)  # type: ignore[assignment]
        found[name] = DebugSectionDescriptor(stream=stream, name=name, global_offset=offset,
                                             size=section.data_size, address=section["sh_addr"])
    return DWARFInfo(
        config=DwarfConfig(little_endian=elf.little_endian,
                           default_address_size=elf.elfclass // 8,
                           machine_arch=elf.get_machine_arch()),
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
