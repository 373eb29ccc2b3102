"""The generic walker: evaluates any CFI row, and the frame-pointer fallback.

It runs when the fast walker meets a rule it does not handle (signal
trampolines, expressions, register rules, a return address in a register,
code without CFI) and is the reference the tests compare the fast walker
with. It tracks SP, the frame pointer, the pc and the link register of every
frame eagerly; any other register is worked out only when a rule needs it,
by going back through the frames' plans to the one that saved it (or to the
sampled value). So a frame costs about two stack reads however many
registers its function saves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .unwinderrors import CfiError
from .expr import MemoryUnavailable, evaluate
from .regs import ArchRegs
from .rules import (BAD, CFA_DEREF, CFA_EXPR, FP_BASED, NO_CFI, NO_MAP, OP_AT_BREG, OP_EXPR,
                    OP_OFFSET, OP_REGISTER, OP_SAME, OP_UNDEFINED, OP_VAL_BREG, OP_VAL_EXPR,
                    OP_VAL_OFFSET, ROOT, SP_BASED, Plan, Rule)

MASK64 = (1 << 64) - 1

ROOT_REASON = "root"
END_OF_STACK = "end-of-stack"
NO_CFI_REASON = "no-cfi"
BAD_FRAME = "bad-frame"
MAX_FRAMES = "max-frames"

Lookup = Callable[[int, bool], Rule]
Walk = tuple[tuple[int, ...], bool, str]


class StackCopy:
    """Random access to the copied stack: u64 words at absolute addresses.

    Words are read through a 'Q' view starting at the first 8-aligned address
    at or above the copy's start; other addresses go through a byte path.
    """

    __slots__ = ("mv", "start", "base", "words", "nwords")

    def __init__(self, stack: bytes | bytearray | memoryview, start: int) -> None:
        mv = memoryview(stack)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        self.mv = mv
        self.start = start
        self.base = (start + 7) & ~7
        skip = self.base - start
        self.nwords = max(0, (len(mv) - skip) >> 3)
        self.words = mv[skip:skip + 8 * self.nwords].cast("Q")

    def read(self, addr: int) -> int | None:
        """The u64 at addr, or None outside the copy."""
        off = addr - self.base
        if not off & 7:
            i = off >> 3
            return self.words[i] if 0 <= i < self.nwords else None
        off = addr - self.start
        if 0 <= off and off + 8 <= len(self.mv):
            return int.from_bytes(self.mv[off:off + 8], "little")
        return None


class _Frames:
    """The frames walked so far, and register values worked out on demand."""

    __slots__ = ("arch", "sample", "read", "pcs", "sps", "fps", "lrs", "plans", "cfas")

    def __init__(self, arch: ArchRegs, sample: dict[int, int], copy: StackCopy, pc: int) -> None:
        self.arch = arch
        self.sample = sample
        self.read = copy.read
        self.pcs = [pc]
        self.sps: list[int | None] = [sample.get(arch.sp)]
        self.fps: list[int | None] = [sample.get(arch.fp)]
        self.lrs: list[int | None] = [sample.get(arch.lr) if arch.lr is not None else None]
        # plans[k] / cfas[k]: how frame k was unwound (None plan: frame-pointer step)
        self.plans: list[Plan | None] = []
        self.cfas: list[int] = []

    def value(self, k: int, r: int) -> int | None:
        """Register r in frame k (None: unknown)."""
        a = self.arch
        while True:
            if r == a.sp:
                return self.sps[k]
            if r == a.fp:
                return self.fps[k]
            if r == a.ip:
                return self.pcs[k]
            if r == a.lr:
                return self.lrs[k]
            if k == 0:
                return self.sample.get(r)
            plan = self.plans[k - 1]
            op = plan.regs.get(r) if plan is not None else None
            if op is None:
                k -= 1          # no rule in the callee: the register kept its value
                continue
            try:
                return self.apply(op, r, k - 1)
            except CfiError:
                return None

    def apply(self, op: tuple[int, int, int | bytes], r: int, j: int) -> int | None:
        """Value of register r in frame j + 1 under frame j's rule op.

        Raises MemoryUnavailable / CfiError when an expression cannot be evaluated.
        """
        code, x, y = op
        cfa = self.cfas[j]
        if code == OP_OFFSET:
            addr = cfa + x
            sp = self.sps[j]
            if sp is not None and addr < sp:
                return self.value(j, r)  # slot already popped (epilogue): register restored
            return self.read(addr)
        if code == OP_AT_BREG or code == OP_VAL_BREG:
            base = self.value(j, x)
            if base is None:
                return None
            addr = (base + y) & MASK64  # type: ignore[operator]
            return self.read(addr) if code == OP_AT_BREG else addr
        if code == OP_VAL_OFFSET:
            return (cfa + x) & MASK64
        if code == OP_REGISTER:
            return self.value(j, x)
        if code == OP_SAME:
            return self.value(j, r)
        if code == OP_EXPR or code == OP_VAL_EXPR:
            assert isinstance(y, bytes)  # narrowing: an expression's operand is its bytes
            value = evaluate(y, lambda n: self.value(j, n), self.read, cfa)
            return value if code == OP_VAL_EXPR else self.read(value)
        return None  # OP_UNDEFINED


def _cfa(frames: _Frames, plan: Plan, k: int) -> int | str:
    """The CFA of frame k under its plan, or a reason to stop."""
    if plan.cfa_kind == CFA_EXPR:
        try:
            return evaluate(plan.cfa_expr or b"", lambda n: frames.value(k, n), frames.read)
        except MemoryUnavailable:
            return END_OF_STACK
        except CfiError:
            return BAD_FRAME
    base = frames.value(k, plan.cfa_reg)
    if base is None:
        return BAD_FRAME
    cfa = (base + plan.cfa_offset) & MASK64
    if plan.cfa_kind == CFA_DEREF:
        value = frames.read(cfa)
        return END_OF_STACK if value is None else value
    return cfa


def _plan_step(frames: _Frames, plan: Plan, k: int) -> tuple[int | None, int | None, int] | str:
    """Unwind frame k with its plan: (caller's SP, caller's FP, return address) or a reason."""
    a = frames.arch
    cfa = _cfa(frames, plan, k)
    if isinstance(cfa, str):
        return cfa
    frames.plans.append(plan)
    frames.cfas.append(cfa)
    regs = plan.regs
    try:
        op = regs.get(a.sp)
        sp = cfa if op is None else frames.apply(op, a.sp, k)
        op = regs.get(a.fp)
        fp = frames.fps[k] if op is None else frames.apply(op, a.fp, k)
    except MemoryUnavailable:
        return END_OF_STACK
    except CfiError:
        return BAD_FRAME
    if plan.ra is None:
        # no rule for the RA column: "same value", meaningful only for a leaf's link register
        ra = frames.lrs[k] if plan.ra_column == a.lr and k == 0 else None
        return BAD_FRAME if ra is None else (sp, fp, ra)
    code, x, _ = plan.ra
    if code == OP_UNDEFINED:
        return ROOT_REASON
    if code == OP_OFFSET and frames.sps[k] is not None and cfa + x < frames.sps[k]:  # type: ignore[operator]
        return BAD_FRAME  # a return address is never saved below SP
    try:
        ra = frames.apply(plan.ra, plan.ra_column, k)
    except MemoryUnavailable:
        return END_OF_STACK
    except CfiError:
        return BAD_FRAME
    if ra is None:
        return END_OF_STACK if code in (OP_OFFSET, OP_AT_BREG, OP_EXPR) else BAD_FRAME
    return sp, fp, ra


def _simple_step(frames: _Frames, rule: Rule, plan: Plan,
                 k: int) -> tuple[int | None, int | None, int] | str:
    """A fast-walker rule (CFA = SP or FP + constant), recorded for later register lookups."""
    kind, off, ra_off, fp_off, _ = rule
    sp = frames.sps[k]
    base = sp if kind == SP_BASED else frames.fps[k]
    if base is None or sp is None:
        return BAD_FRAME
    cfa = base + off
    if cfa + ra_off < sp:
        return BAD_FRAME  # a return address is never saved below SP
    ra = frames.read(cfa + ra_off)
    if ra is None:
        return END_OF_STACK
    fp = frames.fps[k]
    if fp_off is not None and cfa + fp_off >= sp:  # a slot below SP was already popped
        fp = frames.read(cfa + fp_off)
    frames.plans.append(plan)
    frames.cfas.append(cfa)
    return cfa, fp, ra


def _fp_step(frames: _Frames, k: int) -> tuple[int | None, int | None, int] | str:
    """Frame-pointer fallback: the frame record at FP gives the caller's FP and pc."""
    a = frames.arch
    fp, sp = frames.fps[k], frames.sps[k]
    if fp == 0 and k > 0:
        # the ABI ends the frame-pointer chain with a zero saved FP (_start, clone);
        # in a leaf the register may just be in use as a general register
        return ROOT_REASON
    if fp is None or sp is None or fp < sp or fp & 7:
        return NO_CFI_REASON
    saved_fp = frames.read(fp + a.fp_slot)
    ra = frames.read(fp + a.ra_slot)
    if saved_fp is None or ra is None:
        return END_OF_STACK
    # the saved frame pointer is checked when it is used: it must then lie at or
    # above the caller's SP (fp + 16), so frame records can only move up the stack
    frames.plans.append(None)
    frames.cfas.append(fp + a.caller_sp)
    return fp + a.caller_sp, saved_fp, ra


