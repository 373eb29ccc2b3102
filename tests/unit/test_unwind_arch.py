"""Register tables per architecture, and aarch64 unwinding on synthetic data
(link register in leaf frames, RA column 30, frame records)."""

from __future__ import annotations

import pytest

from cfi_builder import TEXT, CieSpec, Cfa, ElfSpec, FdeSpec, Stack, build_elf, load, rt
from qtools.daemon.unwind import AARCH64, X86_64, UnwindResult, Unwinder, arch_by_name
from qtools.daemon.unwind.regs import sample_positions


def test_x86_64_table():
    pos = sample_positions(X86_64, 0xFF0FFF)
    assert len(pos) == 20 == bin(X86_64.sample_mask).count("1")
    assert (pos[16], pos[7], pos[6]) == (8, 7, 6)           # IP, SP, BP in the sample array
    assert pos[0] == 0 and pos[3] == 1 and pos[2] == 2 and pos[1] == 3   # AX BX CX DX order
    assert [pos[8 + i] for i in range(8)] == list(range(12, 20))       # R8-R15 after SS
    assert (X86_64.sp, X86_64.fp, X86_64.ra_column, X86_64.lr) == (7, 6, 16, None)
    assert X86_64.perf_index_of(16) == 8 and X86_64.perf_index_of(99) is None


def test_aarch64_table():
    pos = sample_positions(AARCH64, AARCH64.sample_mask)
    assert len(pos) == 33 and all(pos[i] == i for i in range(33))
    assert (AARCH64.sp, AARCH64.fp, AARCH64.lr, AARCH64.ra_column) == (31, 29, 30, 30)
    assert (AARCH64.code_align, AARCH64.data_align, AARCH64.cie_cfa_offset) == (4, -8, 0)
    minimal = (1 << 29) | (1 << 30) | (1 << 31) | (1 << 32)  # FP, LR, SP, PC
    assert sample_positions(AARCH64, minimal) == {29: 0, 30: 1, 31: 2, 32: 3}


def test_unknown_arch_and_masks_without_sp():
    with pytest.raises(ValueError):
        arch_by_name("sparc")
    with pytest.raises(ValueError):
        Unwinder("x86_64", regs_mask=0xFF)      # no SP, no IP


# aarch64: leaf keeps the RA in x30; CALLER does "stp x29, x30, [sp, #-32]!; mov x29, sp"
A_CIE = CieSpec(insns=Cfa.def_cfa(31, 0), code_align=4, data_align=-8, ra=30)
A_LEAF, A_CALLER, A_ROOT = TEXT, TEXT + 0x100, TEXT + 0x200
A_FDES = [
    FdeSpec(A_LEAF, 0x40),
    FdeSpec(A_CALLER, 0x40, Cfa.advance(1) + Cfa.def_cfa_offset(32) + Cfa.offset(29, 4)
            + Cfa.offset(30, 3) + Cfa.advance(1) + Cfa.def_cfa_register(29)),
    FdeSpec(A_ROOT, 0x40, Cfa.undefined(30)),
]
SP0 = 0xFFFF_F000_0000


def a64_regs(pc: int, sp: int, fp: int, lr: int) -> tuple[int, ...]:
    regs = [0] * 33
    regs[29], regs[30], regs[31], regs[32] = fp, lr, sp, pc
    return tuple(regs)


@pytest.mark.parametrize("fast", [True, False])
def test_aarch64_leaf_with_return_address_in_lr(fast):
    space, cfi = load(ElfSpec(A_FDES, cies=[A_CIE], machine=183))
    assert cfi.arch is AARCH64
    st = Stack(SP0, 256).put(SP0, 0).put(SP0 + 8, rt(A_ROOT + 0x14))    # CALLER's frame record
    got = Unwinder("aarch64", fast=fast).unwind(
        space, a64_regs(rt(A_LEAF + 8), SP0, SP0, rt(A_CALLER + 0x24)), st.bytes())
    assert got == UnwindResult((rt(A_LEAF + 8), rt(A_CALLER + 0x24), rt(A_ROOT + 0x14)), True, "root")


@pytest.mark.parametrize("fast", [True, False])
def test_aarch64_non_leaf_frame_needs_a_saved_lr(fast):
    # a caller frame whose rule says "RA still in LR" cannot be unwound: LR was clobbered
    space, _ = load(ElfSpec(A_FDES, cies=[A_CIE], machine=183))
    st = Stack(SP0, 64)
    got = Unwinder("aarch64", fast=fast).unwind(
        space, a64_regs(rt(A_LEAF + 8), SP0, SP0, rt(A_LEAF + 0x14)), st.bytes())
    assert got == UnwindResult((rt(A_LEAF + 8), rt(A_LEAF + 0x14)), False, "bad-frame")


def test_aarch64_frame_pointer_fallback():
    space, _ = load(build_elf(ElfSpec([], hdr="none", machine=183)))
    fp1, fp2 = SP0 + 0x20, SP0 + 0x60
    st = Stack(SP0, 256).put(fp1, fp2).put(fp1 + 8, rt(TEXT + 0x44)).put(fp2, 0).put(fp2 + 8, rt(TEXT + 0x88))
    got = Unwinder("aarch64").unwind(space, a64_regs(rt(TEXT + 4), SP0, fp1, 0), st.bytes())
    assert got == UnwindResult((rt(TEXT + 4), rt(TEXT + 0x44), rt(TEXT + 0x88)), True, "root")


def test_objects_of_another_architecture_are_not_used():
    space, _ = load(ElfSpec(A_FDES, cies=[A_CIE], machine=183))
    regs = [0] * 20
    regs[8], regs[7], regs[6] = rt(A_LEAF + 8), SP0, 0
    got = Unwinder("x86_64").unwind(space, regs, Stack(SP0, 64).bytes())
    assert got == UnwindResult((rt(A_LEAF + 8),), False, "no-cfi")   # FP fallback, rbp 0
