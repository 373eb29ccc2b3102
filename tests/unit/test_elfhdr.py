"""qformat.elfhdr: the ELF header reader the collector and q-view share."""

from __future__ import annotations

import io
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elftools.elf.elffile import ELFFile
from qtools.qformat.elfhdr import (ElfHeaderError, Segment, offset_of, read_file_header,
                                   read_header, vaddr_of)

OBJECTS = ["/bin/sh", sys.executable]


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
