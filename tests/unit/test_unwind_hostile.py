"""Hostile input never raises: random and mutated objects, random registers and stacks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cfi_builder import (LOAD_BIAS, PLT_EXPR, RBP, RBX, RIP, RSP, TEXT, CieSpec, Cfa, ElfSpec,
                         FdeSpec, Op, build_elf, load, rt)
from qtools.daemon.unwind import Mappings, ObjectCFI, UnwindResult, Unwinder

REASONS = {"root", "end-of-stack", "no-cfi", "bad-frame", "max-frames", "no-regs"}

GOOD = build_elf(ElfSpec(
    [FdeSpec(TEXT + 0x100 * i, 0x100, Cfa.advance(1) + Cfa.def_cfa_offset(16) + Cfa.offset(RBP, 2)
             + Cfa.advance(2) + Cfa.def_cfa_register(RBP) + Cfa.remember_state
             + Cfa.advance(3) + Cfa.def_cfa(RSP, 8) + Cfa.restore_state
             + Cfa.expression(RBX, Op.breg(RSP, 16)))
     for i in range(6)]
    + [FdeSpec(TEXT + 0x700, 0x40, Cfa.def_cfa_expression(PLT_EXPR)),
       FdeSpec(TEXT + 0x800, 0x40, Cfa.undefined(RIP)),
       FdeSpec(TEXT + 0x900, 0x40, Cfa.def_cfa_expression(Op.breg(RSP, 160) + Op.deref)
               + Cfa.expression(RIP, Op.breg(RSP, 168)) + Cfa.expression(RSP, Op.breg(RSP, 160)),
               cie=1)],
    cies=[CieSpec(), CieSpec(signal=True)], sections=True))
CFI_START = 0x9000  # where build_elf puts .eh_frame_hdr / .eh_frame

u64 = st.integers(min_value=0, max_value=2**64 - 1)
text_pc = st.integers(min_value=rt(TEXT), max_value=rt(TEXT + 0xA00))


def check(result: UnwindResult, max_frames: int = 127) -> None:
    assert isinstance(result, UnwindResult)
    assert result.reason in REASONS
    assert len(result.frames) <= max_frames
    assert not result.complete or result.reason == "root"


def unwind_both(space_factory, regs, stack) -> UnwindResult:
    fast = Unwinder().unwind(space_factory(), regs, stack)
    generic = Unwinder(fast=False).unwind(space_factory(), regs, stack)
    check(fast)
    check(generic)
    assert fast == generic
    return fast


def x86(pc: int, sp: int, bp: int, rbx: int = 0) -> tuple[int, ...]:
    regs = [0] * 20
    regs[8], regs[7], regs[6], regs[1] = pc, sp, bp, rbx
    return tuple(regs)


@given(st.binary(max_size=4096))
@settings(max_examples=300, deadline=None)
def test_random_bytes_as_an_object(data):
    cfi = ObjectCFI.from_bytes(data)
    for vaddr in (0, 0x40, 0x1000, 0x1234):
        cfi.row_at(vaddr)
        cfi.rule_at(vaddr, True)
    space = Mappings()
    space.add(LOAD_BIAS, LOAD_BIAS + 0x10000, 0, cfi)
    check(Unwinder().unwind(space, x86(LOAD_BIAS + 0x1000, 0x7000, 0x7010), bytes(64)))


@given(st.lists(st.tuples(st.integers(min_value=CFI_START, max_value=len(GOOD) - 1),
                          st.integers(min_value=0, max_value=255)), min_size=1, max_size=12),
       text_pc, st.binary(min_size=0, max_size=512))
@settings(max_examples=400, deadline=None)
def test_mutated_cfi(mutations, pc, stack):
    data = bytearray(GOOD)
    for off, value in mutations:
        data[off] = value
    image = bytes(data)
    unwind_both(lambda: load(image)[0], x86(pc, 0x7FFD_0000_0000, 0x7FFD_0000_0040), stack)


@given(text_pc, st.integers(min_value=0x7FFD_0000_0000, max_value=0x7FFD_0000_0100), u64, u64,
       st.lists(st.one_of(u64, text_pc, st.integers(min_value=0x7FFD_0000_0000,
                                                      max_value=0x7FFD_0000_0400)), max_size=128))
@settings(max_examples=400, deadline=None)
def test_random_registers_and_stacks(pc, sp, bp, rbx, words):
    stack = b"".join(w.to_bytes(8, "little") for w in words)
    unwind_both(lambda: load(GOOD)[0], x86(pc, sp, bp, rbx), stack)


@given(st.lists(u64, min_size=0, max_size=25), st.binary(max_size=64))
@settings(max_examples=100, deadline=None)
def test_wrong_register_counts(regs, stack):
    check(Unwinder().unwind(load(GOOD)[0], regs, stack))
