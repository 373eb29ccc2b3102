"""Build unwind test fixtures from Python: CFA programs, DWARF expressions,
CIE/FDE bytes, tiny ELF files with `.eh_frame_hdr`, register sets and stack
images. The fixtures of tests/unit/test_unwind_*.py are built from these
sources rather than stored as binaries.

The ELF is one PT_LOAD mapping the whole file at vaddr == file offset, so a
"text" area of zero bytes at TEXT..TEXT_END provides pcs; the CFI sections
follow it. Optional section headers describe them for the scan fallbacks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

TEXT = 0x1000
TEXT_END = 0x9000
LOAD_BIAS = 0x7F00_0000_0000   # where the synthetic object is "mapped" in the fake process

RAX, RDX, RCX, RBX, RSI, RDI, RBP, RSP = 0, 1, 2, 3, 4, 5, 6, 7
R8, R12, R13, R14, R15, RIP = 8, 12, 13, 14, 15, 16
# perf positions for mask 0xff0fff
PERF_POS = {RAX: 0, RBX: 1, RCX: 2, RDX: 3, RSI: 4, RDI: 5, RBP: 6, RSP: 7, RIP: 8,
            **{8 + i: 12 + i for i in range(8)}}


def uleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def sleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if (n == 0 and not b & 0x40) or (n == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


class Op:
    """DWARF expression operations (bytes)."""

    @staticmethod
    def breg(reg: int, off: int) -> bytes:
        return bytes([0x70 + reg]) + sleb(off) if reg < 32 else b"\x92" + uleb(reg) + sleb(off)

    @staticmethod
    def lit(n: int) -> bytes:
        return bytes([0x30 + n])

    @staticmethod
    def constu(n: int) -> bytes:
        return b"\x10" + uleb(n)

    @staticmethod
    def consts(n: int) -> bytes:
        return b"\x11" + sleb(n)

    @staticmethod
    def plus_uconst(n: int) -> bytes:
        return b"\x23" + uleb(n)

    @staticmethod
    def skip(n: int) -> bytes:
        return b"\x2f" + struct.pack("<h", n)

    @staticmethod
    def bra(n: int) -> bytes:
        return b"\x28" + struct.pack("<h", n)

    deref = b"\x06"
    dup, drop, over, swap, rot = b"\x12", b"\x13", b"\x14", b"\x16", b"\x17"
    abs_, and_, div, minus, mod, mul, neg, not_, or_, plus = (
        b"\x19", b"\x1a", b"\x1b", b"\x1c", b"\x1d", b"\x1e", b"\x1f", b"\x20", b"\x21", b"\x22")
    shl, shr, shra, xor = b"\x24", b"\x25", b"\x26", b"\x27"
    eq, ge, gt, le, lt, ne = b"\x29", b"\x2a", b"\x2b", b"\x2c", b"\x2d", b"\x2e"
    nop = b"\x96"


#: the CFA expression of x86_64 PLT entries (readelf on any lazily bound binary)
PLT_EXPR = (Op.breg(RSP, 8) + Op.breg(RIP, 0) + Op.lit(15) + Op.and_ + Op.lit(11) + Op.ge
            + Op.lit(3) + Op.shl + Op.plus)


def _block(b: bytes) -> bytes:
    return uleb(len(b)) + b


class Cfa:
    """CFA instructions (bytes). Offsets of *_sf and offset rules are factored by data_align."""

    @staticmethod
    def advance(delta: int) -> bytes:
        if delta < 0x40:
            return bytes([0x40 | delta])
        if delta < 0x100:
            return b"\x02" + struct.pack("<B", delta)
        if delta < 0x10000:
            return b"\x03" + struct.pack("<H", delta)
        return b"\x04" + struct.pack("<I", delta)

    @staticmethod
    def advance4(delta: int) -> bytes:
        return b"\x04" + struct.pack("<I", delta)

    @staticmethod
    def set_loc(addr: int) -> bytes:   # the CIE's fde encoding must be absptr (8 bytes)
        return b"\x01" + struct.pack("<Q", addr)

    @staticmethod
    def def_cfa(reg: int, off: int) -> bytes:
        return b"\x0c" + uleb(reg) + uleb(off)

    @staticmethod
    def def_cfa_sf(reg: int, factored: int) -> bytes:
        return b"\x12" + uleb(reg) + sleb(factored)

    @staticmethod
    def def_cfa_register(reg: int) -> bytes:
        return b"\x0d" + uleb(reg)

    @staticmethod
    def def_cfa_offset(off: int) -> bytes:
        return b"\x0e" + uleb(off)

    @staticmethod
    def def_cfa_offset_sf(factored: int) -> bytes:
        return b"\x13" + sleb(factored)

    @staticmethod
    def def_cfa_expression(expr: bytes) -> bytes:
        return b"\x0f" + _block(expr)

    @staticmethod
    def offset(reg: int, factored: int) -> bytes:
        if reg < 64:
            return bytes([0x80 | reg]) + uleb(factored)
        return b"\x05" + uleb(reg) + uleb(factored)

    @staticmethod
    def offset_extended(reg: int, factored: int) -> bytes:
        return b"\x05" + uleb(reg) + uleb(factored)

    @staticmethod
    def offset_extended_sf(reg: int, factored: int) -> bytes:
        return b"\x11" + uleb(reg) + sleb(factored)

    @staticmethod
    def gnu_negative_offset_extended(reg: int, factored: int) -> bytes:
        return b"\x2f" + uleb(reg) + uleb(factored)

    @staticmethod
    def val_offset(reg: int, factored: int) -> bytes:
        return b"\x14" + uleb(reg) + uleb(factored)

    @staticmethod
    def val_offset_sf(reg: int, factored: int) -> bytes:
        return b"\x15" + uleb(reg) + sleb(factored)

    @staticmethod
    def restore(reg: int) -> bytes:
        return bytes([0xC0 | reg])

    @staticmethod
    def restore_extended(reg: int) -> bytes:
        return b"\x06" + uleb(reg)

    @staticmethod
    def undefined(reg: int) -> bytes:
        return b"\x07" + uleb(reg)

    @staticmethod
    def same_value(reg: int) -> bytes:
        return b"\x08" + uleb(reg)

    @staticmethod
    def register(reg: int, other: int) -> bytes:
        return b"\x09" + uleb(reg) + uleb(other)

    @staticmethod
    def expression(reg: int, expr: bytes) -> bytes:
        return b"\x10" + uleb(reg) + _block(expr)

    @staticmethod
    def val_expression(reg: int, expr: bytes) -> bytes:
        return b"\x16" + uleb(reg) + _block(expr)

    @staticmethod
    def args_size(n: int) -> bytes:
        return b"\x2e" + uleb(n)

    remember_state = b"\x0a"
    restore_state = b"\x0b"
    nop = b"\x00"


#: gas's x86_64 CIE: CFA = rsp + 8, return address (rip) at CFA - 8
X86_CIE_INSNS = Cfa.def_cfa(RSP, 8) + Cfa.offset(RIP, 1)


@dataclass
class CieSpec:
    insns: bytes = X86_CIE_INSNS
    code_align: int = 1
    data_align: int = -8
    ra: int = RIP
    signal: bool = False
    fde_enc: int = 0x1B          # pcrel | sdata4, as gas emits; 0x00 = absptr (8 bytes)
    version: int = 1


@dataclass
class FdeSpec:
    start: int                   # vaddr
    size: int
    insns: bytes = b""
    cie: int = 0                 # index into the CIE list
    raw: bytes | None = None     # replace the whole entry body after the CIE pointer
    pad: bool = True             # pad to 8 bytes with DW_CFA_nop (off: the program ends exactly)


@dataclass
class ElfSpec:
    fdes: list[FdeSpec]
    cies: list[CieSpec] = field(default_factory=lambda: [CieSpec()])
    machine: int = 62
    hdr: str = "table"           # "table", "no-table" (count omitted), "none" (no PT_GNU_EH_FRAME)
    sections: bool = False       # section headers for .eh_frame (+ .eh_frame_hdr)
    debug_frame: bool = False    # put the entries in .debug_frame instead (implies sections, no hdr)
    table_enc: int = 0x3B


def _pad(b: bytearray, align: int) -> None:
    while len(b) % align:
        b.append(0)


_FORMATS = {0x00: "<Q", 0x04: "<Q", 0x03: "<I", 0x0B: "<i", 0x0C: "<q"}


def _pointer(enc: int, value: int, field_vaddr: int) -> bytes:
    """Encode a pointer: absptr/udata/sdata, optionally pcrel (0x10)."""
    if enc & 0x70 == 0x10:
        value -= field_vaddr
    return struct.pack(_FORMATS[enc & 0x0F], value)


def build_frames(spec: ElfSpec, base: int) -> tuple[bytes, list[int]]:
    """.eh_frame (or .debug_frame) placed at vaddr/offset `base`; returns bytes and FDE offsets."""
    debug = spec.debug_frame
    out = bytearray()
    cie_offsets = []
    for c in spec.cies:
        body = bytearray()
        body += struct.pack("<I", 0xFFFFFFFF if debug else 0)
        body.append(c.version)
        aug = b"" if debug else b"zR" + (b"S" if c.signal else b"")
        body += aug + b"\0"
        body += uleb(c.code_align) + sleb(c.data_align)
        body += bytes([c.ra]) if c.version == 1 else uleb(c.ra)
        if aug:
            body += uleb(1) + bytes([c.fde_enc])
        body += c.insns
        _pad(body, 4)  # length field + body a multiple of 4 (8 with the length)
        while (len(body) + 4) % 8:
            body.append(0)
        cie_offsets.append(len(out))
        out += struct.pack("<I", len(body)) + body
    fde_offsets = []
    for f in spec.fdes:
        off = len(out)
        cie_off = cie_offsets[f.cie]
        c = spec.cies[f.cie]
        body = bytearray()
        if debug:
            body += struct.pack("<I", cie_off)
        else:
            body += struct.pack("<I", off + 4 - cie_off)
        if f.raw is not None:
            body += f.raw
        else:
            enc = 0x00 if debug else c.fde_enc
            body += _pointer(enc, f.start, base + off + 4 + len(body))
            body += _pointer(enc & 0x0F, f.size, 0)
            if not debug:
                body += uleb(0)  # augmentation data length ('z')
            body += f.insns
        while f.pad and (len(body) + 4) % 8:
            body.append(0)
        fde_offsets.append(off)
        out += struct.pack("<I", len(body)) + body
    if not debug:
        out += struct.pack("<I", 0)  # terminator
    return bytes(out), fde_offsets


def build_elf(spec: ElfSpec) -> bytes:
    """A tiny ELF64 object: see the module doc for its layout."""
    use_hdr = spec.hdr != "none" and not spec.debug_frame
    nph = 2 if use_hdr else 1
    f = bytearray(TEXT_END)          # header, phdrs, then zero "text" up to TEXT_END
    hdr_off = TEXT_END
    fde_starts = sorted(range(len(spec.fdes)), key=lambda i: spec.fdes[i].start)
    entry = 8 if spec.table_enc == 0x3B else 16
    hdr_size = 12 + entry * len(spec.fdes) if spec.hdr == "table" else 8
    frames_off = hdr_off + (hdr_size if use_hdr else 0)
    frames_off = (frames_off + 7) & ~7
    frames, fde_offsets = build_frames(spec, frames_off)
    hdr = bytearray()
    if use_hdr:
        hdr += bytes([1, 0x1B, 0x03 if spec.hdr == "table" else 0xFF,
                      spec.table_enc if spec.hdr == "table" else 0xFF])
        hdr += struct.pack("<i", frames_off - (hdr_off + 4))
        if spec.hdr == "table":
            hdr += struct.pack("<I", len(spec.fdes))
            for i in fde_starts:
                loc, fde = spec.fdes[i].start, frames_off + fde_offsets[i]
                if spec.table_enc == 0x3B:
                    hdr += struct.pack("<ii", loc - hdr_off, fde - hdr_off)
                else:  # udata8 absolute (0x04)
                    hdr += struct.pack("<QQ", loc, fde)
    f += hdr
    f += bytes(frames_off - len(f))
    f += frames
    sh = b""
    if spec.sections or spec.debug_frame:
        _pad(f, 8)
        names = b"\0.shstrtab\0" + (b".debug_frame\0" if spec.debug_frame else b".eh_frame\0.eh_frame_hdr\0")
        str_off = len(f)
        f += names
        _pad(f, 8)
        shs = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
               struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, str_off, len(names), 0, 0, 1, 0)]
        if spec.debug_frame:
            shs.append(struct.pack("<IIQQQQIIQQ", 11, 1, 0, 0, frames_off, len(frames), 0, 0, 8, 0))
        else:
            shs.append(struct.pack("<IIQQQQIIQQ", 11, 1, 2, frames_off, frames_off, len(frames), 0, 0, 8, 0))
            if use_hdr:
                shs.append(struct.pack("<IIQQQQIIQQ", 21, 1, 2, hdr_off, hdr_off, len(hdr), 0, 0, 4, 0))
        sh = b"".join(shs)
        shoff, shnum = len(f), len(shs)
        f += sh
    else:
        shoff, shnum = 0, 0
    ehdr = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, spec.machine, 1, 0,
                       64, shoff, 0, 64, 56, nph, 64, shnum, 1 if shnum else 0)
    ph = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, len(f), len(f), 0x1000)
    if use_hdr:
        ph += struct.pack("<IIQQQQQQ", 0x6474E550, 4, hdr_off, hdr_off, hdr_off, len(hdr), len(hdr), 4)
    f[0:64] = ehdr
    f[64:64 + len(ph)] = ph
    return bytes(f)


class Stack:
    """A stack image: words at absolute addresses from sp upwards."""

    def __init__(self, sp: int, size: int = 1024) -> None:
        self.sp = sp
        self.data = bytearray(size)

    def put(self, addr: int, value: int) -> "Stack":
        struct.pack_into("<Q", self.data, addr - self.sp, value & (2**64 - 1))
        return self

    def bytes(self) -> bytes:
        return bytes(self.data)


def x86_regs(ip: int, sp: int, bp: int = 0, **named: int) -> tuple[int, ...]:
    """A REGS_USER array for mask 0xff0fff. named: rax=..., rbx=..., r12=... (DWARF names)."""
    regs = [0] * 20
    regs[PERF_POS[RIP]], regs[PERF_POS[RSP]], regs[PERF_POS[RBP]] = ip, sp, bp
    by_name = {"rax": RAX, "rbx": RBX, "rcx": RCX, "rdx": RDX, "rsi": RSI, "rdi": RDI,
               **{f"r{i}": i for i in range(8, 16)}}
    for name, value in named.items():
        regs[PERF_POS[by_name[name]]] = value
    return tuple(regs)


def load(spec: ElfSpec | bytes):  # -> tuple[Mappings, ObjectCFI]
    """The object of a spec, mapped whole at LOAD_BIAS in a fresh address space."""
    from qtools.daemon.unwind import Mappings, ObjectCFI

    data = spec if isinstance(spec, bytes) else build_elf(spec)
    cfi = ObjectCFI.from_bytes(data)
    space = Mappings()
    space.add(LOAD_BIAS, LOAD_BIAS + len(data), 0, cfi)
    return space, cfi


def rt(vaddr: int) -> int:
    """Runtime address of a vaddr of the object mapped by `load`."""
    return LOAD_BIAS + vaddr
