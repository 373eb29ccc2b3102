"""Unwinding through JIT code: CFI written for jitdump's layout, and
CPython's perf trampoline stub recognized by its bytes.

The aarch64 stub is exercised with synthetic registers and stacks only: this
machine is x86-64. The x86-64 stub bytes were checked against CPython 3.12.1
processes (`-X perf`) and 3.13.0 jitdumps (`-X perf_jit`) on this machine."""

from __future__ import annotations

import struct

import pytest

from qtools.daemon.unwind import Mappings, Unwinder
from qtools.daemon.unwind.jitcfi import (CPYTHON_STUBS, TEXT_OFFSET, code_cfi, eh_frame_for,
                                         match_stub)
from qtools.daemon.unwind.regs import AARCH64, X86_64, sample_positions

# what CPython 3.13.0 wrote into a jitdump here for every trampoline (11 bytes of code)
CPYTHON_313_EH_FRAME = bytes.fromhex(
    "1400000000000000017a5200017810011b0c070890010000"
    "140000001c000000d0ffffff0b00000000440e10460e0800")
CPYTHON_313_HDR = bytes.fromhex("011b033bccffffff01000000c0ffffffe8ffffff")

LEAF, STUB, ROOT = 0x40_0000, 0x50_0000, 0x60_0000
SP0 = 0x7FFF_0000_0000


def test_our_cfi_for_the_x86_64_stub_is_byte_for_byte_cpythons():
    stub = CPYTHON_STUBS["x86_64"][1]
    assert eh_frame_for(X86_64, len(stub.code), stub.initial, stub.instructions) == (
        CPYTHON_313_EH_FRAME, CPYTHON_313_HDR)


def test_jitdump_cfi_gives_the_stub_rows():
    cfi = code_cfi(X86_64, 11, CPYTHON_313_EH_FRAME, CPYTHON_313_HDR)
    cfa = {pc: cfi.rule_at(TEXT_OFFSET + pc, True)[0][1] for pc in (0, 4, 6, 10)}
    assert cfa == {0: 8, 4: 16, 6: 16, 10: 8}


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_stub_is_found_around_any_address_inside_it(arch):
    for stub in CPYTHON_STUBS[arch]:
        base = 0x1000
        window = b"\xcc" * 32 + stub.code + b"\xcc" * 32
        for k in range(len(stub.code)):
            hit = match_stub(stub.arch, window, base, base + 32 + k)
            assert hit is not None and hit[1] == base + 32
        assert match_stub(stub.arch, window, base, base + 31) is None


def test_bytes_that_merely_resemble_the_stub_are_not_taken():
    code = bytearray(CPYTHON_STUBS["x86_64"][0].code)
    code[5] ^= 1  # call *%rcx -> something else
    assert match_stub(X86_64, bytes(code), 0, 3) is None
    assert match_stub(AARCH64, CPYTHON_STUBS["x86_64"][0].code, 0, 3) is None


def _space(arch, stub_cfi, leaf_init: bytes, root_init: bytes) -> Mappings:
    space = Mappings()
    leaf = code_cfi(arch, 0x100, *eh_frame_for(arch, 0x100, leaf_init, b""))
    root = code_cfi(arch, 0x100, *eh_frame_for(arch, 0x100, root_init, b""))
    space.add(LEAF, LEAF + 0x100, TEXT_OFFSET, leaf)
    space.add(STUB, STUB + 0x40, TEXT_OFFSET, stub_cfi)
    space.add(ROOT, ROOT + 0x100, TEXT_OFFSET, root)
    return space


def _regs(arch, values: dict[int, int]) -> list[int]:
    pos = sample_positions(arch, arch.sample_mask)
    regs = [0] * arch.sample_mask.bit_count()
    for dwarf, value in values.items():
        regs[pos[dwarf]] = value
    return regs


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("variant", [1, 0], ids=["plain", "endbr64"])
def test_x86_64_stack_through_the_trampoline_reaches_the_root(fast, variant):
    stub = CPYTHON_STUBS["x86_64"][variant]
    call_end = 6 + 4 * (variant == 0)  # the return address: just after `call *%rcx`
    space = _space(X86_64, stub.cfi(), stub.initial, stub.initial + b"\x07\x10")
    # leaf (CFA = rsp+8) returns into the stub; the stub's `sub $8` left a slot
    stack = struct.pack("<QQQ", STUB + call_end, 0xDEAD, ROOT + 0x20)
    regs = _regs(X86_64, {X86_64.ip: LEAF + 0x10, X86_64.sp: SP0, X86_64.fp: 0})
    got = Unwinder("x86_64", fast=fast).unwind(space, regs, stack)
    assert got.frames == (LEAF + 0x10, STUB + call_end, ROOT + 0x20)
    assert got.complete


def test_aarch64_stack_through_the_trampoline_reaches_the_root_synthetic_data():
    stub = CPYTHON_STUBS["aarch64"][0]
    # the leaf has not saved its return address: it is still in x30
    space = _space(AARCH64, stub.cfi(), stub.initial, stub.initial + b"\x07\x1e")
    stack = struct.pack("<QQ", SP0 + 0x100, ROOT + 0x20)  # the stub's stp: x29, x30
    regs = _regs(AARCH64, {AARCH64.ip: LEAF + 0x10, AARCH64.sp: SP0, AARCH64.fp: SP0,
                           AARCH64.lr: STUB + 12})
    got = Unwinder("aarch64").unwind(space, regs, stack)
    assert got.frames == (LEAF + 0x10, STUB + 12, ROOT + 0x20)
    assert got.complete


def test_aarch64_pc_inside_the_stub_after_its_stp():
    stub = CPYTHON_STUBS["aarch64"][0]
    space = _space(AARCH64, stub.cfi(), stub.initial, stub.initial + b"\x07\x1e")
    stack = struct.pack("<QQ", SP0 + 0x100, ROOT + 0x20)
    regs = _regs(AARCH64, {AARCH64.ip: STUB + 8, AARCH64.sp: SP0, AARCH64.fp: SP0,
                           AARCH64.lr: 0x1234})  # lr is stale: the saved x30 counts
    got = Unwinder("aarch64").unwind(space, regs, stack)
    assert got.frames == (STUB + 8, ROOT + 0x20) and got.complete
