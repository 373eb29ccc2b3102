"""Compiled rules: what the per-sample loop reads for one pc.

A compiled rule is a plain 5-tuple `(kind, cfa_offset, ra_offset, fp_offset, row)`
because tuple unpacking is the cheapest thing CPython does:

- SP_BASED / FP_BASED: CFA = SP (or frame pointer) + cfa_offset, the return
  address is at CFA + ra_offset, the caller's frame pointer at CFA + fp_offset
  (None: unchanged), the caller's SP is the CFA. This covers nearly every pc
  of compiled code, PLT stubs included (their CFA expression is reduced to
  SP + 8 or SP + 16 for the pc looked up).
- GENERAL: anything else (signal trampolines, expressions, register rules,
  the return address in a register): `row` is evaluated by the generic walker.
- ROOT: the return address is undefined (`_start`, `clone3`): the stack ends here.
- NO_CFI: the pc's object has no CFI for it: frame-pointer fallback.
- NO_MAP: no executable mapping contains the pc.
- BAD: the object's CFI for the pc is corrupt.
"""

from __future__ import annotations

from .cfi import OFFSET, SAME_VALUE, UNDEFINED, VAL_OFFSET, Row
from .expr import linearize
from .regs import ArchRegs

SP_BASED, FP_BASED, GENERAL, ROOT, NO_CFI, NO_MAP, BAD = range(7)
KIND_NAMES = ("sp", "fp", "general", "root", "no-cfi", "no-map", "bad")

Rule = tuple[int, int, int, "int | None", "Row | None"]

RULE_NO_CFI: Rule = (NO_CFI, 0, 0, None, None)
RULE_NO_MAP: Rule = (NO_MAP, 0, 0, None, None)
RULE_BAD: Rule = (BAD, 0, 0, None, None)


def compile_row(row: Row, arch: ArchRegs, ip_value: int) -> tuple[Rule, bool]:
    """(compiled rule, whether it depends on the pc beyond the row).

    ip_value is the pc of the frame (the link-time vaddr is fine: only its low
    bits can matter), used to reduce PLT-style CFA expressions.
    """
    ra = row.rule(row.ra_column)
    if ra is not None and ra[0] == UNDEFINED:
        return (ROOT, 0, 0, None, row), False
    general: Rule = (GENERAL, 0, 0, None, row)
    if row.signal:
        return general, False
    pc_dependent = False
    if row.cfa_expr is not None:
        lin = linearize(row.cfa_expr, arch.sp, arch.fp, arch.ip, ip_value)
        if lin is None:
            return general, False
        base, cfa_off = lin
        pc_dependent = True
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
    return (kind, cfa_off, ra_off, fp_off, row), pc_dependent
