"""A small DWARF expression evaluator for CFI (DW_CFA_*expression rules).

CFI expressions are short: the PLT stubs' CFA (rsp + 8 + ((rip & 15) >= 11) * 8),
signal trampolines' "breg7 160; deref" and stack-realignment rules
"breg6 -8; deref". Registers and memory come from callbacks, so the same code
evaluates against a real stack copy or symbolically (see `linearize`).
Arithmetic is on u64 like a 64-bit target; comparisons and shra are signed.
Anything malformed or not meaningful for CFI raises CfiError.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from qtools.qformat.objects.ehframe import uleb, sleb
from .unwinderrors import CfiError

MASK64 = (1 << 64) - 1
_MAX_STEPS = 1000   # DW_OP_bra/skip can loop
_MAX_STACK = 64

RegFn = Callable[[int], "int | None"]
ReadFn = Callable[[int], "int | None"]

_CONSTS = {
    0x08: struct.Struct("<B"), 0x09: struct.Struct("<b"), 0x0A: struct.Struct("<H"),
    0x0B: struct.Struct("<h"), 0x0C: struct.Struct("<I"), 0x0D: struct.Struct("<i"),
    0x0E: struct.Struct("<Q"), 0x0F: struct.Struct("<q"),
}
_S16 = struct.Struct("<h")


class MemoryUnavailable(CfiError):
    """An expression dereferenced an address outside the copied stack."""


def _signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def _binary(op: int, a: int, b: int) -> int:
    """a op b where b was on top of the stack."""
    if op == 0x1A:
        return a & b
    if op == 0x1B:
        sb = _signed(b)
        if sb == 0:
            raise CfiError("DW_OP_div by zero")
        sa = _signed(a)
        q = abs(sa) // abs(sb)
        return (-q if (sa < 0) != (sb < 0) else q) & MASK64
    if op == 0x1C:
        return (a - b) & MASK64
    if op == 0x1D:
        if b == 0:
            raise CfiError("DW_OP_mod by zero")
        return a % b
    if op == 0x1E:
        return (a * b) & MASK64
    if op == 0x21:
        return a | b
    if op == 0x22:
        return (a + b) & MASK64
    if op == 0x24:
        return (a << b) & MASK64 if b < 64 else 0
    if op == 0x25:
        return a >> b if b < 64 else 0
    if op == 0x26:
        return (_signed(a) >> min(b, 63)) & MASK64
    if op == 0x27:
        return a ^ b
    sa, sb = _signed(a), _signed(b)
    if op == 0x29:
        return int(sa == sb)
    if op == 0x2A:
        return int(sa >= sb)
    if op == 0x2B:
        return int(sa > sb)
    if op == 0x2C:
        return int(sa <= sb)
    if op == 0x2D:
        return int(sa < sb)
    return int(sa != sb)  # 0x2E


_BINARY = frozenset((0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27,
                     0x29, 0x2A, 0x2B, 0x2C, 0x2D, 0x2E))


def evaluate(expr: bytes, reg: RegFn, read: ReadFn, initial: int | None = None) -> int:
    """Value on top of the stack after running expr.

    reg(n) gives DWARF register n (None: unknown -> CfiError); read(addr) the
    u64 at addr (None: unavailable -> MemoryUnavailable). `initial` is pushed
    first (the CFA, for DW_CFA_expression / val_expression).
    """
    stack: list[int] = [] if initial is None else [initial & MASK64]
    pos, end, steps = 0, len(expr), 0
    while pos < end:
        steps += 1
        if steps > _MAX_STEPS or len(stack) > _MAX_STACK:
            raise CfiError("DWARF expression too long")
        op = expr[pos]
        pos += 1
        if 0x30 <= op <= 0x4F:                      # lit0..lit31
            stack.append(op - 0x30)
        elif 0x70 <= op <= 0x8F or op == 0x92:      # breg0..31, bregx
            if op == 0x92:
                regno, pos = uleb(expr, pos, end)
            else:
                regno = op - 0x70
            off, pos = sleb(expr, pos, end)
            value = reg(regno)
            if value is None:
                raise CfiError(f"expression reads unknown register {regno}")
            stack.append((value + off) & MASK64)
        elif op in _BINARY:
            if len(stack) < 2:
                raise CfiError("DWARF stack underflow")
            b = stack.pop()
            stack.append(_binary(op, stack.pop(), b))
        elif op in _CONSTS:
            st = _CONSTS[op]
            if pos + st.size > end:
                raise CfiError("truncated constant")
            stack.append(st.unpack_from(expr, pos)[0] & MASK64)
            pos += st.size
        elif op == 0x10:                            # constu
            v, pos = uleb(expr, pos, end)
            stack.append(v & MASK64)
        elif op == 0x11:                            # consts
            v, pos = sleb(expr, pos, end)
            stack.append(v & MASK64)
        elif op == 0x23:                            # plus_uconst
            v, pos = uleb(expr, pos, end)
            if not stack:
                raise CfiError("DWARF stack underflow")
            stack.append((stack.pop() + v) & MASK64)
        elif op in (0x06, 0x94):                    # deref, deref_size
            size = 8
            if op == 0x94:
                if pos >= end:
                    raise CfiError("truncated deref_size")
                size = expr[pos]
                pos += 1
                if not 1 <= size <= 8:
                    raise CfiError(f"deref_size {size}")
            if not stack:
                raise CfiError("DWARF stack underflow")
            addr = stack.pop()
            value = read(addr)
            if value is None:
                raise MemoryUnavailable(f"expression reads {addr:#x} outside the stack copy")
            stack.append(value & ((1 << (8 * size)) - 1))
        elif op in (0x12, 0x13, 0x14, 0x16, 0x17, 0x15, 0x19, 0x1F, 0x20):
            _stack_op(op, stack, expr, pos)
            if op == 0x15:
                pos += 1
        elif op in (0x28, 0x2F):                    # bra, skip
            if pos + 2 > end:
                raise CfiError("truncated branch")
            (rel,) = _S16.unpack_from(expr, pos)
            pos += 2
            take = True
            if op == 0x28:
                if not stack:
                    raise CfiError("DWARF stack underflow")
                take = stack.pop() != 0
            if take:
                pos += rel
                if not 0 <= pos <= end:
                    raise CfiError("branch outside the expression")
        elif op == 0x96:                            # nop
            continue
        else:
            raise CfiError(f"unsupported DWARF op {op:#x} in CFI")
    if not stack:
        raise CfiError("DWARF expression left an empty stack")
    return stack[-1]


def _stack_op(op: int, stack: list[int], expr: bytes, pos: int) -> None:
    """dup, drop, over, pick, swap, rot, abs, neg, not: in place."""
    need = {0x12: 1, 0x13: 1, 0x14: 2, 0x16: 2, 0x17: 3, 0x15: 0, 0x19: 1, 0x1F: 1, 0x20: 1}[op]
    if len(stack) < need:
        raise CfiError("DWARF stack underflow")
    if op == 0x12:
        stack.append(stack[-1])
    elif op == 0x13:
        stack.pop()
    elif op == 0x14:
        stack.append(stack[-2])
    elif op == 0x15:
        if pos >= len(expr) or expr[pos] >= len(stack):
            raise CfiError("bad DW_OP_pick")
        stack.append(stack[-1 - expr[pos]])
    elif op == 0x16:
        stack[-1], stack[-2] = stack[-2], stack[-1]
    elif op == 0x17:
        stack[-1], stack[-2], stack[-3] = stack[-2], stack[-3], stack[-1]
    elif op == 0x19:
        stack.append(abs(_signed(stack.pop())) & MASK64)
    elif op == 0x1F:
        stack.append(-stack.pop() & MASK64)
    else:
        stack.append(~stack.pop() & MASK64)


class _NotLinear(Exception):
    pass


def linearize(expr: bytes, sp: int, fp: int, ip: int, ip_value: int) -> tuple[int, int] | None:
    """Reduce a CFA expression to (base register, offset) if it is base + constant.

    The PLT stubs' expression only reads rsp and rip; with rip known (the pc of
    the lookup) it is rsp + 8 or rsp + 16, which the fast path handles like
    any other rule. The expression is evaluated at several base values and,
    to catch a use of the absolute pc, at a pc moved by a multiple of 4 GiB
    (load biases only move pcs by whole pages). None if it reads memory,
    another register, or does not move one-for-one with its base.
    """
    used: set[int] = set()

    def no_read(addr: int) -> int | None:
        raise _NotLinear

    def probe(base_value: int, pc: int) -> int:
        def reg(n: int) -> int | None:
            used.add(n)
            if n == ip:
                return pc
            if n in (sp, fp):
                return base_value
            raise _NotLinear
        return evaluate(expr, reg, no_read)

    try:
        b1, b2 = 0x7FF0_0000_0000, 0x7FFF_FF00_1230
        r1 = probe(b1, ip_value)
        if not used & {sp, fp} or (sp in used and fp in used):
            return None
        base = sp if sp in used else fp
        r2 = probe(b2, ip_value)
        r3 = probe(b1, ip_value + (1 << 32))
    except (_NotLinear, CfiError):
        return None
    off = r1 - b1
    if r2 - b2 != off or r3 - b1 != off or not -(1 << 31) <= off < 1 << 31:
        return None
    return base, off
