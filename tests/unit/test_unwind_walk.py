"""Unwinding synthetic register/stack images through synthetic CFI.

Every case runs through the fast walker and through the generic walker (the
reference): both must give the same result.
"""

from __future__ import annotations

import pytest

from cfi_builder import (LOAD_BIAS, PLT_EXPR, RAX, RBP, RBX, RIP, RSP, R12, TEXT, CieSpec, Cfa,
                         ElfSpec, FdeSpec, Op, Stack, build_elf, load, rt, x86_regs)
from qtools.daemon.unwind import Mappings, ObjectCFI, UnwindResult, Unwinder
from qtools.daemon.unwind.rules import BAD, GENERAL, ROOT, SP_BASED

SP0 = 0x7FFD_0000_1000

# functions of the synthetic text (vaddrs)
LEAF = TEXT + 0x000          # no frame: CIE rules everywhere
MID = TEXT + 0x100           # push rbx; push rbp; sub $0x20,%rsp; call at +0x20
FPF = TEXT + 0x200           # push rbp; mov %rsp,%rbp; call at +0x30
START = TEXT + 0x300         # return address undefined (like _start)
RESTORE_RT = TEXT + 0x400    # signal trampoline; its FDE starts one byte early, as glibc's
PLT = TEXT + 0x500           # a PLT: 16-byte entries
BADF = TEXT + 0x600          # a corrupt FDE
SELF = TEXT + 0x700          # a function calling itself (recursion)

MID_INSNS = (Cfa.advance(1) + Cfa.def_cfa_offset(16) + Cfa.offset(RBX, 2)
             + Cfa.advance(1) + Cfa.def_cfa_offset(24) + Cfa.offset(RBP, 3)
             + Cfa.advance(4) + Cfa.def_cfa_offset(56))
FPF_INSNS = (Cfa.advance(1) + Cfa.def_cfa_offset(16) + Cfa.offset(RBP, 2)
             + Cfa.advance(3) + Cfa.def_cfa_register(RBP))
# glibc's __restore_rt: everything from the ucontext the kernel pushed
SIGCTX = {8: 40, 9: 48, 10: 56, 11: 64, 12: 72, 13: 80, 14: 88, 15: 96, 5: 104, 4: 112, RBP: 120,
          RBX: 128, 1: 136, RAX: 144, 2: 152, RSP: 160, RIP: 168}
RESTORE_INSNS = Cfa.def_cfa_expression(Op.breg(RSP, 160) + Op.deref) + b"".join(
    Cfa.expression(r, Op.breg(RSP, off)) for r, off in SIGCTX.items())

BASE_FDES = [
    FdeSpec(LEAF, 0x40),
    FdeSpec(MID, 0x80, MID_INSNS),
    FdeSpec(FPF, 0x80, FPF_INSNS),
    FdeSpec(START, 0x40, Cfa.undefined(RIP)),
    FdeSpec(RESTORE_RT - 1, 0x10, RESTORE_INSNS, cie=1),
    FdeSpec(PLT, 0x40, Cfa.def_cfa_offset(16) + Cfa.advance(6) + Cfa.def_cfa_expression(PLT_EXPR)),
    FdeSpec(BADF, 0x40, b"\x3f"),
    FdeSpec(SELF, 0x40, Cfa.advance(1) + Cfa.def_cfa_offset(16)),
]
CIES = [CieSpec(), CieSpec(signal=True)]


@pytest.fixture(scope="module")
def image() -> bytes:
    return build_elf(ElfSpec(BASE_FDES, cies=CIES))


@pytest.fixture(params=["fast", "generic"])
def unwinder(request) -> Unwinder:
    return Unwinder(fast=request.param == "fast")


def space_of(image: bytes) -> Mappings:
    return load(image)[0]


def walk(unwinder: Unwinder, image: bytes, regs, stack) -> UnwindResult:
    """Unwind with a fresh address space, compare with the generic walker, and again warm."""
    space = space_of(image)
    got = unwinder.unwind(space, regs, stack)
    assert Unwinder(fast=False).unwind(space_of(image), regs, stack) == got
    assert unwinder.unwind(space, regs, stack) == got          # warm caches: same answer
    return got


