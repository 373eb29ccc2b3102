"""The DWARF expression evaluator used by CFI rules, and its reduction of
PLT-style CFA expressions to plain SP + offset rules."""

from __future__ import annotations

import pytest

from cfi_builder import PLT_EXPR, RBP, RIP, RSP, Op, uleb
from qtools.daemon.unwind.unwinderrors import CfiError
from qtools.daemon.unwind.expr import MemoryUnavailable, evaluate, linearize

M = 2**64 - 1
REGS = {RSP: 0x7FFD_0000_1000, RBP: 0x7FFD_0000_2000, RIP: 0x40_1234, 3: 5}
MEM = {0x7FFD_0000_10A0: 0x7FFD_0000_3000, 0x7FFD_0000_3000: 42}


def ev(expr: bytes, initial: int | None = None) -> int:
    return evaluate(expr, REGS.get, MEM.get, initial)


@pytest.mark.parametrize("expr, want", [
    (Op.lit(7), 7),
    (Op.breg(RSP, 8), REGS[RSP] + 8),
    (Op.breg(RBP, -16), REGS[RBP] - 16),
    (b"\x92" + uleb(RSP) + b"\x10", REGS[RSP] + 16),                 # bregx
    (Op.constu(1000) + Op.consts(-1) + Op.plus, 999),
    (b"\x08\xff" + b"\x09\xff" + Op.plus, 254),                      # const1u 255 + const1s -1
    (b"\x0a\x34\x12\x0b\xff\xff" + Op.minus, 0x1235),                # const2u - const2s(-1)
    (b"\x0c\x78\x56\x34\x12\x0d\x00\x00\x00\x80" + Op.xor, (0x12345678 ^ 0xFFFFFFFF80000000)),
    (b"\x0e" + (2**63).to_bytes(8, "little") + Op.lit(1) + Op.shr, 2**62),
    (b"\x0f" + (-8).to_bytes(8, "little", signed=True) + Op.lit(1) + Op.shra, M - 3),
    (Op.lit(6) + Op.lit(4) + Op.and_ + Op.lit(1) + Op.or_, 5),
    (Op.lit(7) + Op.lit(2) + Op.mod, 1),
    (Op.consts(-7) + Op.lit(2) + Op.div, M - 2),                      # -3, truncated like C
    (Op.lit(6) + Op.lit(7) + Op.mul + Op.neg, M - 41),
    (Op.lit(0) + Op.not_, M),
    (Op.consts(-5) + Op.abs_, 5),
    (Op.lit(1) + Op.lit(2) + Op.swap + Op.minus, 1),
    (Op.lit(1) + Op.lit(2) + Op.over + Op.plus + Op.plus, 4),
    (Op.lit(1) + Op.lit(2) + Op.lit(3) + Op.rot, 2),                 # [1 2 3] -> [3 1 2]
    (Op.lit(1) + Op.lit(2) + Op.lit(3) + Op.rot + Op.drop + Op.drop, 3),
    (Op.lit(9) + Op.dup + Op.plus, 18),
    (Op.lit(1) + Op.lit(2) + b"\x15\x01" + Op.plus + Op.plus, 4),     # pick 1
    (Op.consts(-1) + Op.lit(1) + Op.lt, 1),                           # signed compare
    (Op.consts(-1) + Op.lit(1) + Op.gt, 0),
    (Op.lit(3) + Op.lit(3) + Op.eq + Op.lit(3) + Op.lit(4) + Op.ne + Op.plus, 2),
    (Op.lit(3) + Op.lit(3) + Op.ge + Op.lit(3) + Op.lit(4) + Op.le + Op.plus, 2),
    (Op.lit(1) + Op.plus_uconst(300), 301),
    (Op.lit(1) + Op.skip(1) + Op.lit(5) + Op.lit(2) + Op.plus, 3),   # skip over lit5
    (Op.lit(0) + Op.bra(1) + Op.lit(5) + Op.lit(2), 2),              # not taken: stack [5, 2]
    (Op.lit(1) + Op.bra(1) + Op.lit(5) + Op.lit(2), 2),
    (Op.breg(RSP, 0xA0) + Op.deref + Op.deref, 42),                  # signal frame style
    (Op.breg(RSP, 0xA0) + b"\x94\x01", 0x00),                         # deref_size 1 (low byte)
    (Op.nop + Op.lit(3), 3),
])
def test_evaluate(expr, want):
    assert ev(expr) == want


def test_initial_value_is_pushed_first():
    assert ev(Op.lit(8) + Op.plus, initial=100) == 108


@pytest.mark.parametrize("expr", [
    b"",                                   # empty result
    Op.plus,                               # underflow
    Op.lit(1) + Op.lit(0) + Op.div,        # division by zero
    Op.lit(1) + Op.lit(0) + Op.mod,
    Op.breg(9, 0),                         # unknown register
    b"\x50",                               # DW_OP_reg0: a location, not a value
    b"\x03" + bytes(8),                    # DW_OP_addr needs relocation
    b"\xe0",                               # vendor op
    Op.skip(-3),                           # endless loop
    Op.skip(100),                          # branch out of the expression
    b"\x0e\x01\x02",                       # truncated constant
    Op.lit(1) + b"\x15\x05",               # pick beyond the stack
    Op.lit(0) + b"\x94\x09",               # deref_size 9
    Op.lit(1) * 70,                        # stack too deep
])
def test_malformed_expressions_raise_cfierror(expr):
    with pytest.raises(CfiError):
        ev(expr)


def test_reads_outside_the_copy():
    with pytest.raises(MemoryUnavailable):
        ev(Op.breg(RSP, 8) + Op.deref)


@pytest.mark.parametrize("pc_low, off", [(0, 8), (10, 8), (11, 16), (15, 16)])
def test_plt_expression_reduces_to_sp_plus_constant(pc_low, off):
    assert linearize(PLT_EXPR, RSP, RBP, RIP, 0x401020 + pc_low) == (RSP, off)


@pytest.mark.parametrize("expr, want", [
    (Op.breg(RSP, 24), (RSP, 24)),
    (Op.breg(RBP, 16), (RBP, 16)),
    (Op.breg(RBP, -8) + Op.deref, None),          # reads memory
    (Op.breg(3, 8), None),                        # another register
    (Op.breg(RSP, 0) + Op.breg(RBP, 0) + Op.plus, None),
    (Op.breg(RIP, 0), None),                      # no base register
    (Op.breg(RSP, 0) + Op.breg(RIP, 0) + Op.plus, None),   # depends on the absolute pc
    (Op.breg(RSP, 0) + Op.lit(15) + Op.and_, None),        # not one-for-one with SP
    (b"\xff", None),
])
def test_linearize(expr, want):
    assert linearize(expr, RSP, RBP, RIP, 0x401000) == want
