"""The CFA program interpreter: CIE + FDE instructions -> the table of rows.

Pure: an `Fde` in, `FdeRows` out. A row says how to find the CFA and the
caller's registers for every pc from its `loc` up to the next row's. The
table of a whole FDE is built at once (it is short: one row per push/pop)
and cached by the object, so any later pc inside the FDE costs a bisect.
Opcodes: DWARF 5 section 6.4.2 plus the GNU extensions gas emits.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

from .ehframe import Cie, CfiError, Fde, read_encoded, sleb, uleb

# register rule kinds (arg meaning in parentheses)
UNDEFINED = 0       # -
SAME_VALUE = 1      # -
OFFSET = 2          # saved at CFA + arg
VAL_OFFSET = 3      # value is CFA + arg
REGISTER = 4        # saved in register arg
EXPRESSION = 5      # saved at the address computed by arg (bytes; CFA pushed first)
VAL_EXPRESSION = 6  # value computed by arg (bytes; CFA pushed first)

RegRule = tuple[int, "int | bytes"]

DW_CFA_UNDEFINED = 0x07  # DWARF 5, 6.4.2.3: "the register has no recoverable value"

_MAX_STATE_DEPTH = 64
_MAX_REG = 1 << 12


class Row(NamedTuple):
    """The unwind rules in force at one pc."""

    #: register the CFA is based on, or -1 if `cfa_expr` computes it
    cfa_reg: int
    cfa_offset: int
    cfa_expr: bytes | None
    #: (DWARF register, rule kind, arg); registers without a rule keep their value
    rules: tuple[tuple[int, int, int | bytes], ...]
    ra_column: int
    #: the CIE marks a signal trampoline: the next frame's pc is exact, not a return address
    signal: bool = False

    def rule(self, reg: int) -> RegRule | None:
        """(kind, arg) of a register's rule, or None if it has none."""
        for r, kind, arg in self.rules:
            if r == reg:
                return kind, arg
        return None


class FdeRows(NamedTuple):
    """All rows of one FDE: rows[i] applies from locs[i] up to locs[i+1] (or pc_end)."""

    pc_begin: int
    pc_end: int
    locs: tuple[int, ...]
    rows: tuple[Row, ...]

    def row_at(self, pc: int) -> Row | None:
        """The row for pc, or None outside the FDE."""
        if not self.pc_begin <= pc < self.pc_end:
            return None
        i = bisect.bisect_right(self.locs, pc) - 1
        return self.rows[i] if i >= 0 else None


class CfaState:
    """The CFA rule and register rules as a CFA program runs."""

    __slots__ = ("cfa_reg", "cfa_offset", "cfa_expr", "regs")

    def __init__(self, cfa_reg: int = -1, cfa_offset: int = 0, cfa_expr: bytes | None = None,
                 regs: dict[int, RegRule] | None = None) -> None:
        self.cfa_reg = cfa_reg
        self.cfa_offset = cfa_offset
        self.cfa_expr = cfa_expr
        self.regs: dict[int, RegRule] = {} if regs is None else regs

    def copy(self) -> "CfaState":
        return CfaState(self.cfa_reg, self.cfa_offset, self.cfa_expr, dict(self.regs))


