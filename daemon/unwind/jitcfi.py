"""Unwind tables for JIT code: jitdump unwinding info and CPython's perf trampolines.

Both become an ``ObjectCFI`` over a small in-memory ELF image laid out as
``perf inject --jit`` lays out the objects it writes: the code at
TEXT_OFFSET, ``.eh_frame`` at the next multiple of 8 after the code,
``.eh_frame_hdr`` right after it, one PT_LOAD (offset = vaddr) and a
PT_GNU_EH_FRAME. A JIT writes its CFI for exactly that layout (pc-relative
FDE addresses, a data-relative hdr table), so the bytes are used as they
are. The unwinder then needs nothing new: an address ``ip`` inside code
placed at ``start`` is file offset ``ip - start + TEXT_OFFSET``.

CPython 3.12's ``-X perf`` trampolines come without any CFI. Their frame
layout is fixed by Python/asm_trampoline.S; ``CPYTHON_STUBS`` holds the
stub's exact bytes per architecture with the CFI that describes it, and
``match_stub`` says where a stub sits around an address, from bytes read out
of the process. Nothing is ever assumed from a symbol name.

- x86-64 (checked against the bytes of CPython 3.12.1 processes here):
  ``[endbr64;] sub $8,%rsp; call *%rcx; add $8,%rsp; ret``;
- aarch64 (from the CPython source only; tested with synthetic data):
  ``stp x29,x30,[sp,#-16]!; mov x29,sp; blr x3; ldp x29,x30,[sp],#16; ret``.
  Builds with PAC return-address signing (``hint 25``/``hint 29`` around it)
  are not recognized: their saved return addresses are signed.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from qtools.qformat.objects.elfhdr import EHDR64 as _EHDR, PHDR64 as _PHDR, PT_GNU_EH_FRAME, PT_LOAD

from .objcfi import ObjectCFI
from .regs import AARCH64, X86_64, ArchRegs

TEXT_OFFSET = 0x100
MAX_CODE = 1 << 24

_cache: dict[tuple[str, int, bytes], ObjectCFI] = {}
MAX_CACHED = 4096


def _align8(n: int) -> int:
    return (n + 7) & ~7


def image(arch: ArchRegs, code_size: int, eh_frame: bytes, eh_frame_hdr: bytes) -> bytes:
    """The ELF image (code bytes left zero: unwinding never reads them)."""
    eh_off = TEXT_OFFSET + _align8(code_size)
    hdr_off = eh_off + len(eh_frame)
    end = hdr_off + len(eh_frame_hdr)
    ehdr = _EHDR.pack(b"\x7fELF\x02\x01\x01" + bytes(9), 3, arch.elf_machine, 1, 0,
                      _EHDR.size, 0, 0, _EHDR.size, _PHDR.size, 2, 0, 0, 0)
    load = _PHDR.pack(PT_LOAD, 5, 0, 0, 0, end, end, 8)
    hdr = _PHDR.pack(PT_GNU_EH_FRAME, 4, hdr_off, hdr_off, hdr_off, len(eh_frame_hdr),
                     len(eh_frame_hdr), 4)
    head = ehdr + load + hdr
    return head + bytes(eh_off - len(head)) + eh_frame + eh_frame_hdr


def code_cfi(arch: ArchRegs, code_size: int, eh_frame: bytes, eh_frame_hdr: bytes) -> ObjectCFI:
    """The CFI of one piece of JIT code; shared by every piece with the same
    size and unwind bytes (CPython writes the same bytes for all its
    trampolines, so a whole run needs one)."""
    code_size = min(code_size, MAX_CODE)
    key = (arch.name, code_size, eh_frame + b"|" + eh_frame_hdr)
    cfi = _cache.get(key)
    if cfi is None:
        if len(_cache) >= MAX_CACHED:
            _cache.clear()
        cfi = _cache[key] = ObjectCFI.from_bytes(image(arch, code_size, eh_frame, eh_frame_hdr))
    return cfi


# ---------------------------------------------------------------- writing CFI for a stub

def _uleb(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _sleb(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        done = (v == 0 and not b & 0x40) or (v == -1 and b & 0x40)
        out.append(b if done else b | 0x80)
        if done:
            return bytes(out)


def _entry(body: bytes) -> bytes:
    """A CIE or FDE: length, then the body padded with DW_CFA_nop to 4 bytes."""
    body += bytes(-len(body) % 4)
    return struct.pack("<I", len(body)) + body


def eh_frame_for(arch: ArchRegs, code_size: int, initial: bytes,
                 instructions: bytes) -> tuple[bytes, bytes]:
    """(``.eh_frame``, ``.eh_frame_hdr``) with one CIE and one FDE covering
    [0, code_size), for the layout of ``image``."""
    cie = _entry(struct.pack("<I", 0) + b"\x01zR\x00" + _uleb(arch.code_align)
                 + _sleb(arch.data_align) + _uleb(arch.ra_column) + b"\x01\x1b" + initial)
    fde_start = len(cie)
    eh_off = _align8(code_size)
    # pc_begin (pc-relative, sdata4) sits 8 bytes into the FDE
    pc_begin = -(eh_off + fde_start + 8)
    fde = _entry(struct.pack("<Iii", fde_start + 4, pc_begin, code_size) + b"\x00"
                 + instructions)
    eh_frame = cie + fde
    n = len(eh_frame)
    # hdr: eh_frame_ptr is pc-relative to its own field (hdr + 4), the table data-relative
    hdr = bytes([1, 0x1B, 0x03, 0x3B]) + struct.pack("<iIii", -(n + 4), 1, -(eh_off + n),
                                                     -(n - fde_start))
    return eh_frame, hdr


class Stub(NamedTuple):
    """A fixed trampoline: its bytes and the CFI rows that describe them."""

    name: str
    arch: ArchRegs
    code: bytes
    initial: bytes  # CIE initial instructions
    instructions: bytes  # FDE instructions

    def cfi(self) -> ObjectCFI:
        eh, hdr = eh_frame_for(self.arch, len(self.code), self.initial, self.instructions)
        return code_cfi(self.arch, len(self.code), eh, hdr)


_X86_BODY = bytes.fromhex("4883ec08" "ffd1" "4883c408" "c3")
_ENDBR64 = bytes.fromhex("f30f1efa")
_X86_INIT = b"\x0c\x07\x08" + b"\x90\x01"  # CFA = rsp+8; rip at CFA-8


def _x86_rows(prefix: int) -> bytes:
    # after `sub $8,%rsp`: CFA = rsp+16; after `add $8,%rsp`: rsp+8 again
    return bytes([0x40 | (prefix + 4)]) + b"\x0e\x10" + bytes([0x40 | 6]) + b"\x0e\x08"


_A64_BODY = bytes.fromhex("fd7bbfa9" "fd030091" "60003fd6" "fd7bc1a8" "c0035fd6")
_A64_INIT = b"\x0c\x1f\x00"  # CFA = sp; the return address still in x30
# after stp (1 insn): CFA = sp+16, x29 at CFA-16, x30 at CFA-8; after ldp (3 more): all back
_A64_ROWS = b"\x41\x0e\x10\x9d\x02\x9e\x01" + b"\x43\x0e\x00\xdd\xde"

CPYTHON_STUBS: dict[str, tuple[Stub, ...]] = {
    # the CET build's stub holds the plain one: try it first, so a match gives its true start
    "x86_64": (
        Stub("cpython-3.12-trampoline-cet", X86_64, _ENDBR64 + _X86_BODY, _X86_INIT,
             _x86_rows(4)),
        Stub("cpython-3.12-trampoline", X86_64, _X86_BODY, _X86_INIT, _x86_rows(0)),
    ),
    "aarch64": (
        Stub("cpython-3.12-trampoline", AARCH64, _A64_BODY, _A64_INIT, _A64_ROWS),
    ),
}

MAX_STUB = max(len(s.code) for stubs in CPYTHON_STUBS.values() for s in stubs)


def match_stub(arch: ArchRegs, window: bytes, window_start: int,
               address: int) -> tuple[Stub, int] | None:
    """(stub, its start) if the bytes around ``address`` are one of the
    architecture's CPython trampoline stubs containing it. ``window`` holds
    the process's bytes from ``window_start`` on (MAX_STUB before the
    address to MAX_STUB after it is enough)."""
    for stub in CPYTHON_STUBS.get(arch.name, ()):
        n = len(stub.code)
        for k in range(n):
            start = address - k
            i = start - window_start
            if i >= 0 and window[i:i + n] == stub.code:
                return stub, start
    return None