def standard_stack(fp_caller: int = 0) -> tuple[Stack, dict[str, int]]:
    """leaf -> mid -> fpf -> start, laid out as the CFI above says."""
    st = Stack(SP0, 1024)
    sp1 = SP0 + 8                                  # mid's SP after leaf returns
    cfa1 = sp1 + 56
    r = SP0 + 0x100                                # fpf's frame pointer
    st.put(SP0, rt(MID + 0x21))                    # leaf's return address
    st.put(cfa1 - 8, rt(FPF + 0x31))               # mid's return address
    st.put(cfa1 - 16, 0xB0B0)                      # saved rbx
    st.put(cfa1 - 24, r)                           # saved rbp: fpf's frame pointer
    st.put(r, fp_caller)                           # fpf's saved rbp
    st.put(r + 8, rt(START + 0x11))                # fpf's return address
    return st, {"r": r, "cfa1": cfa1}


def test_chain_through_sp_and_fp_based_frames_to_a_root(unwinder, image):
    st, _ = standard_stack()
    got = walk(unwinder, image, x86_regs(rt(LEAF + 0x10), SP0, bp=0x1234), st.bytes())
    assert got == UnwindResult((rt(LEAF + 0x10), rt(MID + 0x21), rt(FPF + 0x31), rt(START + 0x11)),
                               True, "root")


def test_zero_return_address_ends_cleanly(unwinder, image):
    st = Stack(SP0).put(SP0, 0)
    got = walk(unwinder, image, x86_regs(rt(LEAF + 1), SP0), st.bytes())
    assert got == UnwindResult((rt(LEAF + 1),), True, "root")


@pytest.mark.parametrize("cut, frames", [(0, 1), (8, 2), (0x38, 2), (0x40, 3), (0x108, 3)])
def test_end_of_the_copied_stack(unwinder, image, cut, frames):
    st, _ = standard_stack()
    got = walk(unwinder, image, x86_regs(rt(LEAF + 0x10), SP0), st.bytes()[:cut])
    assert got.reason == "end-of-stack" and not got.complete and len(got.frames) == frames


def test_stack_as_memoryview_bytearray_and_odd_length(unwinder, image):
    st, _ = standard_stack()
    regs = x86_regs(rt(LEAF + 0x10), SP0)
    want = walk(unwinder, image, regs, st.bytes())
    assert walk(unwinder, image, regs, memoryview(st.bytes())) == want
    assert walk(unwinder, image, regs, bytearray(st.bytes()) + b"\1\2\3") == want


def test_unaligned_stack_pointer(unwinder, image):
    sp = SP0 + 4
    st = Stack(sp, 64).put(sp, 0x10).put(sp, 0)       # leaf's RA at an unaligned address
    st.put(sp, rt(START + 0x11))
    got = walk(unwinder, image, x86_regs(rt(LEAF + 3), sp), st.bytes())
    assert got == UnwindResult((rt(LEAF + 3), rt(START + 0x11)), True, "root")


def test_epilogue_save_slot_below_sp_is_already_restored(unwinder):
    # like __tan_fma: at the final ret CFA = rsp + 8 but "rbp at CFA-16" is still in force
    leaf = FdeSpec(LEAF, 0x40, Cfa.offset(RBP, 2))
    image = build_elf(ElfSpec([leaf] + BASE_FDES[1:], cies=CIES))
    st = Stack(SP0, 256)
    r = SP0 + 0x40
    st.put(SP0, rt(FPF + 0x31)).put(r, 0).put(r + 8, rt(START + 0x11))
    got = walk(unwinder, image, x86_regs(rt(LEAF + 0x20), SP0, bp=r), st.bytes())
    assert got == UnwindResult((rt(LEAF + 0x20), rt(FPF + 0x31), rt(START + 0x11)), True, "root")


@pytest.mark.parametrize("slot, cfa", [(0, 16), (5, 16), (6, 8), (10, 8), (11, 16), (15, 16),
                                       (16 + 10, 8), (16 + 11, 16)])
def test_plt_expression(unwinder, image, slot, cfa):
    pc = PLT + slot
    st = Stack(SP0, 64).put(SP0 + cfa - 8, rt(START + 0x11))
    got = walk(unwinder, image, x86_regs(rt(pc), SP0), st.bytes())
    assert got == UnwindResult((rt(pc), rt(START + 0x11)), True, "root")
    if slot >= 6:
        rule, _ = load(image)[1].rule_at(pc, True)
        assert rule[:2] == (SP_BASED, cfa)      # reduced to a plain SP rule for this pc


