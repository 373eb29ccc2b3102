"""A function's instructions from its object copy, through capstone.

The bytes are read at the file offsets the copy's PT_LOAD segments give
the function's link-time range; x86-64 (AT&T syntax, as perf and objdump
print it) and aarch64. A function larger than ``MAX_FUNCTION`` is cut
there; bytes capstone cannot decode show as ``(bad)``, one byte each, and
decoding goes on after them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

from qtools.qformat import open_regular
from qtools.qformat.objects.elfhdr import ElfHeaderError, Segment, read_file_header

MAX_FUNCTION = 1 << 20  # bytes of one function disassembled
EM_X86_64, EM_AARCH64 = 62, 183


class DisasmProblem(Exception):
    """The function's code cannot be read or decoded."""


@dataclass(frozen=True)
class Instruction:
    address: int  # link-time
    size: int
    text: str  # mnemonic and operands


def machines() -> dict[int, str]:
    return {EM_X86_64: "x86-64", EM_AARCH64: "aarch64"}


def _decoder(machine: int) -> Any:
    try:
        import capstone
    except ImportError:  # a broken install: say so, once
        raise DisasmProblem("the capstone module is not installed") from None
    if machine == EM_X86_64:
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        md.syntax = capstone.CS_OPT_SYNTAX_ATT
        return md
    if machine == EM_AARCH64:
        return capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    raise DisasmProblem(f"no disassembler for ELF machine {machine} "
                        f"(q-view disassembles {', '.join(machines().values())})")


def read_code(path: str, segments: Iterable[Segment], start: int, end: int
              ) -> tuple[int, bytes]:
    """The ELF machine of the file at ``path`` and the bytes at link-time
    addresses [start, end) (at most ``MAX_FUNCTION``)."""
    end = min(end, start + MAX_FUNCTION)
    seg = next((s for s in segments if s.vaddr <= start < s.vaddr + s.filesz), None)
    if seg is None:
        raise DisasmProblem(f"0x{start:x} is in no loaded segment")
    end = min(end, seg.vaddr + seg.filesz)
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            machine = read_file_header(f).machine
            f.seek(start - seg.vaddr + seg.offset)
            return machine, f.read(end - start)
    except ElfHeaderError as e:
        raise DisasmProblem(f"not an ELF file ({e})") from None
    except OSError as e:
        raise DisasmProblem(f"cannot read: {e.strerror or e}") from None


def disassemble(machine: int, code: bytes, start: int) -> list[Instruction]:
    md = _decoder(machine)
    out: list[Instruction] = []
    pos = 0
    step = 4 if machine == EM_AARCH64 else 1
    while pos < len(code):
        for address, size, mnemonic, operands in md.disasm_lite(code[pos:], start + pos):
            out.append(Instruction(address, size, f"{mnemonic} {operands}".strip()))
            pos += size
        if pos < len(code):  # undecodable bytes: show them, go on after them
            out.append(Instruction(start + pos, step, "(bad)"))
            pos += step
    return out
