"""The per-sample unwinder: registers + a copy of the user stack -> return addresses.

Two walkers share the compiled rules:

- the fast walker handles the rules that cover nearly every pc of compiled
  code (CFA = SP or frame pointer + constant, return address and saved frame
  pointer at constant offsets from the CFA). It tracks three values, reads
  stack words through one `memoryview.cast('Q')`, and finds rules in the
  per-process cache with one dict lookup per frame;
- the generic walker tracks the whole register file and evaluates any row:
  expressions, register rules, signal trampolines, the return address in a
  register, and the frame-pointer fallback. When the fast walker meets
  something it does not handle it hands the whole sample to the generic
  walker, which starts again from the leaf (rare: signal frames, pcs without
  CFI, stack realignment). The generic walker is also the reference the
  tests compare the fast one with.

Neither raises on hostile data: bad CFI, truncated stacks and loops end the
walk with a reason.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from .cfi import EXPRESSION, OFFSET, REGISTER, SAME_VALUE, VAL_EXPRESSION, VAL_OFFSET, Row
from .errors import CfiError
from .expr import MemoryUnavailable, ReadFn, RegFn, evaluate
from .regs import ArchRegs, arch_by_name, sample_positions
from .rules import BAD, FP_BASED, NO_CFI, NO_MAP, ROOT, RULE_NO_CFI, RULE_NO_MAP, SP_BASED, Rule
from .space import AddressSpace

MASK64 = (1 << 64) - 1

ROOT_REASON = "root"
END_OF_STACK = "end-of-stack"
NO_CFI_REASON = "no-cfi"
BAD_FRAME = "bad-frame"
MAX_FRAMES = "max-frames"
NO_REGS = "no-regs"

# What hostile bytes can make Python raise inside a walk; the walk then stops as a bad frame.
_WALK_ERRORS = (CfiError, IndexError, ValueError, TypeError, OverflowError, ArithmeticError,
                struct.error, RecursionError)


@dataclass(frozen=True, slots=True)
class UnwindResult:
    """One unwound user stack."""

    #: ip of the leaf, then return addresses as found on the stack (NOT minus 1)
    frames: tuple[int, ...]
    #: ended at a root: return address undefined by CFI (_start, clone3) or zero
    complete: bool
    #: why it stopped: "root", "end-of-stack", "no-cfi", "bad-frame", "max-frames", "no-regs"
    reason: str


_NO_REGS = UnwindResult((), False, NO_REGS)

_new = object.__new__
_set_frames = UnwindResult.frames.__set__  # type: ignore[attr-defined]
_set_complete = UnwindResult.complete.__set__  # type: ignore[attr-defined]
_set_reason = UnwindResult.reason.__set__  # type: ignore[attr-defined]


def _result(frames: tuple[int, ...], complete: bool, reason: str) -> UnwindResult:
    """UnwindResult(frames, complete, reason) at half the cost of the frozen __init__
    (which goes through object.__setattr__ per field); same object, same invariants."""
    r = _new(UnwindResult)
    _set_frames(r, frames)
    _set_complete(r, complete)
    _set_reason(r, reason)
    return r


class StackCopy:
    """Random access to the copied stack: u64 words at absolute addresses.

    Words are read through a 'Q' view starting at the first 8-aligned address
    at or above the copy's start (frames keep SP 8-aligned); other addresses
    go through a slower byte path.
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


