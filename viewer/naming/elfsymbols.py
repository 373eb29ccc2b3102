"""What q-view needs from an ELF object copy, read straight from its bytes.

The section and program headers come from qformat.elfhdr, the reader the
collector uses too; the symbol tables and relocations are unpacked with
``struct.iter_unpack``. pyelftools would build an object per section and
per symbol (a large libpython symtab takes 0.24 s as objects and 5 ms
raw), and importing it costs a view that reads no DWARF a tenth of its time.

Everything here trusts nothing in the file: offsets, sizes and counts are
clipped to what is actually there. Errors of any kind come out as
``ElfProblem`` so the caller can warn and carry on with unknown symbols.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, Iterator

from qtools.qformat import open_regular
from qtools.qformat.objects.elfhdr import (SHF_EXECINSTR, SHT_DYNSYM, SHT_NOBITS, SHT_NOTE,
                                           SHT_REL, SHT_RELA, SHT_SYMTAB, SectionHeader, Segment,
                                           read_file_header, read_sections, vaddr_of)

from .symtab import RawSymbol, SymbolTable

_new = tuple.__new__

SHN_UNDEF = 0
SHN_LORESERVE = 0xFF00
STT_NOTYPE, STT_FUNC, STT_GNU_IFUNC = 0, 2, 10
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
EM_386, EM_ARM, EM_X86_64, EM_AARCH64 = 3, 40, 62, 183
MAX_SECTION = 1 << 30  # no real symbol table is a gigabyte; a hostile header may say so


class ElfProblem(Exception):
    """The file is not an ELF object q-view can read."""


class ElfObject:
    """The parts of one ELF file that symbolization uses (``_read`` fills them in)."""

    def __init__(self, segments: list[Segment]) -> None:
        self.segments = segments
        self.build_id: str | None = None
        self.debuglink: tuple[str, int] | None = None
        self.has_symtab = False
        self.symbols = SymbolTable.empty()

    def vaddr_of(self, file_offset: int) -> int | None:
        """The link-time address of a file offset, through the PT_LOAD segments."""
        return vaddr_of(self.segments, file_offset)


def read_elf(path: str | os.PathLike[str], *, symbols: bool = True) -> ElfObject:
    """Read segments, build-id, debuglink and (with ``symbols``) the symbols."""
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            return _read(f, symbols)
    except ElfProblem:
        raise
    except OSError as e:
        raise ElfProblem(f"cannot read: {e.strerror or e}") from None
    except Exception as e:  # damage of any kind: struct.error, ValueError, IndexError...
        raise ElfProblem(f"not a readable ELF file ({type(e).__name__}: {e})"[:200]) from None


# ---------------------------------------------------------------- internals

class _Elf:
    """Section access with sizes clipped to the file."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.file_size = os.fstat(f.fileno()).st_size
        self.header = read_file_header(f)
        self.is64 = self.header.is64
        self.endian = self.header.endian
        self.machine = self.header.machine
        self.sections: list[SectionHeader] = read_sections(f, self.file_size)

    def data(self, index: int) -> bytes:
        if not 0 <= index < len(self.sections):
            return b""
        sec = self.sections[index]
        if sec.type == SHT_NOBITS:
            return b""
        off, size = sec.offset, min(sec.size, MAX_SECTION)
        if off >= self.file_size:
            return b""
        self.f.seek(off)
        return self.f.read(min(size, self.file_size - off))

    def index_of(self, name: str) -> int | None:
        for i, sec in enumerate(self.sections):
            if sec.name == name:
                return i
        return None

    def by_type(self, sh_type: int) -> Iterator[int]:
        for i, sec in enumerate(self.sections):
            if sec.type == sh_type:
                yield i


def _read(f: BinaryIO, want_symbols: bool) -> ElfObject:
    e = _Elf(f)
    obj = ElfObject(list(e.header.loads))
    obj.build_id = _build_id(e)
    obj.debuglink = _debuglink(e)
    if not want_symbols:
        return obj
    raw: list[RawSymbol] = []
    symtab = list(e.by_type(SHT_SYMTAB))
    obj.has_symtab = bool(symtab)
    for index in symtab + list(e.by_type(SHT_DYNSYM)):
        raw.extend(_symbols(e, index))
    raw.extend(_plt_symbols(e))
    if e.machine == EM_ARM:  # Thumb functions have bit 0 set in st_value
        raw = [s._replace(start=s.start & ~1) for s in raw]
    limit = max((s.vaddr + s.filesz for s in obj.segments), default=0)
    obj.symbols = SymbolTable.build(raw, limit)
    return obj


