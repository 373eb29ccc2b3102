"""Function ranges of a stripped object, from its `.eh_frame` FDEs.

A stripped program or library has no symbol for most of its functions,
but every compiled function keeps its unwind entry (an FDE: a start and a
length; a function's `.cold` part has its own), because exceptions and
debuggers need it. Grouping the addresses of unnamed code by FDE gives one
row per function, named as the original q-view named unnamed code:
``0xSTART<object>``.

Read with pyelftools. An object is untrusted input: any failure to parse
gives no ranges (the caller falls back to single addresses), and at most
``MAX_FDES`` entries are read.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from elftools.dwarf.callframe import FDE
from elftools.elf.elffile import ELFFile

from qtools.qformat import open_regular

from .symtab import RawSymbol, SymbolTable

MAX_FDES = 1 << 20  # libxul, the largest object around, has about 200,000
NAME = "fde"  # every range has the same name: callers name it by its start


def read_fde_ranges(path: str | os.PathLike[str]) -> SymbolTable:
    """The FDE ranges of the ELF file at ``path``, as a symbol table whose
    entries all carry the name ``NAME``; empty where there are none or they
    cannot be read."""
    try:
        with os.fdopen(open_regular(os.fspath(path)), "rb") as f:
            return _ranges(f)
    except Exception:  # hostile or damaged input: no ranges, single addresses
        return SymbolTable.empty()


def _ranges(f: BinaryIO) -> SymbolTable:
    elf = ELFFile(f)
    if elf.get_section_by_name(".eh_frame") is None:
        return SymbolTable.empty()
    dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
    if not dwarf.has_EH_CFI():
        return SymbolTable.empty()
    raw: list[RawSymbol] = []
    for entry in dwarf.EH_CFI_entries():
        if not isinstance(entry, FDE):
            continue
        start = entry.header["initial_location"]
        size = entry.header["address_range"]
        if start > 0 and size > 0:
            raw.append(RawSymbol(start, size, 0, NAME))
            if len(raw) >= MAX_FDES:
                break
    return SymbolTable.build(raw)