def core_step(plan: Plan, arch: ArchRegs, pc: int, sp: int, fp: int, words: memoryview,
              base: int) -> tuple[int, int | None, int] | str | None:
    """Apply a plan knowing only the frame's pc, SP and FP (the fast walker's state).

    words: the stack copy as u64 words from address base. Returns (caller's SP,
    caller's FP, return address), a reason to stop, or None when the plan needs
    more than that (then the generic walker takes over).
    """
    if not plan.core:
        return None
    nwords = len(words)
    asp, afp = arch.sp, arch.fp

    def reg(r: int) -> int:
        return sp if r == asp else fp if r == afp else pc

    def read(addr: int) -> int | None:
        i = (addr - base) >> 3
        return words[i] if not addr & 7 and 0 <= i < nwords else None

    def caller(op: tuple[int, int, int | bytes], r: int) -> int | None:
        code, x, y = op
        if code == OP_AT_BREG:
            return read((reg(x) + y) & MASK64)  # type: ignore[operator]
        if code == OP_OFFSET:
            return reg(r) if cfa + x < sp else read(cfa + x)
        if code == OP_VAL_OFFSET:
            return (cfa + x) & MASK64
        if code == OP_REGISTER:
            return reg(x)
        if code == OP_VAL_BREG:
            return (reg(x) + y) & MASK64  # type: ignore[operator]
        if code == OP_SAME:
            return reg(r)
        return None

    cfa = (reg(plan.cfa_reg) + plan.cfa_offset) & MASK64
    if plan.cfa_kind == CFA_DEREF:
        deref = read(cfa)
        if deref is None:
            return None   # outside the copy or unaligned: the generic walker decides
        cfa = deref
    regs = plan.regs
    op = regs.get(asp)
    new_sp = cfa if op is None else caller(op, asp)
    op = regs.get(afp)
    new_fp = fp if op is None else caller(op, afp)
    if plan.ra is None:  # no rule for the RA column: the generic walker knows what that means
        return None
    code, x, _ = plan.ra
    if code == OP_UNDEFINED:
        return ROOT_REASON
    if code == OP_OFFSET and cfa + x < sp:
        return BAD_FRAME
    ra = caller(plan.ra, plan.ra_column)
    if ra is None or new_sp is None:
        return None   # outside the copy or unaligned: the generic walker decides
    return new_sp, new_fp, ra