def _symbols(e: _Elf, index: int) -> Iterator[RawSymbol]:
    sec = e.sections[index]
    strtab = e.data(sec.link)
    data = e.data(index)
    if e.is64:  # Elf64_Sym: name, info, other, shndx, value, size
        fmt, width, at_info, at_shndx, at_value, at_size = "IBBHQQ", 24, 1, 3, 4, 5
    else:  # Elf32_Sym: name, value, size, info, other, shndx
        fmt, width, at_info, at_shndx, at_value, at_size = "IIIBBH", 16, 3, 5, 1, 2
    code = {i for i, s in enumerate(e.sections) if s.flags & SHF_EXECINSTR}
    section_ends = [s.addr + s.size for s in e.sections]
    functions = (STT_FUNC, STT_GNU_IFUNC)
    # About ten thousand symbols in a libc's debug file: the ones that can
    # be code are picked in one pass first (defined in a real section, at
    # a nonzero address, a function, or a NOTYPE label in a code section,
    # as assembly routines come; local labels and ARM mapping symbols ($x,
    # $d) are dropped below by name), and only their names are read.
    picked = [t for t in struct.iter_unpack(e.endian + fmt, data[: len(data) - len(data) % width])
              if t[at_value] and SHN_UNDEF < t[at_shndx] < SHN_LORESERVE
              and ((t[at_info] & 0xF) in functions
                   or t[at_info] & 0xF == STT_NOTYPE and t[at_shndx] in code)]
    ranks = {STB_GLOBAL: 0, STB_WEAK: 2}
    size = len(strtab)
    find = strtab.find
    for t in picked:
        st_name = t[0]
        if not 0 <= st_name < size:
            continue
        end = find(b"\0", st_name)
        name = strtab[st_name: end if end >= 0 else size].decode("utf-8", "replace")
        if not name or name.startswith((".L", "$")):
            continue
        if "@" in name:  # a .symver alias in .symtab: memcpy@@GLIBC_2.14 is memcpy
            name = name.split("@", 1)[0]
        info, shndx, sym_size = t[at_info], t[at_shndx], t[at_size]
        rank = ranks.get(info >> 4, 4) + (info & 0xF == STT_NOTYPE)
        # A sizeless symbol reaches to the next one, but never past its section.
        cap = 0 if sym_size else section_ends[shndx] if shndx < len(section_ends) else 0
        # (made as a tuple display: RawSymbol's own __new__ is a Python call)
        yield _new(RawSymbol, (t[at_value], sym_size, rank, name, cap))


def _cstring(table: bytes, offset: int) -> str:
    if not 0 <= offset < len(table):
        return ""
    end = table.find(b"\0", offset)
    return table[offset: end if end >= 0 else len(table)].decode("utf-8", "replace")


def _build_id(e: _Elf) -> str | None:
    for index in e.by_type(SHT_NOTE):
        data = e.data(index)
        pos = 0
        while pos + 12 <= len(data):
            namesz, descsz, ntype = struct.unpack_from(e.endian + "III", data, pos)
            pos += 12
            name = data[pos: pos + namesz]
            pos += (namesz + 3) & ~3
            desc = data[pos: pos + descsz]
            pos += (descsz + 3) & ~3
            if ntype == 3 and name.rstrip(b"\0") == b"GNU" and desc:  # NT_GNU_BUILD_ID
                return desc.hex()
    return None


def _debuglink(e: _Elf) -> tuple[str, int] | None:
    index = e.index_of(".gnu_debuglink")
    if index is None:
        return None
    data = e.data(index)
    end = data.find(b"\0")
    if end <= 0:
        return None
    name = data[:end].decode("utf-8", "replace")
    crc_at = (end + 4) & ~3
    if crc_at + 4 > len(data):
        return None
    (crc,) = struct.unpack_from(e.endian + "I", data, crc_at)
    return name, crc


# ---------------------------------------------------------------- PLT

