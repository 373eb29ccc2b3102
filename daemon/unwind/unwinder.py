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
from typing import Any, NamedTuple

from .unwinderrors import CfiError
from .generic import (BAD_FRAME, END_OF_STACK, MAX_FRAMES, ROOT_REASON, core_step,
                      sample_registers, walk_generic)
from .regs import ArchRegs, arch_by_name, sample_positions
from .rules import BAD, GENERAL, NO_MAP, ROOT, RULE_NO_CFI, RULE_NO_MAP, Rule
from .memo import WalkMemo
from .procspace import AddressSpace

MASK64 = (1 << 64) - 1

NO_REGS = "no-regs"

# What hostile bytes can make Python raise inside a walk; the walk then stops as a bad frame.
_WALK_ERRORS = (CfiError, IndexError, ValueError, TypeError, OverflowError, ArithmeticError,
                struct.error, RecursionError)


class UnwindResult(NamedTuple):
    """One unwound user stack."""

    #: ip of the leaf, then return addresses as found on the stack (NOT minus 1)
    frames: tuple[int, ...]
    #: ended at a root: return address undefined by CFI (_start, clone3) or zero
    complete: bool
    #: why it stopped: "root", "end-of-stack", "no-cfi", "bad-frame", "max-frames", "no-regs"
    reason: str


_NO_REGS = UnwindResult((), False, NO_REGS)