class Unwinder:
    """DWARF CFI unwinder for one architecture (see the module doc)."""

    def __init__(self, arch: str = "x86_64", max_frames: int = 127, regs_mask: int | None = None,
                 fast: bool = True) -> None:
        self.arch: ArchRegs = arch_by_name(arch)
        #: the sample_regs_user mask to request (x86_64: 0xff0fff)
        self.regs_mask: int = regs_mask if regs_mask is not None else self.arch.sample_mask
        self.max_frames = max(1, max_frames)
        a = self.arch
        pos = sample_positions(a, self.regs_mask)
        if a.sp not in pos or a.ip not in pos:
            raise ValueError(f"regs_mask {self.regs_mask:#x} lacks SP or IP")
        self._nregs = self.regs_mask.bit_count()
        self._pos_sp, self._pos_ip = pos[a.sp], pos[a.ip]
        self._pos_fp = pos.get(a.fp)
        # the fast walker needs the frame pointer; without it every sample goes generic
        self._fast = fast and self._pos_fp is not None
        #: (DWARF number, sample position) of every sampled register the walker tracks
        self._tracked = tuple((dw, p) for dw, p in pos.items() if dw < a.nregs)

    # -- entry point ----------------------------------------------------------------------

    def unwind(self, space: AddressSpace, regs: Sequence[int],
               stack: bytes | bytearray | memoryview) -> UnwindResult:
        """Unwind one sample.

        regs: the REGS_USER values as the sample carries them (ascending bit
        order of regs_mask; empty when the sample's abi is 0). stack: the valid
        part (dyn_size bytes) of STACK_USER, which starts at regs[SP].
        """
        if len(regs) != self._nregs:
            return _NO_REGS
        try:
            if self._fast:
                result = self._walk_fast(space, regs, stack)
                if result is not None:
                    return result
            return self._walk_generic(space, regs, stack)
        except _WALK_ERRORS:
            return _result((regs[self._pos_ip] & MASK64,), False, BAD_FRAME)

    # -- rule lookup ----------------------------------------------------------------------

    def _lookup(self, space: AddressSpace, key: int, exact: bool) -> Rule:
        """Rule for a lookup address (pc, or return address - 1), through the caches."""
        hit = space.find(key)
        cacheable = True
        if hit is None:
            rule = RULE_NO_MAP
        else:
            cfi, start, offset = hit
            vaddr = None if cfi is None else cfi.vaddr_of_offset(key - start + offset)
            if cfi is None or vaddr is None or cfi.arch is not self.arch:
                rule = RULE_NO_CFI
            else:
                rule, cacheable = cfi.rule_at(vaddr, exact)
        if cacheable:
            # keyed by lookup address only: an exact pc and a return address - 1 that
            # coincide share the row; only a PLT stub's rule could differ, and a PLT
            # stub holds no return addresses
            space.rule_cache[key] = rule
        return rule

    # -- fast walker ----------------------------------------------------------------------

    def _walk_fast(self, space: AddressSpace, regs: Sequence[int],
                   stack: bytes | bytearray | memoryview) -> UnwindResult | None:
        """Unwind with SP/FP-based rules only; None hands the sample to the generic walker.

        compile_row only emits fast rules whose offsets are multiples of 8 and
        whose return-address slot lies below the CFA, so with an 8-aligned SP
        every slot is a whole word of the copy and the CFA always moves up.
        """
        pc = regs[self._pos_ip]
        sp = regs[self._pos_sp]
        fp = regs[self._pos_fp]  # type: ignore[index]
        if sp & 7 or len(stack) & 7:
            return None
        words = memoryview(stack).cast("Q")
        nwords = len(words)
        cget = space.rule_cache.get
        frames = [pc]
        append = frames.append
        maxf = self.max_frames
        key = pc
        base = sp
        while True:
            rule = cget(key)
            if rule is None:
                rule = self._lookup(space, key, len(frames) == 1)
            kind, off, ra_off, fp_off, _row = rule
            if kind == 0:                     # SP_BASED
                cfa = sp + off
            elif kind == 1:                   # FP_BASED
                if fp & 7:
                    return None
                cfa = fp + off
            elif kind == ROOT:
                return _result(tuple(frames), True, ROOT_REASON)
            elif kind == BAD:
                return _result(tuple(frames), False, BAD_FRAME)
            elif kind == NO_MAP and len(frames) > 1:
                frames.pop()  # a return address outside every executable mapping is garbage
                return _result(tuple(frames), False, BAD_FRAME)
            else:
                return None
            a = cfa + ra_off
            if a < sp:
                return None
            i = (a - base) >> 3
            if i >= nwords:
                return _result(tuple(frames), False, END_OF_STACK)
            ra = words[i]
            if fp_off is not None:
                a = cfa + fp_off
                # a save slot below SP was already popped: the register holds the caller's value
                if a >= sp:
                    i = (a - base) >> 3
                    if i >= nwords:
                        return None
                    fp = words[i]
            sp = cfa
            if not ra:
                return _result(tuple(frames), True, ROOT_REASON)
            append(ra)
            if len(frames) >= maxf:
                return _result(tuple(frames), False, MAX_FRAMES)
            key = ra - 1

    # -- generic walker -------------------------------------------------------------------

    def _walk_generic(self, space: AddressSpace, regs: Sequence[int],
                      stack: bytes | bytearray | memoryview) -> UnwindResult:
        a = self.arch
        state: list[int | None] = [None] * a.nregs
        for dwarf, pos in self._tracked:
            state[dwarf] = regs[pos] & MASK64
        pc = regs[self._pos_ip] & MASK64
        state[a.ip] = pc
        copy = StackCopy(stack, state[a.sp] or 0)
        cache = space.rule_cache
        frames = [pc]
        exact = True
        while True:
            key = pc if exact else pc - 1
            rule = cache.get(key)
            if rule is None:
                rule = self._lookup(space, key, exact)
            kind = rule[0]
            if kind == ROOT:
                return UnwindResult(tuple(frames), True, ROOT_REASON)
            if kind == BAD:
                return UnwindResult(tuple(frames), False, BAD_FRAME)
            if kind == NO_MAP and len(frames) > 1:
                frames.pop()
                return UnwindResult(tuple(frames), False, BAD_FRAME)
            if kind in (NO_CFI, NO_MAP):
                step = self._fp_step(state, copy, len(frames) == 1)
                signal = False
            else:
                row = rule[4]
                assert row is not None
                step = self._row_step(row, state, copy, len(frames) == 1)
                signal = row.signal
            if isinstance(step, str):
                complete = step == ROOT_REASON
                return UnwindResult(tuple(frames), complete, step)
            new_state, ra = step
            old_sp, new_sp = state[a.sp], new_state[a.sp]
            if new_sp is None or old_sp is None:
                return UnwindResult(tuple(frames), False, BAD_FRAME)
            # the stack grows down: callers' frames are higher, except across a signal
            # frame (sigaltstack); an aarch64 leaf may keep its SP (the RA is still in LR)
            if not signal and (new_sp < old_sp or (new_sp == old_sp and
                                                    not (len(frames) == 1 and a.lr is not None))):
                return UnwindResult(tuple(frames), False, BAD_FRAME)
            if not ra:
                return UnwindResult(tuple(frames), True, ROOT_REASON)
            frames.append(ra)
            if len(frames) >= self.max_frames:
                return UnwindResult(tuple(frames), False, MAX_FRAMES)
            new_state[a.ip] = ra
            state = new_state
            pc = ra
            exact = signal  # the frame a signal interrupted resumes at its exact pc

    def _fp_step(self, state: list[int | None], copy: StackCopy,
                 leaf: bool) -> tuple[list[int | None], int] | str:
        """Frame-pointer fallback: the frame record at FP gives the caller's FP and pc."""
        a = self.arch
        fp, sp = state[a.fp], state[a.sp]
        if fp == 0 and not leaf:
            # the ABI ends the frame-pointer chain with a zero saved FP (_start, clone);
            # in a leaf the register may just be in use as a general register
            return ROOT_REASON
        if fp is None or sp is None or fp < sp or fp & 7:
            return NO_CFI_REASON
        saved_fp = copy.read(fp + a.fp_slot)
        ra = copy.read(fp + a.ra_slot)
        if saved_fp is None or ra is None:
            return END_OF_STACK
        # the saved frame pointer is checked when it is used: it must then lie at or
        # above the caller's SP (fp + 16), so frame records can only move up the stack
        new = list(state)
        new[a.fp] = saved_fp
        new[a.sp] = fp + a.caller_sp
        if a.lr is not None:
            new[a.lr] = None
        return new, ra

    def _row_step(self, row: Row, state: list[int | None], copy: StackCopy,
                  leaf: bool) -> tuple[list[int | None], int] | str:
        """Apply one CFI row to the register state: (caller's state, return address) or a reason."""
        a = self.arch
        nregs = a.nregs

        def reg(n: int) -> int | None:
            return state[n] if 0 <= n < nregs else None

        read = copy.read
        try:
            if row.cfa_expr is not None:
                cfa = evaluate(row.cfa_expr, reg, read)
            else:
                base = reg(row.cfa_reg)
                if base is None:
                    return BAD_FRAME
                cfa = (base + row.cfa_offset) & MASK64
        except MemoryUnavailable:
            return END_OF_STACK
        except CfiError:
            return BAD_FRAME
        sp = state[a.sp]
        new = list(state)
        new[a.sp] = cfa
        ra: int | None = None
        ra_rule = False
        for r, kind, arg in row.rules:
            is_ra = r == row.ra_column
            try:
                value = self._apply(kind, arg, r, cfa, sp, reg, read, is_ra)
            except MemoryUnavailable:
                if is_ra:
                    return END_OF_STACK
                value = None
            except CfiError:
                if is_ra:
                    return BAD_FRAME
                value = None
            if is_ra:
                ra_rule = True
                if value is None:
                    return END_OF_STACK if kind in (OFFSET, EXPRESSION) else ROOT_REASON
                ra = value
            if 0 <= r < nregs:
                new[r] = value
        if not ra_rule:
            # no rule for the RA column: "same value", meaningful only for a link register
            ra = state[row.ra_column] if row.ra_column == a.lr and leaf else None
            if ra is None:
                return BAD_FRAME
        if a.lr is not None and not row.signal:
            new[a.lr] = None  # the call clobbered the link register in the caller
        assert ra is not None
        return new, ra

    @staticmethod
    def _apply(kind: int, arg: int | bytes, r: int, cfa: int, sp: int | None, reg: RegFn,
               read: ReadFn, is_ra: bool) -> int | None:
        """Value of register r in the caller under one rule."""
        if isinstance(arg, bytes):
            value = evaluate(arg, reg, read, cfa)
            if kind == VAL_EXPRESSION:
                return value
            mem = read(value)
            if mem is None:
                raise MemoryUnavailable(f"{value:#x} outside the stack copy")
            return mem
        if kind == OFFSET:
            addr = (cfa + arg) & MASK64
            if sp is not None and addr < sp:
                if is_ra:
                    raise CfiError("return address saved below SP")
                return reg(r)  # the slot was already popped (epilogue): the register is restored
            value = read(addr)
            if value is None:
                raise MemoryUnavailable(f"{addr:#x} outside the stack copy")
            return value
        if kind == SAME_VALUE:
            return reg(r)
        if kind == VAL_OFFSET:
            return (cfa + arg) & MASK64
        if kind == REGISTER:
            return reg(arg)
        return None  # UNDEFINED
