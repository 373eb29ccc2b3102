"""qformat.elfhdr: the ELF header reader the collector and q-view share."""

from __future__ import annotations

import io
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elftools.elf.elffile import ELFFile
from qtools.qformat.objects.elfhdr import (SHDR64, ElfHeaderError, Segment, offset_of,
                                           read_file_header, read_header, read_sections, vaddr_of)

OBJECTS = ["/bin/sh", sys.executable]
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


@pytest.mark.parametrize("path", OBJECTS)
def test_segments_are_those_pyelftools_reads(path):
    with open(path, "rb") as f:
        data = f.read()
        expected = [Segment(s["p_offset"], s["p_vaddr"], s["p_filesz"])
                    for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]
        assert list(read_file_header(f).loads) == expected
    header = read_header(data)
    assert list(header.loads) == expected and header.is64 and header.endian == "<"
    assert header.shnum > 0


def _elf32(endian: str, loads: list[tuple[int, int, int]]) -> bytes:
    """A 32-bit ELF header and program headers, nothing else."""
    ident = b"\x7fELF" + bytes([1, 1 if endian == "<" else 2, 1]) + bytes(9)
    ehdr = struct.pack(endian + "16sHHIIIIIHHHHHH", ident, 2, 40, 1, 0, 52, 0, 0, 52, 32,
                       len(loads), 40, 0, 0)
    phdrs = b"".join(struct.pack(endian + "8I", 1, off, vaddr, vaddr, size, size, 5, 4096)
                     for off, vaddr, size in loads)
    return ehdr + phdrs


@pytest.mark.parametrize("endian", ["<", ">"])
def test_32_bit_objects_of_either_byte_order(endian):
    header = read_header(_elf32(endian, [(0, 0x10000, 0x800), (0x800, 0x20800, 0x100)]))
    assert not header.is64 and header.endian == endian and header.machine == 40
    assert header.loads == (Segment(0, 0x10000, 0x800), Segment(0x800, 0x20800, 0x100))
    assert vaddr_of(header.loads, 0x810) == 0x20810 and vaddr_of(header.loads, 0x900) is None
    assert offset_of(header.loads, 0x10004) == 4 and offset_of(header.loads, 0x30000) is None


@pytest.mark.parametrize("data, words", [
    (b"", "not an ELF"), (b"MZ" + bytes(100), "not an ELF"),
    (b"\x7fELF\x03\x01" + bytes(60), "class"),
    (b"\x7fELF\x02\x01\x01" + bytes(20), "too short"),
])
def test_what_is_no_elf_header_is_refused(data, words):
    with pytest.raises(ElfHeaderError, match=words):
        read_header(data)


def test_truncated_program_headers_are_refused():
    data = _elf32("<", [(0, 0, 16)] * 4)
    with pytest.raises(ElfHeaderError, match="truncated"):
        read_header(data[:-1])
    with pytest.raises(ElfHeaderError, match="truncated"):
        read_file_header(io.BytesIO(data[:-1]))


@given(st.binary(max_size=300), st.sampled_from([b"\x7fELF\x02\x01", b"\x7fELF\x01\x02"]))
@settings(max_examples=300)
def test_random_bytes_raise_only_elf_header_error(tail, ident):
    try:
        read_header(ident + tail)
    except ElfHeaderError:
        pass


@pytest.mark.parametrize("path", OBJECTS + [LIBC])
def test_sections_are_those_pyelftools_reads(path):
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        expected = [(s.name, s["sh_type"], s["sh_flags"], s["sh_addr"], s["sh_offset"],
                     s["sh_size"], s["sh_link"], s["sh_info"], s["sh_entsize"])
                    for s in ELFFile(f).iter_sections()]
        got = read_sections(f, size)
    assert len(got) == len(expected) > 10
    by_type = {"SHT_NULL": 0, "SHT_PROGBITS": 1, "SHT_SYMTAB": 2, "SHT_STRTAB": 3,
               "SHT_RELA": 4, "SHT_NOTE": 7, "SHT_NOBITS": 8, "SHT_DYNSYM": 11}
    for g, (name, sh_type, *rest) in zip(got, expected):
        assert (g.name, *g[2:]) == (name, *rest)
        if sh_type in by_type:
            assert g.type == by_type[sh_type], name


def _with_sections(count: int, shoff_delta: int = 0, cut: int = 0) -> bytes:
    """A 64-bit ELF header whose section table says ``count`` sections."""
    names = b"\0.text\0.shstrtab\0"
    table = SHDR64.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    table += SHDR64.pack(1, 1, 6, 0x1000, 0, 16, 0, 0, 16, 0)
    shoff = 64 + len(names)
    table += SHDR64.pack(7, 3, 0, 0, 64, len(names), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 0, shoff + shoff_delta, 0, 64,
                       56, 0, 64, count, 2)
    data = ehdr + names + table
    return data[:len(data) - cut] if cut else data


def test_sections_are_named_and_damage_means_none():
    data = _with_sections(3)
    got = read_sections(io.BytesIO(data), len(data))
    assert [(s.name, s.type, s.addr) for s in got] == [("", 0, 0), (".text", 1, 0x1000),
                                                       (".shstrtab", 3, 0)]
    for bad in (_with_sections(3, cut=1), _with_sections(1 << 15), _with_sections(3, 1 << 40)):
        assert read_sections(io.BytesIO(bad), len(bad)) == []
    with pytest.raises(ElfHeaderError):
        read_sections(io.BytesIO(b"MZ" + bytes(80)), 82)


@given(st.binary(max_size=400))
@settings(max_examples=300)
def test_random_section_tables_raise_nothing_but_elf_header_error(tail):
    data = _with_sections(3)[:64] + tail
    try:
        got = read_sections(io.BytesIO(data), len(data))
    except ElfHeaderError:
        return
    assert all(0 <= s.offset for s in got)
