"""Compiled rules: what the per-sample loops read for one pc.

A compiled rule is a plain 5-tuple `(kind, cfa_offset, ra_offset, fp_offset, plan)`
because tuple unpacking is the cheapest thing CPython does:

- SP_BASED / FP_BASED: CFA = SP (or frame pointer) + cfa_offset, the return
  address is at CFA + ra_offset, the caller's frame pointer at CFA + fp_offset
  (None: unchanged), the caller's SP is the CFA. This covers nearly every pc
  of compiled code, PLT stubs included (their CFA expression is reduced to
  SP + 8 or SP + 16 for the pc looked up). The fast walker needs nothing else.
- GENERAL: anything else (signal trampolines, expressions, register rules,
  the return address in a register): only the generic walker handles it.
- ROOT: the return address is undefined (`_start`, `clone3`): the stack ends here.
- NO_CFI: the pc's object has no CFI for it: frame-pointer fallback.
- NO_MAP: no executable mapping contains the pc.
- BAD: the object's CFI for the pc is corrupt.

`plan` (SP_BASED, FP_BASED, GENERAL) is the row prepared for the generic
walker, which tracks every register: rules become small opcodes, and the
expressions CFI actually uses ("breg N off", "breg N off; deref") become
plain register arithmetic, so signal frames cost no expression evaluation.
"""

from __future__ import annotations

from typing import NamedTuple

from qtools.qformat.objects.cfi import (EXPRESSION, OFFSET, REGISTER, SAME_VALUE, UNDEFINED,
                                        VAL_OFFSET, Row)
from qtools.qformat.objects.ehframe import sleb, uleb
from .unwinderrors import CfiError
from .expr import linearize
from .regs import ArchRegs

SP_BASED, FP_BASED, GENERAL, ROOT, NO_CFI, NO_MAP, BAD = range(7)

# how the plan finds the CFA
CFA_REG, CFA_DEREF, CFA_EXPR = range(3)
# how the plan finds a register's value in the caller (a, b: operands)
OP_OFFSET = 0      # read(CFA + a), unless CFA + a is below SP (then: unchanged)
OP_VAL_OFFSET = 1  # CFA + a
OP_REGISTER = 2    # value of register a
OP_UNDEFINED = 3   # unknown
OP_AT_BREG = 4     # read(register a + b)
OP_VAL_BREG = 5    # register a + b
OP_EXPR = 6        # read(evaluate(b, CFA pushed))
OP_VAL_EXPR = 7    # evaluate(b, CFA pushed)
OP_SAME = 8        # unchanged (only kept for the RA column)


class Plan(NamedTuple):
    """A row prepared for the generic walker."""

    cfa_kind: int
    cfa_reg: int
    cfa_offset: int
    cfa_expr: bytes | None
    #: register -> (op, a, b) for every register with a rule, except the RA column
    #: and "same value" rules (a register without an entry keeps its value)
    regs: dict[int, tuple[int, int, "int | bytes"]]
    #: (op, a, b) for the RA column, or None when it has no rule
    ra: tuple[int, int, "int | bytes"] | None
    ra_column: int
    signal: bool
    #: CFA, SP, FP and RA depend on nothing but SP, FP and the pc (and no general
    #: expression): the fast walker can apply the plan without tracking other registers
    core: bool = False


Rule = tuple[int, int, int, "int | None", "Plan | None"]

RULE_NO_CFI: Rule = (NO_CFI, 0, 0, None, None)
RULE_NO_MAP: Rule = (NO_MAP, 0, 0, None, None)
RULE_BAD: Rule = (BAD, 0, 0, None, None)


def simple_breg(expr: bytes) -> tuple[int, int, int] | None:
    """(register, offset, length) if expr starts with DW_OP_breg<n>/bregx, else None."""
    try:
        op = expr[0]
        if 0x70 <= op <= 0x8F:
            off, pos = sleb(expr, 1, len(expr))
            return op - 0x70, off, pos
        if op == 0x92:
            reg, pos = uleb(expr, 1, len(expr))
            off, pos = sleb(expr, pos, len(expr))
            return reg, off, pos
    except (CfiError, IndexError):
        pass
    return None


def _op(kind: int, arg: int | bytes) -> tuple[int, int, int | bytes]:
    if isinstance(arg, int):
        if kind == OFFSET:
            return OP_OFFSET, arg, 0
        if kind == VAL_OFFSET:
            return OP_VAL_OFFSET, arg, 0
        if kind == REGISTER:
            return OP_REGISTER, arg, 0
        if kind == SAME_VALUE:
            return OP_SAME, 0, 0
        return OP_UNDEFINED, 0, 0
    b = simple_breg(arg)
    if b is not None and b[2] == len(arg):
        return (OP_AT_BREG if kind == EXPRESSION else OP_VAL_BREG), b[0], b[1]
    return (OP_EXPR if kind == EXPRESSION else OP_VAL_EXPR), 0, arg


