"""An object's DWARF sections, read, and inflated, only as far as used.

A distribution's debug file has its DWARF sections compressed: libc's 5.8
MB of ``.debug_info`` (plus its line, abbreviation and location tables)
take 40-50 ms to inflate, while naming the functions inlined at a few
return addresses reads one compilation unit. Here each section is a
stream that reads the file only as far as dwarfread.py reads it, and
inflates a compressed one (``SHF_COMPRESSED`` zlib sections, GNU
``.zdebug`` sections) no further than that.

A compressed section says how large it is inflated (its ``Elf32_Chdr`` or
``Elf64_Chdr``, the big-endian size after ``.zdebug``'s "ZLIB"): one that
says more than the caller's cap (``--limits debug-size``), as a plain
section larger than it, is read as absent (``oversized`` names it, for a
warning), and none is inflated past what it says. The sections are found
by qformat.elfhdr.
"""

from __future__ import annotations

import io
import os
import struct
from typing import Any, BinaryIO

from zlib_ng import zlib_ng

from qtools.qformat.objects.elfhdr import (SHF_COMPRESSED, SHT_NOBITS, ElfHeader, SectionHeader,
                                           read_file_header, read_sections)
from qtools.qformat.limits import DEFAULT_LIMITS

SECTIONS = ("info", "aranges", "abbrev", "frame", "str", "loc", "ranges", "line", "pubtypes",
            "pubnames", "addr", "str_offsets", "line_str", "loclists", "rnglists", "sup",
            "types")
ELFCOMPRESS_ZLIB = 1
GNU_ZLIB = struct.Struct(">4sQ")  # a .zdebug section's header: "ZLIB", the inflated size
CHUNK = 1 << 16  # compressed bytes read, and inflated bytes made, at least at a time
MAX_INFLATED = DEFAULT_LIMITS.debug_size  # bytes a compressed section may say it holds


class _Lazy(io.RawIOBase):
    """A section's bytes: read from the file as asked; a compressed one
    inflated, and kept, only as far as asked, and never past ``size``."""

    def __init__(self, fd: int, offset: int, stored: int, size: int, zlib: bool) -> None:
        super().__init__()
        self._fd, self._offset, self._stored = fd, offset, stored
        self.size = size  # bytes, inflated
        self._inflate = zlib_ng.decompressobj() if zlib else None
        self._taken = 0  # stored bytes read so far
        self._buf = bytearray()  # inflated so far (a plain section is not kept)
        self._pos = 0

    def _fill(self, end: int) -> None:
        assert self._inflate is not None
        end = min(end, self.size)
        while len(self._buf) < end:
            data = self._inflate.unconsumed_tail
            if not data:
                if self._taken >= self._stored or self._inflate.eof:
                    break
                data = os.pread(self._fd, min(CHUNK, self._stored - self._taken),
                                self._offset + self._taken)
                if not data:
                    break
                self._taken += len(data)
            # no more than asked (a bomb inflates a thousandfold), nor than said
            want = min(max(end - len(self._buf), CHUNK), self.size - len(self._buf))
            self._buf += self._inflate.decompress(data, want)

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
        end = self.size if size is None or size < 0 else min(self._pos + size, self.size)
        if end <= self._pos:
            return b""
        if self._inflate is None:
            data = os.pread(self._fd, end - self._pos, self._offset + self._pos)
        else:
            if end > len(self._buf):
                self._fill(end)
            data = bytes(memoryview(self._buf)[self._pos:end])
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


def plain_sections(f: BinaryIO) -> tuple[ElfHeader, dict[str, SectionHeader]]:
    """The ELF header and the sections by name of ``f``; a GNU
    ``.zdebug_NAME`` section under ``.debug_NAME`` where there is no plain
    one (``section_stream`` tells them apart by their own name)."""
    header = read_file_header(f)
    found = read_sections(f, os.fstat(f.fileno()).st_size)
    sections = {s.name: s for s in found}
    for sec in found:
        if sec.name.startswith(".zdebug_"):
            sections.setdefault(".debug_" + sec.name[len(".zdebug_"):], sec)
    return header, sections


def inflated_size(f: BinaryIO, header: ElfHeader, sec: SectionHeader) -> int | None:
    """What a compressed section says it holds inflated (``sec.size`` for
    a plain one); None where it is compressed other than by zlib, or its
    header does not fit."""
    if sec.name.startswith(".zdebug"):  # GNU: "ZLIB", then the size, big-endian
        raw = os.pread(f.fileno(), GNU_ZLIB.size, sec.offset)
        if len(raw) < GNU_ZLIB.size or sec.size < GNU_ZLIB.size:
            return None
        magic, size = GNU_ZLIB.unpack(raw)
        return size if magic == b"ZLIB" else None  # type: ignore[no-any-return]
    if not sec.flags & SHF_COMPRESSED:
        return sec.size
    # Elf64_Chdr: type, reserved, size, addralign; Elf32_Chdr: type, size, addralign
    chdr = _chdr(header)
    raw = os.pread(f.fileno(), chdr.size, sec.offset)
    if len(raw) < chdr.size or sec.size < chdr.size:
        return None
    fields = chdr.unpack(raw)
    if fields[0] != ELFCOMPRESS_ZLIB:
        return None
    return fields[2] if header.is64 else fields[1]  # type: ignore[no-any-return]


def _chdr(header: ElfHeader) -> struct.Struct:
    return struct.Struct(header.endian + ("IIQQ" if header.is64 else "III"))


def section_stream(f: BinaryIO, header: ElfHeader, sec: SectionHeader,
                   max_inflated: int = MAX_INFLATED) -> _Lazy | None:
    """The bytes of ``sec`` as a stream, inflated where compressed; None for
    one without bytes in the file (SHT_NOBITS: a debug file's copy of
    ``.eh_frame``), compressed other than by zlib, or of more than
    ``max_inflated`` bytes (inflated: as its header says)."""
    if sec.type == SHT_NOBITS:
        return None
    size = _size(f, header, sec)
    if size is None or size > max_inflated:  # a zlib bomb's header: read as if not there
        return None
    if sec.name.startswith(".zdebug"):
        skip = GNU_ZLIB.size
    elif sec.flags & SHF_COMPRESSED:
        skip = _chdr(header).size
    else:
        return _Lazy(f.fileno(), sec.offset, size, size, False)
    return _Lazy(f.fileno(), sec.offset + skip, sec.size - skip, size, True)


def _size(f: BinaryIO, header: ElfHeader, sec: SectionHeader) -> int | None:
    """``inflated_size``, a plain section's clipped to what the file holds."""
    size = inflated_size(f, header, sec)
    if size is not None and not (sec.flags & SHF_COMPRESSED or sec.name.startswith(".zdebug")):
        size = min(size, max(os.fstat(f.fileno()).st_size - sec.offset, 0))
    return size


def oversized(f: BinaryIO, max_inflated: int) -> str | None:
    """Why a DWARF section of ``f`` is read as absent: one of more than
    ``max_inflated`` bytes (the first); else None."""
    header, sections = plain_sections(f)
    for name in [f".debug_{s}" for s in SECTIONS]:
        sec = sections.get(name)
        if sec is None or sec.type == SHT_NOBITS:
            continue
        size = _size(f, header, sec)
        if size is not None and size > max_inflated:
            compressed = sec.flags & SHF_COMPRESSED or sec.name.startswith(".zdebug")
            return f"{sec.name} {'says it inflates to' if compressed else 'holds'} {size} bytes"
    return None
