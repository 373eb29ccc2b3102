"""The per-sample unwinder: registers + a copy of the user stack -> return addresses.

Two walkers share the compiled rules:

- the fast walker handles the rules that cover nearly every pc of compiled
  code (CFA = SP or frame pointer + constant, return address and saved frame
  pointer at constant offsets from the CFA) and rows that need nothing but
  SP, FP and the pc (signal trampolines). It tracks those three values, reads
  stack words through one `memoryview.cast('Q')`, and finds rules in the
  per-process cache with one dict lookup per frame;
- the generic walker (generic.py) evaluates any row: expressions, register
  rules, the return address in a register, and the frame-pointer fallback.
  When the fast walker meets something it does not handle it hands the whole
  sample to the generic walker, which starts again from the leaf (rare: pcs
  without CFI, stack realignment, aarch64 leaves). The generic walker is also
  the reference the tests compare the fast one with.

Neither raises on hostile data: bad CFI, truncated stacks and loops end the
walk with a reason.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import CfiError
from .generic import (BAD_FRAME, END_OF_STACK, MAX_FRAMES, ROOT_REASON, core_step,
                      sample_registers, walk_generic)
from .regs import ArchRegs, arch_by_name, sample_positions
from .rules import BAD, GENERAL, NO_MAP, ROOT, RULE_NO_CFI, RULE_NO_MAP, Rule
from .space import AddressSpace

MASK64 = (1 << 64) - 1

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
# the slot descriptors: setting through them skips the frozen class's __setattr__
_set_frames = getattr(UnwindResult, "frames").__set__
_set_complete = getattr(UnwindResult, "complete").__set__
_set_reason = getattr(UnwindResult, "reason").__set__


def _result(frames: tuple[int, ...], complete: bool, reason: str) -> UnwindResult:
    """UnwindResult(frames, complete, reason) at half the cost of the frozen __init__
    (which goes through object.__setattr__ per field); same object, same invariants."""
    r = _new(UnwindResult)
    _set_frames(r, frames)
    _set_complete(r, complete)
    _set_reason(r, reason)
    return r


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
        if sp & 7:
            return None
        mv = memoryview(stack)
        if mv.format != "B":
            mv = mv.cast("B")
        if len(mv) & 7:
            mv = mv[:len(mv) & ~7]   # a trailing partial word can hold no saved slot we use
        words = mv.cast("Q")
        nwords = len(words)
        cget = space.rule_cache.get
        frames = [pc]
        append = frames.append
        maxf = self.max_frames
        key = pc
        exact = True
        base = sp
        while True:
            rule = cget(key)
            if rule is None:
                rule = self._lookup(space, key, exact)
            kind, off, ra_off, fp_off, plan = rule
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
            elif kind == GENERAL and plan is not None and plan.core:
                # e.g. a signal trampoline: everything it needs is SP-relative
                step = core_step(plan, self.arch, frames[-1], sp, fp, words, base)
                if step is None:
                    return None
                if isinstance(step, str):
                    return _result(tuple(frames), step == ROOT_REASON, step)
                new_sp, new_fp, ra = step
                if new_sp <= sp or new_sp & 7 or new_fp is None:
                    return None   # e.g. sigaltstack: the generic walker checks that
                sp, fp = new_sp, new_fp
                if not ra:
                    return _result(tuple(frames), True, ROOT_REASON)
                append(ra)
                if len(frames) >= maxf:
                    return _result(tuple(frames), False, MAX_FRAMES)
                exact = plan.signal  # the interrupted frame resumes at its exact pc
                key = ra if exact else ra - 1
                continue
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
            exact = False

    # -- generic walker -------------------------------------------------------------------

    def _walk_generic(self, space: AddressSpace, regs: Sequence[int],
                      stack: bytes | bytearray | memoryview) -> UnwindResult:
        cache = space.rule_cache

        def lookup(key: int, exact: bool) -> Rule:
            rule = cache.get(key)
            return self._lookup(space, key, exact) if rule is None else rule

        sample = sample_registers(self._tracked, regs)
        frames, complete, reason = walk_generic(self.arch, sample, regs[self._pos_ip] & MASK64, stack,
                                                lookup, self.max_frames)
        return _result(frames, complete, reason)