def test_signal_frame_then_exact_pc_lookup(unwinder, image):
    # handler (leaf) returns into __restore_rt; the ucontext above holds the interrupted
    # registers; the interrupted pc is the first byte of MID, whose pc-1 has no FDE
    st = Stack(SP0, 2048)
    h = SP0 + 8                                    # SP in __restore_rt = the sigframe
    isp = SP0 + 0x400                              # interrupted SP
    r = isp + 0x80                                 # fpf's frame pointer, from the ucontext
    st.put(SP0, rt(RESTORE_RT))
    for reg, off in SIGCTX.items():
        st.put(h + off, 0xDEAD0000 + reg)
    st.put(h + SIGCTX[RSP], isp).put(h + SIGCTX[RIP], rt(MID)).put(h + SIGCTX[RBP], r)
    st.put(isp, rt(FPF + 0x31))                    # MID at entry: its return address at SP
    st.put(r, 0).put(r + 8, rt(START + 0x11))
    got = walk(unwinder, image, x86_regs(rt(LEAF + 0x10), SP0), st.bytes())
    assert got == UnwindResult((rt(LEAF + 0x10), rt(RESTORE_RT), rt(MID), rt(FPF + 0x31),
                                rt(START + 0x11)), True, "root")


def test_signal_frame_beyond_the_copy(unwinder, image):
    st = Stack(SP0, 64).put(SP0, rt(RESTORE_RT))  # the ucontext is not in the copy
    got = walk(unwinder, image, x86_regs(rt(LEAF + 0x10), SP0), st.bytes())
    assert got == UnwindResult((rt(LEAF + 0x10), rt(RESTORE_RT)), False, "end-of-stack")


def test_register_rule_and_tracking_of_other_registers(unwinder):
    # F1 keeps the caller's rbp in rbx; F2's CFA is based on r12, which F1 saved on the stack
    f1 = FdeSpec(LEAF, 0x40, Cfa.register(RBP, RBX) + Cfa.def_cfa_offset(24) + Cfa.offset(R12, 2))
    f2 = FdeSpec(MID, 0x40, Cfa.def_cfa(R12, 8))
    image = build_elf(ElfSpec([f1, f2] + BASE_FDES[2:], cies=CIES))
    st = Stack(SP0, 512)
    cfa1 = SP0 + 24
    r12 = SP0 + 0x80
    r = SP0 + 0x100
    st.put(cfa1 - 8, rt(MID + 0x21)).put(cfa1 - 16, r12)
    st.put(r12, rt(FPF + 0x31))                    # F2: CFA = r12 + 8, RA at CFA - 8
    st.put(r, 0).put(r + 8, rt(START + 0x11))
    got = walk(unwinder, image, x86_regs(rt(LEAF + 5), SP0, bp=0x999, rbx=r, r12=0x777), st.bytes())
    assert got == UnwindResult((rt(LEAF + 5), rt(MID + 0x21), rt(FPF + 0x31), rt(START + 0x11)),
                               True, "root")


def test_same_value_val_offset_and_expression_rules(unwinder):
    # realigned frame (gcc's DRAP): CFA = *(rbp - 8), rbp saved at the address rbp + 0
    f1 = FdeSpec(LEAF, 0x40, Cfa.def_cfa_expression(Op.breg(RBP, -8) + Op.deref)
                 + Cfa.expression(RBP, Op.breg(RBP, 0)) + Cfa.same_value(RBX)
                 + Cfa.val_offset(RAX, 0))
    image = build_elf(ElfSpec([f1] + BASE_FDES[1:], cies=CIES))
    st = Stack(SP0, 512)
    rbp = SP0 + 0x40
    cfa = SP0 + 0x90
    r = SP0 + 0x100
    st.put(rbp - 8, cfa).put(rbp, r).put(cfa - 8, rt(FPF + 0x31))
    st.put(r, 0).put(r + 8, rt(START + 0x11))
    got = walk(unwinder, image, x86_regs(rt(LEAF + 5), SP0, bp=rbp), st.bytes())
    assert got == UnwindResult((rt(LEAF + 5), rt(FPF + 0x31), rt(START + 0x11)), True, "root")
    rule, _ = load(image)[1].rule_at(LEAF + 5, True)
    assert rule[0] == GENERAL


def test_corrupt_fde_stops_as_bad_frame(unwinder, image):
    st = Stack(SP0, 64).put(SP0, rt(BADF + 0x11))
    got = walk(unwinder, image, x86_regs(rt(LEAF + 1), SP0), st.bytes())
    assert got == UnwindResult((rt(LEAF + 1), rt(BADF + 0x11)), False, "bad-frame")
    assert load(image)[1].rule_at(BADF + 0x10, False)[0][0] == BAD


