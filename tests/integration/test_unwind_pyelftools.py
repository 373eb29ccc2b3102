"""Cross-check: for random pcs inside FDEs of the system's real objects, the
unwinder's row equals the row pyelftools' get_decoded() gives.

Objects: whatever libc, libm, ld.so and libpython this Python process maps,
plus its own executable. pyelftools parses the whole .eh_frame (public API);
its known GNU_args_size bug is worked around as perf-event-abi.md 7.4 says.
"""

from __future__ import annotations

import os
import random
import re

import pytest
from elftools.dwarf.callframe import FDE, RegisterRule
from elftools.elf.elffile import ELFFile

from qtools.daemon.unwind import ObjectCFI
from qtools.qformat.objects.cfi import Row

KIND = {RegisterRule.UNDEFINED: 0, RegisterRule.SAME_VALUE: 1, RegisterRule.OFFSET: 2,
        RegisterRule.VAL_OFFSET: 3, RegisterRule.REGISTER: 4, RegisterRule.EXPRESSION: 5,
        RegisterRule.VAL_EXPRESSION: 6}
PCS_PER_OBJECT = 300
DEF_CFA_SF = 0x12  # pyelftools scales it by the code alignment: skip FDEs using it
# opcodes nearly every FDE has; FDEs with any other one are always checked
COMMON = {0x00, 0x02, 0x03, 0x0E, 0x40, 0x80, 0xC0, 0x0A, 0x0B}


def opcodes(fde: FDE) -> set[int]:
    return {i.opcode & 0xC0 if i.opcode & 0xC0 else i.opcode for i in fde.instructions}


def mapped_objects() -> list[str]:
    wanted = re.compile(r"/(libc\.so\.6|libm\.so\.6|ld-linux[^/]*\.so\.\d|libpython3[^/]*\.so[^/]*)$")
    paths = {os.path.realpath("/proc/self/exe")}
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and wanted.search(parts[5].strip()):
                paths.add(parts[5].strip())
    return sorted(p for p in paths if os.path.exists(p))


def decoded(fde: FDE) -> list[dict]:
    try:
        return fde.get_decoded().table
    except ValueError:
        fde.instructions = [i for i in fde.instructions if i.opcode != 0x2E]  # GNU_args_size
        fde.__dict__.pop("_decode_CFI_table", None)
        return fde.get_decoded().table


def as_dict(row: Row) -> dict:
    out: dict = {"cfa": (row.cfa_reg, row.cfa_offset) if row.cfa_expr is None else row.cfa_expr}
    for reg, kind, arg in row.rules:
        out[reg] = (kind, arg)
    return out


def reference(line: dict) -> dict:
    cfa = line["cfa"]
    out: dict = {"cfa": (cfa.reg, cfa.offset) if cfa.expr is None else bytes(cfa.expr)}
    for reg, rule in line.items():
        if reg in ("pc", "cfa"):
            continue
        arg = bytes(rule.arg) if isinstance(rule.arg, list) else rule.arg
        out[reg] = (KIND[rule.type], 0 if rule.arg is None else arg)
    return out


@pytest.mark.parametrize("path", mapped_objects(), ids=os.path.basename)
def test_rows_match_pyelftools(path):
    with open(path, "rb") as f:
        elf = ELFFile(f)
        if not elf.get_section_by_name(".eh_frame"):
            pytest.skip("no .eh_frame section")
        fdes = [e for e in elf.get_dwarf_info().EH_CFI_entries()
                if isinstance(e, FDE) and e["address_range"] > 0
                and all(i.opcode != DEF_CFA_SF for i in e.instructions)]
    cfi = ObjectCFI.from_path(path)
    assert cfi.source == "eh_frame_hdr"
    rng = random.Random(path)
    rare = [fde for fde in fdes if opcodes(fde) - COMMON][:PCS_PER_OBJECT // 2]
    chosen = rare + rng.sample(fdes, min(PCS_PER_OBJECT - len(rare), len(fdes)))
    checked = 0
    for fde in chosen:
        lo = fde["initial_location"]
        pc = rng.randrange(lo, lo + fde["address_range"])
        lines = [line for line in decoded(fde) if line["pc"] <= pc]
        if not lines:
            continue
        mine = cfi.row_at(pc)
        assert mine is not None, f"{path}: no row at {pc:#x}"
        found = cfi.fde_at(pc)
        assert found is not None and found.pc_begin == lo
        want = reference(lines[-1])
        got = as_dict(mine)
        # pyelftools stores DW_CFA_same_value / restore results the same way we do, but it
        # keeps registers it never saw out of the row; so do we
        assert got == want, f"{path} pc {pc:#x}"
        checked += 1
    assert checked >= len(chosen) * 0.9
    assert cfi.fdes_decoded <= len(chosen)  # only the FDEs that were hit
