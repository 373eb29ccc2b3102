"""ObjectCFI: the unwind information of one object file's content.

One instance per object content, shared by every process mapping it. It is
built lazily: the constructor reads the ELF and program headers only; the
`.eh_frame_hdr` search table is unpacked on the first lookup; an FDE is
parsed and decoded into its row table only when a pc inside it is hit; and a
compiled rule is kept per pc looked up. Without a hdr table (or without
PT_GNU_EH_FRAME) `.eh_frame`, or failing that `.debug_frame`, is scanned
once to build the same sorted table.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct

from qtools.qformat.elfhdr import ElfHeader, Segment, offset_of, vaddr_of

from qtools.qformat.cfi import FdeRows, Row, CfaState, cie_state, decode_fde
from qtools.qformat.ehframe import (DEBUG_FRAME, EH_FRAME, Buffer, CieCache, Fde, iter_fdes,
                                   parse_fde, parse_hdr)
from .elf import parse_elf, sections
from .errors import CfiError, UnwindError
from .regs import BY_MACHINE, ArchRegs
from .rules import RULE_BAD, RULE_NO_CFI, Rule, compile_row

# Errors malformed bytes can raise while we parse them: kept local, never raised to callers.
_PARSE_ERRORS = (UnwindError, IndexError, ValueError, OverflowError, struct.error)


class ObjectCFI:
    """Unwind information of one object file's content (see the module doc)."""

    __slots__ = ("_data", "_info", "arch", "_loaded", "_kind", "_base", "_locs", "_fdes",
                 "_fde_is_offset", "_section", "_cies", "_cie_states", "_parsed", "_fde_rows", "_rules",
                 "_interned", "_compiled",
                 "fdes_decoded", "_source")

    def __init__(self, data: Buffer, info: ElfHeader | None) -> None:
        self._data = data
        self._info = info
        self.arch: ArchRegs | None = BY_MACHINE.get(info.machine) if info else None
        self._loaded = False
        self._kind = EH_FRAME
        self._base = 0
        self._locs: tuple[int, ...] | list[int] = ()
        self._fdes: tuple[int, ...] | list[int] = ()
        self._fde_is_offset = False   # table values: FDE vaddrs (hdr) or file offsets (scan)
        self._section = (0, 0)        # (file offset, size) of the scanned section, if any
        self._cies = CieCache(data, EH_FRAME)
        self._cie_states: dict[int, CfaState] = {}
        self._parsed: dict[int, Fde | None] = {}      # table index -> FDE (None: corrupt)
        self._fde_rows: dict[int, FdeRows | None] = {}
        self._rules: dict[int, Rule] = {}
        self._interned: dict[tuple[object, ...], Row] = {}   # row contents -> the shared Row
        self._compiled: dict[int, Rule] = {}                  # id(shared Row) -> pc-independent rule
        #: number of FDEs parsed and decoded so far (they are decoded only when hit)
        self.fdes_decoded = 0
        self._source = ""

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_bytes(cls, data: Buffer) -> "ObjectCFI":
        """From the whole file's bytes (or an mmap of it). Never raises on bad content."""
        try:
            info: ElfHeader | None = parse_elf(data)
        except _PARSE_ERRORS:
            info = None
        return cls(data, info)

    @classmethod
    def from_fd(cls, fd: int) -> "ObjectCFI":
        """mmap the file read-only. Never raises: a file that cannot be mapped gives no rules.

        The mapping must not shrink under us (reading a truncated mapping is
        SIGBUS), so prefer stable files (the collector's object copies, or
        libraries that package managers replace by rename).
        """
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                return cls(b"", None)
            data: Buffer = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        except (OSError, ValueError, OverflowError):
            return cls(b"", None)
        return cls.from_bytes(data)

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> "ObjectCFI":
        """Convenience: open, from_fd, close. Never raises."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return cls(b"", None)
        try:
            return cls.from_fd(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Release the mapping; later lookups find no CFI."""
        if isinstance(self._data, mmap.mmap):
            self._data.close()
        self._data, self._info = b"", None
        self._locs, self._fdes, self._loaded = (), (), True
        self._parsed.clear()
        self._fde_rows.clear()
        self._rules.clear()
        self._compiled.clear()
        self._interned.clear()

    # -- queries --------------------------------------------------------------------------

    @property
    def loads(self) -> tuple[Segment, ...]:
        """PT_LOAD segments."""
        return self._info.loads if self._info else ()

    @property
    def source(self) -> str:
        """Where the search table came from: "eh_frame_hdr", "eh_frame", "debug_frame" or ""."""
        self._load()
        return self._source

    @property
    def has_cfi(self) -> bool:
        """Whether any FDE is known (loads the search table)."""
        self._load()
        return bool(self._locs)

    @property
    def fde_count(self) -> int:
        """Entries in the search table (loads it)."""
        self._load()
        return len(self._locs)

    def vaddr_of_offset(self, offset: int) -> int | None:
        """Link-time vaddr of a file offset (from the mapping arithmetic), or None."""
        return vaddr_of(self._info.loads, offset) if self._info else None

    def fde_at(self, vaddr: int) -> Fde | None:
        """The FDE covering vaddr, or None (no FDE, or it is corrupt)."""
        index = self._find(vaddr)
        return None if index is None else self._parse_fde(index)

    def rows_at(self, vaddr: int) -> FdeRows | None:
        """The decoded row table of the FDE covering vaddr, or None."""
        index = self._find(vaddr)
        return None if index is None else self._rows(index)

    def row_at(self, vaddr: int) -> Row | None:
        """The unwind row for vaddr, or None if no (valid) FDE covers it."""
        rows = self.rows_at(vaddr)
        return rows.row_at(vaddr) if rows else None

    def rule_at(self, vaddr: int, exact: bool) -> tuple[Rule, bool]:
        """(compiled rule, cacheable) for a lookup at vaddr: an exact pc, or a return address - 1.

        Not cacheable: a pc-dependent rule (PLT-style CFA expression) looked up
        for a return address, whose pc is vaddr + 1 rather than vaddr.
        """
        key = vaddr << 1 | exact
        rule = self._rules.get(key)
        if rule is not None:
            return rule, True
        arch = self.arch
        index = self._find(vaddr) if arch else None
        if index is None or arch is None:
            rule = RULE_NO_CFI
        else:
            rows = self._rows(index)
            row = rows.row_at(vaddr) if rows else None
            if row is None:
                rule = RULE_BAD if rows is None else RULE_NO_CFI
            else:
                rule = self._compiled.get(id(row))   # rows are interned: id is stable
                if rule is None:
                    # expressions see the frame's pc: the return address itself, not ra - 1
                    rule, pc_dependent = compile_row(row, arch, vaddr if exact else vaddr + 1)
                    if pc_dependent and not exact:
                        return rule, False
                    if not pc_dependent:
                        self._compiled[id(row)] = rule
        self._rules[key] = rule
        return rule, True

    # -- the search table -----------------------------------------------------------------

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        info = self._info
        if info is None:
            return
        try:
            self._load_hdr(info)
        except _PARSE_ERRORS:
            self._locs, self._fdes = (), ()
        if not self._locs:
            try:
                self._scan(info)
            except _PARSE_ERRORS:
                self._locs, self._fdes = (), ()

    def _load_hdr(self, info: ElfHeader) -> None:
        hdr = info.eh_frame_hdr
        if hdr is None:
            return
        table = parse_hdr(self._data, hdr.offset, hdr.filesz, hdr.vaddr)
        if table.locs:
            self._base, self._locs, self._fdes = table.base, table.locs, table.fdes
            self._source = "eh_frame_hdr"
            return
        if table.eh_frame is not None:
            # a hdr without table still points at .eh_frame: scan it, no section headers needed
            start = offset_of(info.loads, table.eh_frame)
            if start is not None:
                seg_end = next(s.offset + s.filesz for s in info.loads
                               if s.offset <= start < s.offset + s.filesz)
                self._build_table(start, seg_end, EH_FRAME)
                self._source = "eh_frame" if self._locs else ""

    def _scan(self, info: ElfHeader) -> None:
        by_name = {s.name: s for s in sections(self._data, info)}
        for name, kind in ((".eh_frame", EH_FRAME), (".debug_frame", DEBUG_FRAME)):
            sec = by_name.get(name)
            if sec is not None and sec.size:
                self._build_table(sec.offset, sec.offset + sec.size, kind)
                if self._locs:
                    self._source = name[1:]
                    return

    def _build_table(self, start: int, end: int, kind: int) -> None:
        """Sorted (pc_begin, FDE file offset) table from a linear scan of one section."""
        self._kind, self._section = kind, (start, end - start)
        if kind != self._cies.kind:
            self._cies = CieCache(self._data, kind)
        entries = sorted((fde.pc_begin, fde.offset)
                         for fde in iter_fdes(self._data, start, end, kind, self._parse_fde_at))
        self._base = 0
        self._locs = [e[0] for e in entries]
        self._fdes = [e[1] for e in entries]
        self._fde_is_offset = True

    def _find(self, vaddr: int) -> int | None:
        """Index of the table entry whose FDE covers vaddr."""
        if not self._loaded:
            self._load()
        locs = self._locs
        i = bisect.bisect_right(locs, vaddr - self._base) - 1
        # entries sharing a start (zero-length FDEs) sort together: try them all
        first = locs[i] if i >= 0 else None
        while i >= 0 and locs[i] == first:
            fde = self._parse_fde(i)
            if fde is not None and fde.pc_begin <= vaddr < fde.pc_begin + fde.pc_range:
                return i
            i -= 1
        return None

    # -- entries --------------------------------------------------------------------------

    def _fde_offset(self, index: int) -> int | None:
        value = self._fdes[index]
        if self._fde_is_offset:
            return value
        return offset_of(self._info.loads, self._base + value) if self._info else None

    def _parse_fde(self, index: int) -> Fde | None:
        if index in self._parsed:
            return self._parsed[index]
        off = self._fde_offset(index)
        fde: Fde | None = None
        if off is not None:
            try:
                fde = self._parse_fde_at(off)
            except _PARSE_ERRORS:
                fde = None
        self._parsed[index] = fde
        return fde

    def _parse_fde_at(self, off: int) -> Fde:
        data = self._data
        if self._kind == DEBUG_FRAME:
            # .debug_frame is not loaded: addresses are absolute, no pc-relative pointers
            delta, start = 0, self._section[0]
        else:
            vaddr = self.vaddr_of_offset(off)
            if vaddr is None:
                raise CfiError(f"FDE at {off:#x} outside every PT_LOAD segment")
            delta, start = vaddr - off, 0
        return parse_fde(data, off, len(data), self._kind, delta, start, self._cies)

    def _rows(self, index: int) -> FdeRows | None:
        if index in self._fde_rows:
            return self._fde_rows[index]
        rows: FdeRows | None = None
        fde = self._parse_fde(index)
        if fde is not None:
            try:
                state = self._cie_states.get(fde.cie.offset)
                if state is None:
                    state = cie_state(fde.cie)
                    self._cie_states[fde.cie.offset] = state
                rows = decode_fde(fde, state, self._interned)
            except _PARSE_ERRORS:
                rows = None
            self.fdes_decoded += 1
        self._fde_rows[index] = rows
        return rows