def _block(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    n, pos = uleb(data, pos, end)
    if pos + n > end:
        raise CfiError("expression block overruns the instructions")
    return data[pos:pos + n], pos + n


def _reg(data: bytes, pos: int, end: int) -> tuple[int, int]:
    r, pos = uleb(data, pos, end)
    if r >= _MAX_REG:
        raise CfiError(f"register number {r}")
    return r, pos


def _execute(insns: bytes, cie: Cie, state: CfaState, initial: dict[int, RegRule] | None,
             loc: int, pc_end: int, insn_vaddr: int,
             rows: list[tuple[int, CfaState]] | None) -> None:
    """Run a CFA program on state.

    With `rows` (an FDE), every location advance records the current state;
    `initial` holds the CIE's rules for DW_CFA_restore. With rows None (the
    CIE's initial instructions) location advances are ignored.
    """
    caf, daf = cie.code_align, cie.data_align
    stack: list[CfaState] = []
    pos, end = 0, len(insns)

    def advance(new_loc: int) -> None:
        nonlocal loc
        if rows is None:
            return
        if new_loc < loc:
            raise CfiError("CFA program moves backwards")
        rows.append((loc, state.copy()))
        loc = new_loc

    while pos < end:
        op = insns[pos]
        pos += 1
        hi, low = op & 0xC0, op & 0x3F
        if hi == 0x40:                              # advance_loc
            advance(loc + low * caf)
        elif hi == 0x80:                            # offset
            off, pos = uleb(insns, pos, end)
            state.regs[low] = (OFFSET, off * daf)
        elif hi == 0xC0:                            # restore
            _restore(state, initial, low)
        elif op == 0x00:                            # nop
            continue
        elif op == 0x01:                            # set_loc
            new, pos = read_encoded(insns, pos, end, cie.fde_encoding, insn_vaddr, None,
                                    cie.layout)
            advance(new)
        elif op in (0x02, 0x03, 0x04):              # advance_loc1/2/4
            size = 1 << (op - 2)
            if pos + size > end:
                raise CfiError("truncated advance_loc")
            delta = int.from_bytes(insns[pos:pos + size],
                                   "little" if cie.layout.order == "<" else "big")
            pos += size
            advance(loc + delta * caf)
        # offset_extended(_sf), val_offset(_sf), GNU negative offset
        elif op in (0x05, 0x11, 0x14, 0x15, 0x2F):
            r, pos = _reg(insns, pos, end)
            if op in (0x11, 0x15):
                off, pos = sleb(insns, pos, end)
            else:
                off, pos = uleb(insns, pos, end)
            if op == 0x2F:
                off = -off
            state.regs[r] = (VAL_OFFSET if op in (0x14, 0x15) else OFFSET, off * daf)
        elif op == 0x06:                            # restore_extended
            r, pos = _reg(insns, pos, end)
            _restore(state, initial, r)
        elif op in (0x07, 0x08):                    # undefined, same_value
            r, pos = _reg(insns, pos, end)
            state.regs[r] = (UNDEFINED if op == DW_CFA_UNDEFINED else SAME_VALUE, 0)
        elif op == 0x09:                            # register
            r, pos = _reg(insns, pos, end)
            r2, pos = _reg(insns, pos, end)
            state.regs[r] = (REGISTER, r2)
        elif op == 0x0A:                            # remember_state
            if len(stack) >= _MAX_STATE_DEPTH:
                raise CfiError("remember_state nesting too deep")
            stack.append(state.copy())
        elif op == 0x0B:                            # restore_state (CFA included, as in libgcc)
            if not stack:
                raise CfiError("restore_state without remember_state")
            saved = stack.pop()
            state.cfa_reg, state.cfa_offset = saved.cfa_reg, saved.cfa_offset
            state.cfa_expr = saved.cfa_expr
            state.regs = saved.regs
        elif op in (0x0C, 0x12):                    # def_cfa, def_cfa_sf
            state.cfa_reg, pos = _reg(insns, pos, end)
            if op == 0x12:
                off, pos = sleb(insns, pos, end)
                off *= daf
            else:
                off, pos = uleb(insns, pos, end)
            state.cfa_offset, state.cfa_expr = off, None
        elif op == 0x0D:                            # def_cfa_register
            state.cfa_reg, pos = _reg(insns, pos, end)
            state.cfa_expr = None
        elif op in (0x0E, 0x13):                    # def_cfa_offset, def_cfa_offset_sf
            if op == 0x13:
                off, pos = sleb(insns, pos, end)
                off *= daf
            else:
                off, pos = uleb(insns, pos, end)
            state.cfa_offset = off
        elif op == 0x0F:                            # def_cfa_expression
            state.cfa_expr, pos = _block(insns, pos, end)
            state.cfa_reg = -1
        elif op in (0x10, 0x16):                    # expression, val_expression
            r, pos = _reg(insns, pos, end)
            block, pos = _block(insns, pos, end)
            state.regs[r] = (EXPRESSION if op == 0x10 else VAL_EXPRESSION, block)
        elif op == 0x2E:  # GNU_args_size: only matters to exception handling
            _, pos = uleb(insns, pos, end)
        elif op in (0x2C, 0x2D):  # aarch64 negate_ra_state(_with_pc) / GNU_window_save
            continue
        else:
            raise CfiError(f"unknown CFA opcode {op:#x}")
    if rows is not None:
        rows.append((loc, state))


def _restore(state: CfaState, initial: dict[int, RegRule] | None, reg: int) -> None:
    if initial is None:
        raise CfiError("DW_CFA_restore in a CIE")
    rule = initial.get(reg)
    if rule is None:
        state.regs.pop(reg, None)
    else:
        state.regs[reg] = rule


def cie_state(cie: Cie) -> CfaState:
    """The state after a CIE's initial instructions (shared by its FDEs; do not mutate)."""
    state = CfaState()
    _execute(cie.initial_instructions, cie, state, None, 0, 0, 0, None)
    return state


def decode_fde(fde: Fde, initial: CfaState | None = None,
               interned: dict[tuple[object, ...], Row] | None = None) -> FdeRows:
    """The full row table of an FDE.

    `initial` is the cached `cie_state(fde.cie)`; `interned` maps a row's
    contents to one shared Row (most FDEs of an object repeat the same few
    rows), so equal rows are the same object and cost their memory once.
    """
    cie = fde.cie
    if initial is None:
        initial = cie_state(cie)
    if interned is None:
        interned = {}
    pc_end = fde.pc_begin + fde.pc_range
    raw: list[tuple[int, CfaState]] = []
    _execute(fde.instructions, cie, initial.copy(), initial.regs, fde.pc_begin, pc_end,
             fde.insn_vaddr, raw)
    locs: list[int] = []
    rows: list[Row] = []
    for loc, st in raw:
        if loc >= pc_end and locs:
            break
        rules = tuple(sorted([(r, k, a) for r, (k, a) in st.regs.items()]))
        key = (st.cfa_reg, st.cfa_offset, st.cfa_expr, rules, cie.ra_column, cie.signal)
        row = interned.get(key)
        if row is None:
            row = interned[key] = Row(*key)
        if locs and locs[-1] == loc:            # several advances of 0: the last state wins
            locs.pop()
            rows.pop()
        if rows and rows[-1] is row:
            continue                            # same rules as the previous row: extend it
        locs.append(loc)
        rows.append(row)
    return FdeRows(fde.pc_begin, pc_end, tuple(locs), tuple(rows))