def test_cfa_that_does_not_move_up_is_a_bad_frame(unwinder):
    loop = FdeSpec(LEAF, 0x40, Cfa.def_cfa(RSP, 0))  # RA would be below SP
    image = build_elf(ElfSpec([loop], cies=CIES))
    st = Stack(SP0, 64).put(SP0, rt(LEAF + 1))
    got = walk(unwinder, image, x86_regs(rt(LEAF + 1), SP0 + 8), Stack(SP0 + 8, 64).bytes())
    assert got == UnwindResult((rt(LEAF + 1),), False, "bad-frame")
    del st


def test_return_address_outside_every_mapping_is_dropped(unwinder, image):
    st = Stack(SP0, 64).put(SP0, 0x1234_5678)
    got = walk(unwinder, image, x86_regs(rt(LEAF + 1), SP0), st.bytes())
    assert got == UnwindResult((rt(LEAF + 1),), False, "bad-frame")


def test_max_frames(image):
    st = Stack(SP0, 8 * 1024)
    for i in range(500):                            # SELF: CFA = rsp + 16 after its push
        st.put(SP0 + 16 * i + 8, rt(SELF + 0x11))
    for fast in (True, False):
        got = Unwinder(max_frames=50, fast=fast).unwind(space_of(image), x86_regs(rt(SELF + 4), SP0),
                                                        st.bytes())
        assert got.reason == "max-frames" and len(got.frames) == 50 and not got.complete


def test_no_registers():
    u = Unwinder()
    assert u.unwind(Mappings(), (), b"") == UnwindResult((), False, "no-regs")
    assert u.unwind(Mappings(), (1, 2, 3), b"") == UnwindResult((), False, "no-regs")
    assert u.regs_mask == 0xFF0FFF


# -- frame-pointer fallback ------------------------------------------------------------------

def fp_chain(n: int, gap: int = 0x40, code: int = LEAF) -> tuple[Stack, list[int]]:
    """n frame records linked through rbp, the last with a zero saved rbp."""
    st = Stack(SP0, 4096)
    fps = [SP0 + 0x20 + gap * i for i in range(n)]
    ras = [rt(code + 0x10 + i) for i in range(n)]
    for i, fp in enumerate(fps):
        st.put(fp, fps[i + 1] if i + 1 < n else 0).put(fp + 8, ras[i])
    return st, ras


def test_frame_pointer_fallback_without_cfi(unwinder):
    image = build_elf(ElfSpec([], hdr="none"))
    st, ras = fp_chain(4)
    got = walk(unwinder, image, x86_regs(rt(LEAF + 1), SP0, bp=SP0 + 0x20), st.bytes())
    assert got == UnwindResult((rt(LEAF + 1), *ras), True, "root")


def test_frame_pointer_fallback_in_unmapped_or_anonymous_code(unwinder, image):
    st, ras = fp_chain(2)
    space = Mappings()
    space.add(0x5000_0000, 0x5001_0000, 0, None)      # anonymous executable memory (JIT)
    cfi = ObjectCFI.from_bytes(build_elf(ElfSpec([], hdr="none")))
    space.add(LOAD_BIAS, LOAD_BIAS + 0x10000, 0, cfi)
    for pc in (0x5000_0100, 0x6000_0000):             # JIT code, and no mapping at all
        got = unwinder.unwind(space, x86_regs(pc, SP0, bp=SP0 + 0x20), st.bytes())
        assert got == UnwindResult((pc, *ras), True, "root")


@pytest.mark.parametrize("bad_link", [SP0 + 0x10, SP0 + 0x21, SP0 + 0x60, SP0 + 0x100000])
def test_frame_pointer_fallback_sanity_checks(unwinder, bad_link):
    image = build_elf(ElfSpec([], hdr="none"))
    st, ras = fp_chain(3)
    st.put(SP0 + 0x60, bad_link)                      # the second record links somewhere bad
    got = walk(unwinder, image, x86_regs(rt(LEAF + 1), SP0, bp=SP0 + 0x20), st.bytes())
    assert not got.complete and got.reason in ("no-cfi", "end-of-stack")
    assert got.frames[:3] == (rt(LEAF + 1), *ras[:2])


def test_frame_pointer_below_sp_is_refused(unwinder):
    image = build_elf(ElfSpec([], hdr="none"))
    got = walk(unwinder, image, x86_regs(rt(LEAF + 1), SP0, bp=SP0 - 16), Stack(SP0, 64).bytes())
    assert got == UnwindResult((rt(LEAF + 1),), False, "no-cfi")