def _got_names(e: _Elf) -> dict[int, str]:
    """GOT slot address -> name of the symbol the dynamic linker puts there."""
    names: dict[int, str] = {}
    for sh_type, with_addend in ((SHT_RELA, True), (SHT_REL, False)):
        for index in e.by_type(sh_type):
            sec = e.sections[index]
            if not 0 <= sec.link < len(e.sections):
                continue
            dynsym = e.sections[sec.link]
            if dynsym.type not in (SHT_DYNSYM, SHT_SYMTAB):
                continue
            symdata = e.data(sec.link)
            strtab = e.data(dynsym.link)
            for slot, sym_index in _relocations(e, e.data(index), with_addend):
                name = _symbol_name(e, symdata, strtab, sym_index)
                if name:
                    names.setdefault(slot, name)
    return names


def _relocations(e: _Elf, data: bytes, with_addend: bool) -> Iterator[tuple[int, int]]:
    if e.is64:
        fmt, size, shift = ("QQq" if with_addend else "QQ"), (24 if with_addend else 16), 32
    else:
        fmt, size, shift = ("IIi" if with_addend else "II"), (12 if with_addend else 8), 8
    data = data[: len(data) - len(data) % size]
    for entry in struct.iter_unpack(e.endian + fmt, data):
        yield entry[0], entry[1] >> shift


def _symbol_name(e: _Elf, symdata: bytes, strtab: bytes, index: int) -> str:
    size = 24 if e.is64 else 16
    if index <= 0 or (index + 1) * size > len(symdata):
        return ""
    (st_name,) = struct.unpack_from(e.endian + "I", symdata, index * size)
    return _cstring(strtab, st_name)


def _plt_symbols(e: _Elf) -> Iterator[RawSymbol]:
    """``name@plt`` for the entries of .plt, .plt.sec and .plt.got."""
    plt_sections: list[tuple[str, int]] = []
    for name in (".plt", ".plt.sec", ".plt.got"):
        index = e.index_of(name)
        if index is not None:
            plt_sections.append((name, index))
    if not plt_sections:
        return
    got = _got_names(e)
    if e.machine in (EM_X86_64, EM_386):
        for name, index in plt_sections:
            yield from _x86_plt(e, name, index, got)
    elif e.machine == EM_AARCH64:
        yield from _ordered_plt(e, plt_sections, header=32, entry=16)


def _x86_plt(e: _Elf, name: str, index: int, got: dict[int, str]) -> Iterator[RawSymbol]:
    # Each entry jumps through its GOT slot: `jmp *disp32(%rip)` (ff 25) on
    # x86_64, `jmp *abs32` on i386; the slot's relocation names the function.
    # Decoding the jump works for lazy .plt, IBT .plt.sec and .plt.got alike.
    sec = e.sections[index]
    data, base = e.data(index), sec.addr
    entsize = sec.entsize if sec.entsize in (8, 16) else 16
    first = entsize if name == ".plt" else 0  # PLT0 is the resolver stub
    for pos in range(first, len(data) - entsize + 1, entsize):
        entry = data[pos: pos + entsize]
        jmp = entry.find(b"\xff\x25")
        if jmp < 0 or jmp + 6 > len(entry):
            continue
        (disp,) = struct.unpack_from(e.endian + ("i" if e.is64 else "I"), entry, jmp + 2)
        slot = base + pos + jmp + 6 + disp if e.is64 else disp
        target = got.get(slot)
        if target:
            yield RawSymbol(base + pos, entsize, 0, target + "@plt")


def _ordered_plt(e: _Elf, sections: list[tuple[str, int]], header: int,
                 entry: int) -> Iterator[RawSymbol]:
    # Without a decodable jump, the i-th entry after the header belongs to
    # the i-th .rela.plt relocation (lazy binding relies on that order).
    index = dict(sections).get(".plt")
    rela = e.index_of(".rela.plt")
    if index is None or rela is None:
        return
    sec, rsec = e.sections[index], e.sections[rela]
    if not 0 <= rsec.link < len(e.sections):
        return
    symdata = e.data(rsec.link)
    strtab = e.data(e.sections[rsec.link].link)
    for i, (_slot, sym_index) in enumerate(_relocations(e, e.data(rela), True)):
        start = sec.addr + header + i * entry
        if start + entry > sec.addr + sec.size:
            break
        name = _symbol_name(e, symdata, strtab, sym_index)
        if name:
            yield RawSymbol(start, entry, 0, name + "@plt")
