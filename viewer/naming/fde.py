"""Function ranges and stack roots of an object, from its `.eh_frame` FDEs.

A stripped program or library has no symbol for most of its functions,
but every compiled function keeps its unwind entry (an FDE: a start and a
length; a function's `.cold` part has its own), because exceptions and
debuggers need it. Grouping the addresses of unnamed code by FDE gives one
row per function, named as the original q-view named unnamed code:
``0xSTART<object>``.

The same entries say where a stack ends: the outermost frame of a thread
is code whose call-frame information marks the return address undefined
(glibc's ``_start`` and the child side of ``clone``/``clone3``), which is
where the collector's unwinder stops on purpose. ``read_root_ranges``
gives those pc ranges, plus the function holding the entry point.

Read with pyelftools. An object is untrusted input: any failure to parse
gives no ranges (the caller falls back to single addresses), and at most
``MAX_FDES`` entries are read.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from typing import Iterator

from elftools.dwarf.callframe import FDE
from elftools.elf.elffile import ELFFile

from qtools.qformat import open_regular

from .symtab import RawSymbol, SymbolTable

MAX_FDES = 1 << 20  # libxul, the largest object around, has about 200,000
NAME = "fde"  # every range has the same name: callers name it by its start
RA_UNDEFINED = "ra-undefined"  # a root range: the CFI says there is no caller
ENTRY = "entry"  # a root range: the function that holds the ELF entry point
DW_CFA_UNDEFINED = 0x07  # DWARF 5, 6.4.2.3: "the register has no recoverable value"


def read_fde_ranges(path: str | os.PathLike[str]) -> SymbolTable:
    """The FDE ranges of the ELF file at ``path``, as a symbol table whose
    entries all carry the name ``NAME``; empty where there are none or they
    cannot be read."""
    try:
        with os.fdopen(open_regular(os.fspath(path)), "rb") as f:
            return _ranges(f)
    except Exception:  # hostile or damaged input: no ranges, single addresses
        return SymbolTable.empty()


def _fdes(elf: ELFFile) -> Iterator[FDE]:
    if elf.get_section_by_name(".eh_frame") is None:
        return
    dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
    if not dwarf.has_EH_CFI():
        return
    for n, entry in enumerate(dwarf.EH_CFI_entries()):
        if n >= MAX_FDES:
            return
        if isinstance(entry, FDE) and entry.header["initial_location"] > 0 \
                and entry.header["address_range"] > 0:
            yield entry


def _ranges(f: BinaryIO) -> SymbolTable:
    return SymbolTable.build(
        RawSymbol(e.header["initial_location"], e.header["address_range"], 0, NAME)
        for e in _fdes(ELFFile(f)))


def read_root_ranges(path: str | os.PathLike[str]) -> SymbolTable:
    """The pc ranges of ``path`` (link-time addresses) where a stack ends:
    rows of the CFI whose return-address rule is *undefined* (named
    ``RA_UNDEFINED``), and the FDE that holds the entry point (``ENTRY``).
    Empty where there is no CFI or it cannot be read."""
    try:
        with os.fdopen(open_regular(os.fspath(path)), "rb") as f:
            return _roots(f)
    except Exception:  # hostile or damaged input: no roots known
        return SymbolTable.empty()


def _roots(f: BinaryIO) -> SymbolTable:
    elf = ELFFile(f)
    entry_point = elf.header["e_entry"]
    raw: list[RawSymbol] = []
    for fde in _fdes(elf):
        start = fde.header["initial_location"]
        end = start + fde.header["address_range"]
        if start <= entry_point < end:
            raw.append(RawSymbol(start, end - start, 1, ENTRY))
        cie = fde.cie
        if cie is None:
            continue
        ra = cie.header["return_address_register"]
        # Decoding every FDE's table would take seconds on a large library:
        # only entries that undefine the return address at all are decoded.
        if not any(i.opcode == DW_CFA_UNDEFINED and i.args and i.args[0] == ra
                   for i in (*cie.instructions, *fde.instructions)):
            continue
        rows = fde.get_decoded().table
        for i, row in enumerate(rows):
            rule = row.get(ra)
            if rule is not None and rule.type == "UNDEFINED":
                row_end = rows[i + 1]["pc"] if i + 1 < len(rows) else end
                if row["pc"] < row_end:
                    raw.append(RawSymbol(row["pc"], row_end - row["pc"], 0, RA_UNDEFINED))
    return SymbolTable.build(raw)
