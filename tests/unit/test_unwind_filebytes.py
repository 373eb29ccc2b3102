"""Unwind tables read from files a user may cut at any moment: read into
memory within a budget and a deadline, never mapped. Every file here is a
real file; the cuts are real truncations (a mapped page past a file's new
end would kill this very test process with SIGBUS)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from cfi_builder import TEXT, Cfa, ElfSpec, FdeSpec, build_elf
from qtools.daemon.unwind import ObjectCFI
from qtools.daemon.unwind.filebytes import READ_BUDGET, FileBytes
from qtools.daemon.unwind.objcfi import HDR_BYTES

MiB = 1 << 20
FDES = [FdeSpec(TEXT + 0x100 * i, 0x80, Cfa.advance(1) + Cfa.def_cfa_offset(16 + 8 * i))
        for i in range(40)]


def _cfa(cfi: ObjectCFI, pc: int) -> tuple[int, int] | None:
    row = cfi.row_at(pc)
    return None if row is None else (row.cfa_reg, row.cfa_offset)


def _object(tmp_path: Path, **spec: object) -> Path:
    path = tmp_path / "obj"
    path.write_bytes(build_elf(ElfSpec(FDES, **spec)))  # type: ignore[arg-type]
    return path


@pytest.fixture
def fd_of(request):
    """fd_of(path): a read-only descriptor, closed after the test."""
    fds: list[int] = []
    request.addfinalizer(lambda: [os.close(fd) for fd in fds])

    def _open(path: Path) -> int:
        fds.append(os.open(path, os.O_RDONLY))
        return fds[-1]
    return _open


def test_reads_stop_at_the_files_end_as_it_is_now(tmp_path, fd_of):
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 64)  # 16 KiB
    src = FileBytes(fd_of(path))
    assert bytes(src.read(100, 10)) == bytes(range(100, 110))
    os.truncate(path, 4096)  # cut after it was opened: it said 16 KiB then
    assert len(src.read(4000, 8192)) == 96
    assert src.read(8192, 100) == b"" and src.read(-1, 10) == b""
    assert src.read_bytes == 10 + 96


def test_a_region_over_the_budget_is_not_read_at_all(tmp_path, fd_of):
    path = tmp_path / "sparse"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # a 1 GiB hole: costs nothing to make
    src = FileBytes(fd_of(path), budget=8 * MiB)
    assert src.read(0, 16 * MiB) == b"" and src.read_bytes == 0
    assert len(src.read(0, 6 * MiB)) == 6 * MiB
    assert src.read(0, 3 * MiB) == b""  # 2 MiB of the budget left
    assert src.read_bytes == 6 * MiB


def test_nothing_is_read_past_the_deadline(tmp_path, fd_of):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)
    assert FileBytes(fd_of(path), seconds=0).read(0, 4096) == b""
    assert FileBytes(fd_of(path), seconds=60).read(0, 4096) == b"x" * 4096


@pytest.mark.parametrize("spec", [{}, {"hdr": "none", "sections": True}, {"sections": True},
                                  {"hdr": "no-table"}, {"debug_frame": True}])
def test_tables_read_once_outlive_a_cut_of_the_file(tmp_path, fd_of, spec):
    """The unwinder keeps what it read: cutting the file afterwards (to
    nothing) changes no rule, and faults nobody."""
    path = _object(tmp_path, **spec)
    cfi = ObjectCFI.from_fd(fd_of(path))
    os.truncate(path, 0)
    assert cfi.fde_count == 40 and 0 < cfi.bytes_read < path.stat().st_blksize * 8
    for i in range(40):
        assert _cfa(cfi, TEXT + 0x100 * i + 1) == (7, 16 + 8 * i)


def test_a_file_cut_anywhere_gives_the_rules_that_were_read(tmp_path, fd_of):
    """Cut at every 61st byte before it is read: whatever is left gives no
    rule or the right one, never an exception."""
    full = build_elf(ElfSpec(FDES, sections=True))
    path = tmp_path / "obj"
    found = 0
    for cut in range(0, len(full), 61):
        path.write_bytes(full)
        fd = fd_of(path)
        os.truncate(path, cut)
        cfi = ObjectCFI.from_fd(fd)
        for i in range(40):
            got = _cfa(cfi, TEXT + 0x100 * i + 1)
            assert got in (None, (7, 16 + 8 * i))
            found += got is not None
            cfi.rule_at(TEXT + 0x100 * i + 1, False)
    assert found  # the cuts past the tables leave them whole


def _section_size_field(data: bytes, index: int) -> int:
    """File offset of section ``index``'s sh_size."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    return shoff + 64 * index + 32


def test_a_section_claimed_huge_is_refused_unread(tmp_path, fd_of):
    """A (sparse) file whose section headers say `.eh_frame` holds 1 GiB:
    the collector reads none of it, not 1 GiB."""
    data = bytearray(build_elf(ElfSpec(FDES, hdr="none", sections=True)))
    struct.pack_into("<Q", data, _section_size_field(data, 2), 1 << 30)
    path = tmp_path / "huge"
    path.write_bytes(data)
    os.truncate(path, (1 << 30) + len(data))
    cfi = ObjectCFI.from_fd(fd_of(path))
    assert not cfi.has_cfi and cfi.bytes_read < MiB


def test_a_search_table_claimed_huge_is_read_up_to_its_cap(tmp_path, fd_of):
    data = bytearray(build_elf(ElfSpec(FDES)))
    # PT_GNU_EH_FRAME is the second program header: its p_filesz at 64 + 56 + 32
    struct.pack_into("<Q", data, 64 + 56 + 32, 1 << 30)
    path = tmp_path / "huge-hdr"
    path.write_bytes(data)
    os.truncate(path, (1 << 30) + len(data))
    cfi = ObjectCFI.from_fd(fd_of(path))
    assert cfi.fde_count == 40  # its real entries still count
    assert cfi.bytes_read <= HDR_BYTES + len(data) < READ_BUDGET