def test_frames_without_fde_in_an_object_with_cfi_use_frame_pointers(unwinder, image):
    st, ras = fp_chain(2, code=TEXT + 0x800)
    pc = rt(TEXT + 0x800)                             # no FDE covers it
    got = walk(unwinder, image, x86_regs(pc, SP0, bp=SP0 + 0x20), st.bytes())
    assert got == UnwindResult((pc, *ras), True, "root")


# -- caches ----------------------------------------------------------------------------------

class CountingSpace(Mappings):
    def __init__(self) -> None:
        super().__init__()
        self.finds = 0

    def find(self, ip: int):
        self.finds += 1
        return super().find(ip)


def test_caches_per_process_and_per_object(image):
    cfi = ObjectCFI.from_bytes(image)
    a, b = CountingSpace(), CountingSpace()
    a.add(LOAD_BIAS, LOAD_BIAS + len(image), 0, cfi)
    b.add(LOAD_BIAS + 0x10_0000, LOAD_BIAS + 0x10_0000 + len(image), 0, cfi)  # another bias
    st, _ = standard_stack()
    u = Unwinder()
    first = u.unwind(a, x86_regs(rt(LEAF + 0x10), SP0), st.bytes())
    assert first.complete and a.finds == 4 and len(a.rule_cache) == 4
    decoded = cfi.fdes_decoded
    assert u.unwind(a, x86_regs(rt(LEAF + 0x10), SP0), st.bytes()) == first and a.finds == 4
    # the other process maps the same content elsewhere: no FDE is decoded again
    shift = 0x10_0000
    st2 = Stack(SP0, 1024)
    st2.data[:] = st.data
    for addr in range(SP0, SP0 + 1024, 8):
        v = int.from_bytes(st.data[addr - SP0:addr - SP0 + 8], "little")
        if LOAD_BIAS <= v < LOAD_BIAS + len(image):
            st2.put(addr, v + shift)
    got = u.unwind(b, x86_regs(rt(LEAF + 0x10) + shift, SP0), st2.bytes())
    assert got.frames == tuple(f + shift for f in first.frames) and got.complete
    assert cfi.fdes_decoded == decoded
    # a changed mapping clears the per-process cache
    a.remove(LOAD_BIAS, LOAD_BIAS + 1)
    assert not a.rule_cache and len(a) == 0


def test_rule_kinds(image):
    _, cfi = load(image)
    assert cfi.rule_at(START + 0x10, False)[0][0] == ROOT
    assert cfi.rule_at(MID + 0x20, False)[0][:3] == (SP_BASED, 56, -8)
    assert cfi.rule_at(RESTORE_RT - 1, False)[0][0] == GENERAL


def test_mappings_add_replace_remove_find():
    space = Mappings()
    a, b = ObjectCFI.from_bytes(b""), ObjectCFI.from_bytes(b"")
    space.add(0x1000, 0x2000, 0, a)
    space.add(0x3000, 0x5000, 0x2000, b)
    space.rule_cache[0x1234] = (0, 8, -8, None, None)
    assert space.find(0x1FFF) == (a, 0x1000, 0) and space.find(0x4000) == (b, 0x3000, 0x2000)
    assert space.find(0x2000) is None and space.find(0xFFF) is None and space.find(0x5000) is None
    space.add(0x1800, 0x3800, 0x800, None)        # overlaps both: they are replaced
    assert len(space) == 1 and space.find(0x1000) is None and space.find(0x1800) == (None, 0x1800, 0x800)
    assert not space.rule_cache


def test_stack_as_a_memoryview_of_another_format(unwinder, image):
    import array

    st, _ = standard_stack()
    regs = x86_regs(rt(LEAF + 0x10), SP0)
    want = walk(unwinder, image, regs, st.bytes())
    assert want.complete
    as_u32 = memoryview(array.array("I", st.bytes()))
    assert unwinder.unwind(space_of(image), regs, as_u32) == want
    assert unwinder.unwind(space_of(image), regs, memoryview(st.bytes()).cast("Q")) == want


def test_pc_dependent_cfa_without_a_return_address_rule(unwinder):
    # A crafted CIE may leave the RA column without a rule under a PLT-style CFA
    # expression: the fast walker hands the frame over instead of failing on it.
    cie = CieSpec(insns=Cfa.def_cfa(RSP, 8))
    image = build_elf(ElfSpec([FdeSpec(PLT, 0x40, Cfa.def_cfa_expression(PLT_EXPR))], cies=[cie]))
    st = Stack(SP0, 64).put(SP0 + 8, rt(START + 0x11))
    got = walk(unwinder, image, x86_regs(rt(PLT + 6), SP0), st.bytes())
    assert got.frames[0] == rt(PLT + 6) and not got.complete