def walk_generic(arch: ArchRegs, sample: dict[int, int], pc: int,
                 stack: bytes | bytearray | memoryview, lookup: Lookup, max_frames: int) -> Walk:
    """Unwind from the sampled registers (DWARF number -> value): (frames, complete, reason)."""
    copy = StackCopy(stack, sample.get(arch.sp) or 0)
    frames = _Frames(arch, sample, copy, pc)
    pcs = frames.pcs
    exact = True
    while True:
        k = len(pcs) - 1
        rule = lookup(pc if exact else pc - 1, exact)
        kind = rule[0]
        if kind == ROOT:
            return tuple(pcs), True, ROOT_REASON
        if kind == BAD:
            return tuple(pcs), False, BAD_FRAME
        if kind == NO_MAP and k > 0:
            pcs.pop()  # a return address outside every executable mapping is garbage
            return tuple(pcs), False, BAD_FRAME
        plan = rule[4]
        signal = False
        if kind <= FP_BASED and plan is not None:
            step = _simple_step(frames, rule, plan, k)
        elif kind in (NO_CFI, NO_MAP) or plan is None:
            step = _fp_step(frames, k)
        else:
            step = _plan_step(frames, plan, k)
            signal = plan.signal
        if isinstance(step, str):
            return tuple(pcs), step == ROOT_REASON, step
        sp, fp, ra = step
        old_sp = frames.sps[k]
        if sp is None or old_sp is None:
            return tuple(pcs), False, BAD_FRAME
        # the stack grows down: callers' frames are higher, except across a signal
        # frame (sigaltstack); an aarch64 leaf may keep its SP (the RA is still in LR)
        if not signal and (sp < old_sp or (sp == old_sp and not (k == 0 and arch.lr is not None))):
            return tuple(pcs), False, BAD_FRAME
        if not ra:
            return tuple(pcs), True, ROOT_REASON
        pcs.append(ra)
        if len(pcs) >= max_frames:
            return tuple(pcs), False, MAX_FRAMES
        frames.sps.append(sp)
        frames.fps.append(fp)
        frames.lrs.append(None)  # the call clobbered the link register (aarch64)
        pc = ra
        exact = signal  # the frame a signal interrupted resumes at its exact pc


def sample_registers(tracked: Sequence[tuple[int, int]], regs: Sequence[int]) -> dict[int, int]:
    """DWARF number -> sampled value."""
    return {dwarf: regs[pos] & MASK64 for dwarf, pos in tracked}