class Unwinder:
    """DWARF CFI unwinder for one architecture (see the module doc)."""

    def __init__(self, arch: str = "x86_64", max_frames: int = 127, regs_mask: int | None = None,
                 fast: bool = True, memo: bool = True) -> None:
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
        #: walks remembered (memo.py); None: every sample walked afresh
        self.memo: WalkMemo | None = WalkMemo() if memo and self._fast else None

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
                tried = self.memo is not None and (stack.__class__ is not memoryview
                                                   or stack.itemsize == 1)
                if tried:
                    result = self.recall(space, regs, stack)
                    if result is not None:
                        return result
                result = self._walk_fast(space, regs, stack, tried)
                if result is not None:
                    return result
            return self._walk_generic(space, regs, stack)
        except _WALK_ERRORS:
            return UnwindResult((regs[self._pos_ip] & MASK64,), False, BAD_FRAME)

    def recall(self, space: AddressSpace, regs: Sequence[int],
               stack: bytes | bytearray | memoryview) -> UnwindResult | None:
        """What ``unwind`` gives this sample when a walk remembered for its
        very start (pc, SP, FP) read the same stack words (memo.py); None
        when none was, or it read others: nothing is walked here."""
        memo = self.memo
        if memo is None or len(regs) != self._nregs or \
                (stack.__class__ is memoryview and stack.itemsize != 1):  # type: ignore[union-attr]
            return None
        serial = getattr(space, "serial", None)
        if serial is None:
            return None
        sp = regs[self._pos_sp]
        return memo.recall((serial, 1, regs[self._pos_ip], sp), stack, sp,  # type: ignore[no-any-return]
                           len(stack) & ~7, regs[self._pos_fp])  # type: ignore[index]

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
                   stack: bytes | bytearray | memoryview, tried: bool = False
                   ) -> UnwindResult | None:
        """Unwind with SP/FP-based rules only; None hands the sample to the generic walker.

        compile_row only emits fast rules whose offsets are multiples of 8 and
        whose return-address slot lies below the CFA, so with an 8-aligned SP
        every slot is a whole word of the copy and the CFA always moves up.
        A walk from a start seen before, over the same stack bytes, is
        recalled instead (memo.py).
        """
        pc = regs[self._pos_ip]
        sp = regs[self._pos_sp]
        fp = regs[self._pos_fp]  # type: ignore[index]
        if sp & 7:
            return None
        mv = memoryview(stack)
        if mv.format != "B":
            mv = mv.cast("B")
        nbytes = len(mv) & ~7   # a trailing partial word can hold no saved slot we use
        if nbytes != len(mv):
            mv = mv[:nbytes]
        memo = self.memo
        serial = getattr(space, "serial", None) if memo is not None else None
        if serial is None:
            return self._walk(space, mv, pc, sp, fp, None)[0]
        key1 = (serial, 1, pc, sp)
        if not tried:  # (unwind tries when the copy is bytes already)
            result = memo.recall(key1, mv, sp, nbytes, fp)  # type: ignore[union-attr]
            if result is not None:
                return result  # type: ignore[no-any-return]
        result, reads, fail_at, second, deps = self._walk(space, mv, pc, sp, fp, memo)
        if result is None or reads is None:
            return result  # handed on, or not to be remembered
        if memo is None:  # (never: a serial is asked of the memo's space)
            return result
        if second is not None:
            key2, fp2, tail = second
            d2 = key2[3] - sp
            if tail is None:  # recalled from the second start: its words are ours too
                reads += [d2 + off for off in memo.offsets(key2)]
                fail_at = memo.fail_at(key2)
            elif memo.again(key2):
                memo.keep(key2, mv, sp, tuple(sorted({r - d2 for r in reads if r >= d2})),
                          fail_at, fp2 if deps & 2 else None, tail)
        if memo.again(key1):
            memo.keep(key1, mv, sp, tuple(sorted(set(reads))), fail_at,
                      fp if deps & 1 else None, result)
        return result

    def _walk(self, space: AddressSpace, mv: memoryview, pc: int, sp: int, fp: int,
              memo: WalkMemo | None) -> tuple[UnwindResult | None, list[int] | None, int, Any, int]:
        """The fast walk of a stack copy from address ``sp``: (result or None,
        the offsets from ``sp`` of the words read, or None when the walk may
        not be remembered, the address of a read past the copy or -1, the
        second start: (its key, its FP, (frames from it, complete, reason),
        or None when it was recalled), which starts' FP the walk used: bit 0
        the sample's, bit 1 the second start's)."""
        words = mv.cast("Q")
        nwords = len(words)
        cget = space.rule_cache.get
        cache = space.rule_cache
        frames = [pc]
        append = frames.append
        maxf = self.max_frames
        key = pc
        exact = True
        base = sp
        reads: list[int] | None = [] if memo is not None else None
        second: Any = None
        origin = 1  # the starts whose FP the register still holds (bits as deps)
        deps = 0
        while True:
            rule = cget(key)
            if rule is None:
                rule = self._lookup(space, key, exact)
                if key not in cache:
                    reads = None   # a rule that may differ next time: not remembered
            kind, off, ra_off, fp_off, plan = rule
            if kind == 0:                     # SP_BASED
                cfa = sp + off
            elif kind == 1:                   # FP_BASED
                deps |= origin
                if fp & 7:
                    return None, None, -1, None, deps
                cfa = fp + off
            elif kind == ROOT:
                return self._end(frames, True, ROOT_REASON, reads, -1, second, deps)
            elif kind == BAD:
                return self._end(frames, False, BAD_FRAME, reads, -1, second, deps)
            elif kind == NO_MAP and len(frames) > 1:
                frames.pop()  # a return address outside every executable mapping is garbage
                return self._end(frames, False, BAD_FRAME, reads, -1, second, deps)
            elif kind == GENERAL and plan is not None and plan.core:
                # e.g. a signal trampoline: everything it needs is SP-relative
                reads = None   # it reads the stack where it likes: not remembered
                step = core_step(plan, self.arch, frames[-1], sp, fp, words, base)
                if step is None:
                    return None, None, -1, None, deps
                if isinstance(step, str):
                    done = UnwindResult(tuple(frames), step == ROOT_REASON, step)
                    return done, None, -1, None, deps
                new_sp, new_fp, ra = step
                if new_sp <= sp or new_sp & 7 or new_fp is None:
                    # e.g. sigaltstack: the generic walker checks
                    return None, None, -1, None, deps
                sp, fp = new_sp, new_fp
                if not ra:
                    return UnwindResult(tuple(frames), True, ROOT_REASON), None, -1, None, deps
                append(ra)
                if len(frames) >= maxf:
                    return UnwindResult(tuple(frames), False, MAX_FRAMES), None, -1, None, deps
                exact = plan.signal  # the interrupted frame resumes at its exact pc
                key = ra if exact else ra - 1
                continue
            else:
                return None, None, -1, None, deps
            a = cfa + ra_off
            if a < sp:
                return None, None, -1, None, deps
            i = (a - base) >> 3
            if i >= nwords:
                return self._end(frames, False, END_OF_STACK, reads, a, second, deps)
            ra = words[i]
            if reads is not None:
                reads.append(i << 3)
            if fp_off is not None:
                a = cfa + fp_off
                # a save slot below SP was already popped: the register holds the caller's value
                if a >= sp:
                    i = (a - base) >> 3
                    if i >= nwords:
                        return None, None, -1, None, deps
                    fp = words[i]
                    origin = 0
                    if reads is not None:
                        reads.append(i << 3)
            sp = cfa
            if not ra:
                return self._end(frames, True, ROOT_REASON, reads, -1, second, deps)
            append(ra)
            if len(frames) >= maxf:
                return self._end(frames, False, MAX_FRAMES, reads, -1, second, deps)
            key = ra - 1
            exact = False
            if len(frames) == 2 and reads is not None:
                # the caller's state: shared by every sample of this invocation
                key2 = (space.serial, 2, key, sp)  # type: ignore[attr-defined]
                tail = memo.recall(key2, mv, base, nwords << 3, fp)  # type: ignore[union-attr]
                if tail is not None:
                    if memo.uses_fp(key2):  # type: ignore[union-attr]
                        deps |= origin
                    done = UnwindResult((pc,) + tail[0], tail[1], tail[2])
                    return done, reads, -1, (key2, fp, None), deps
                second = (key2, fp)
                origin |= 2

    @staticmethod
    def _end(frames: list[int], complete: bool, reason: str, reads: list[int] | None,
             fail_at: int, second: Any, deps: int
             ) -> tuple[UnwindResult, list[int] | None, int, Any, int]:
        result = UnwindResult(tuple(frames), complete, reason)
        if second is not None:  # what the walk gave from its second start on
            second = (*second, (result.frames[1:], complete, reason))
        return result, reads, fail_at, second, deps

    # -- generic walker -------------------------------------------------------------------

    def _walk_generic(self, space: AddressSpace, regs: Sequence[int],
                      stack: bytes | bytearray | memoryview) -> UnwindResult:
        cache = space.rule_cache

        def lookup(key: int, exact: bool) -> Rule:
            rule = cache.get(key)
            return self._lookup(space, key, exact) if rule is None else rule

        sample = sample_registers(self._tracked, regs)
        frames, complete, reason = walk_generic(self.arch, sample, regs[self._pos_ip] & MASK64,
                                                stack, lookup, self.max_frames)
        return UnwindResult(frames, complete, reason)