def _is_core(op: tuple[int, int, int | bytes] | None, core: frozenset[int]) -> bool:
    if op is None:
        return True
    code, x, _ = op
    if code in (OP_EXPR, OP_VAL_EXPR):
        return False
    return code not in (OP_REGISTER, OP_AT_BREG, OP_VAL_BREG) or x in core


def plan_row(row: Row, arch: ArchRegs) -> Plan:
    """The generic walker's form of a row."""
    cfa_kind, cfa_reg, cfa_off, cfa_expr = CFA_REG, row.cfa_reg, row.cfa_offset, row.cfa_expr
    if cfa_expr is not None:
        b = simple_breg(cfa_expr)
        if b is not None and b[2] == len(cfa_expr):
            cfa_kind, cfa_reg, cfa_off, cfa_expr = CFA_REG, b[0], b[1], None
        elif b is not None and b[2] + 1 == len(cfa_expr) and cfa_expr[-1] == 0x06:  # deref
            cfa_kind, cfa_reg, cfa_off, cfa_expr = CFA_DEREF, b[0], b[1], None
        else:
            cfa_kind = CFA_EXPR
    regs = {}
    ra = None
    for reg, kind, arg in row.rules:
        op = _op(kind, arg)
        if reg == row.ra_column:
            ra = op
        elif op[0] != OP_SAME:
            regs[reg] = op
    core = (cfa_kind != CFA_EXPR and cfa_reg in (arch.sp, arch.fp, arch.ip)
            and _core_rules(regs, ra, arch))
    return Plan(cfa_kind, cfa_reg, cfa_off, cfa_expr, regs, ra, row.ra_column, row.signal, core)


def _core_rules(regs: dict[int, tuple[int, int, int | bytes]],
                ra: tuple[int, int, int | bytes] | None, arch: ArchRegs) -> bool:
    """True if the caller's SP, FP and return address need only pc, SP and FP."""
    core_regs = frozenset((arch.sp, arch.fp, arch.ip))
    return ra is not None and all(_is_core(o, core_regs)
                                  for o in (regs.get(arch.sp), regs.get(arch.fp), ra))


def compile_row(row: Row, arch: ArchRegs, ip_value: int) -> tuple[Rule, bool]:
    """(compiled rule, whether it depends on the pc beyond the row).

    ip_value is the pc of the frame (the link-time vaddr is fine: only its low
    bits can matter), used to reduce PLT-style CFA expressions.
    """
    ra = row.rule(row.ra_column)
    plan = plan_row(row, arch)
    if ra is not None and ra[0] == UNDEFINED:
        return (ROOT, 0, 0, None, plan), False
    general: Rule = (GENERAL, 0, 0, None, plan)
    if row.signal:
        return general, False
    pc_dependent = False
    if row.cfa_expr is not None:
        lin = linearize(row.cfa_expr, arch.sp, arch.fp, arch.ip, ip_value)
        if lin is None:
            return general, False
        base, cfa_off = lin
        pc_dependent = True
        # the plan must see the same reduced CFA as the fast walker
        plan = Plan(CFA_REG, base, cfa_off, None, plan.regs, plan.ra, plan.ra_column, plan.signal,
                    plan.core or (base in (arch.sp, arch.fp)
                                  and _core_rules(plan.regs, plan.ra, arch)))
        general = (GENERAL, 0, 0, None, plan)
    else:
        base, cfa_off = row.cfa_reg, row.cfa_offset
    if base == arch.sp:
        kind = SP_BASED
    elif base == arch.fp:
        kind = FP_BASED
    else:
        return general, pc_dependent
    if ra is None or ra[0] != OFFSET:
        return general, pc_dependent      # e.g. aarch64 leaf: the return address is still in LR
    fp = row.rule(arch.fp)
    if fp is None or fp[0] == SAME_VALUE:
        fp_off = None
    elif fp[0] == OFFSET:
        fp_off = fp[1]
    else:
        return general, pc_dependent
    sp = row.rule(arch.sp)
    if sp is not None and not (sp[0] == VAL_OFFSET and sp[1] == 0):
        return general, pc_dependent
    ra_off = ra[1]
    if not isinstance(ra_off, int) or not isinstance(fp_off, (int, type(None))):
        return general, pc_dependent
    # the fast walker relies on this: whole words at 8-aligned offsets, and a return
    # address saved below the CFA (so the CFA is above SP and every frame moves up)
    if ra_off >= 0 or (cfa_off | ra_off | (fp_off or 0)) & (arch.word - 1):
        return general, pc_dependent
    return (kind, cfa_off, ra_off, fp_off, plan), pc_dependent
