"""Per-architecture register facts, one table per architecture.

Everything the unwinder needs to know about an instruction set lives here:
how perf numbers the sampled registers, how DWARF numbers them, which ones
are SP / frame pointer / instruction pointer / return-address column, the
sample_regs_user mask to request, the defaults of the usual CIE and the
layout of a frame-pointer frame record. Adding an architecture means adding
one `ArchRegs` value, not touching the unwinder, and naming it in the
machine's entry of daemon/kernel/arch.py, which holds every other fact the
collector needs about a machine (syscall numbers, memory ordering).

Sources: perf-event-abi.md section 6 (perf indices checked against the uapi
headers, DWARF names against binutils' readelf).
"""

from __future__ import annotations

from typing import NamedTuple


class ArchRegs(NamedTuple):
    """Register facts of one architecture."""

    name: str
    elf_machine: int
    #: sample_regs_user mask to request from perf_event_open
    sample_mask: int
    #: (perf register index, DWARF register number) for every sampleable register
    perf_to_dwarf: tuple[tuple[int, int], ...]
    #: number of DWARF registers the generic walker tracks (0 .. nregs-1)
    nregs: int
    sp: int
    fp: int
    #: DWARF number (or pseudo-number) under which the frame's pc is visible to expressions
    ip: int
    #: CIE return-address column
    ra_column: int
    #: register holding the return address in a leaf frame (None: it is on the stack)
    lr: int | None
    #: the usual CIE: CFA = cie_cfa_reg + cie_cfa_offset at function entry
    cie_cfa_reg: int
    cie_cfa_offset: int
    code_align: int
    data_align: int
    #: frame record found through the frame pointer: saved fp at fp+fp_slot,
    #: return address at fp+ra_slot, caller's SP = fp+caller_sp
    fp_slot: int = 0
    ra_slot: int = 8
    caller_sp: int = 16
    word: int = 8

    def perf_index_of(self, dwarf: int) -> int | None:
        """perf register index of a DWARF register, or None if perf cannot sample it."""
        for perf, dw in self.perf_to_dwarf:
            if dw == dwarf:
                return perf
        return None


def sample_positions(arch: ArchRegs, mask: int) -> dict[int, int]:
    """DWARF number -> position in a REGS_USER array sampled with `mask`.

    perf writes one u64 per set bit in ascending bit order, so register i sits
    at popcount(mask & ((1 << i) - 1)).
    """
    positions: dict[int, int] = {}
    for perf, dwarf in arch.perf_to_dwarf:
        if mask >> perf & 1:
            positions[dwarf] = (mask & ((1 << perf) - 1)).bit_count()
    return positions


X86_64 = ArchRegs(
    name="x86_64",
    elf_machine=62,  # EM_X86_64
    # AX..SS (bits 0-11) and R8..R15 (16-23); DS/ES/FS/GS are EINVAL on x86_64
    sample_mask=0xFF0FFF,
    perf_to_dwarf=(
        (0, 0),    # AX  rax
        (1, 3),    # BX  rbx
        (2, 2),    # CX  rcx
        (3, 1),    # DX  rdx
        (4, 4),    # SI  rsi
        (5, 5),    # DI  rdi
        (6, 6),    # BP  rbp
        (7, 7),    # SP  rsp
        (8, 16),   # IP  rip (also the RA column)
        (9, 49),   # FLAGS
        (10, 51),  # CS
        (11, 52),  # SS
        (16, 8), (17, 9), (18, 10), (19, 11), (20, 12), (21, 13), (22, 14), (23, 15),  # R8-R15
    ),
    nregs=17,  # rax..r15 and rip; flags/segment registers never matter to CFI here
    sp=7,
    fp=6,
    ip=16,
    ra_column=16,
    lr=None,  # the return address is always on the stack at a call boundary
    cie_cfa_reg=7,
    cie_cfa_offset=8,
    code_align=1,
    data_align=-8,
)

AARCH64 = ArchRegs(
    name="aarch64",
    elf_machine=183,  # EM_AARCH64
    # X0-X28, X29 (FP), LR, SP, PC: bits 0-32. LR is needed for leaf frames.
    sample_mask=(1 << 33) - 1,
    perf_to_dwarf=tuple((i, i) for i in range(32)) + ((32, 32),),
    nregs=33,
    sp=31,
    fp=29,
    # DWARF 32 has no binutils name; used here only as the pseudo-register carrying the pc
    ip=32,
    ra_column=30,
    lr=30,
    cie_cfa_reg=31,
    cie_cfa_offset=0,
    code_align=4,
    data_align=-8,
)

ARCHES: dict[str, ArchRegs] = {a.name: a for a in (X86_64, AARCH64)}
BY_MACHINE: dict[int, ArchRegs] = {a.elf_machine: a for a in (X86_64, AARCH64)}


def arch_by_name(name: str) -> ArchRegs:
    """The table of a named architecture; ValueError if unknown."""
    try:
        return ARCHES[name]
    except KeyError:
        known = ", ".join(ARCHES)
        raise ValueError(f"unsupported architecture {name!r} (known: {known})") from None
