"""ObjectCFI: the unwind information of one object file's content.

One instance per object content, shared by every process mapping it. The
constructor reads the ELF and program headers only; the `.eh_frame_hdr`
search table is unpacked, and the call-frame section read, on the first
lookup (at once for a file: ``from_fd`` reads what it needs while it holds
the descriptor, and maps nothing, see filebytes.py); an FDE is parsed and
decoded into its row table only when a pc inside it is hit; and a compiled
rule is kept per pc looked up. Without a hdr table (or without
PT_GNU_EH_FRAME) `.eh_frame`, or failing that `.debug_frame`, is scanned
once to build the same sorted table.

Only the call-frame section's bytes are kept (``_data``, starting at file
offset ``_origin``): FDE and CIE offsets are offsets into them, and the
segments turn ``offset + _origin`` into a vaddr.
"""

from __future__ import annotations

import bisect
import os
import struct

from qtools.qformat.objects.elfhdr import ElfHeader, Segment, offset_of, vaddr_of

from qtools.qformat.objects.cfi import FdeRows, Row, CfaState, cie_state, decode_fde
from qtools.qformat.objects.ehframe import (DEBUG_FRAME, EH_FRAME, Buffer, CieCache, Fde, HdrTable,
                                            iter_fdes, parse_fde, parse_hdr)
from .elfsections import frame_sections, parse_elf, parse_elf_file
from .unwinderrors import CfiError, UnwindError
from .filebytes import FileBytes, MemoryBytes, Source
from .regs import BY_MACHINE, ArchRegs
from .rules import RULE_BAD, RULE_NO_CFI, Rule, compile_row

# Errors malformed bytes can raise while we parse them: kept local, never raised to callers.
_PARSE_ERRORS = (UnwindError, IndexError, ValueError, OverflowError, struct.error)

MAX_FDES = 1 << 20
"""Search-table entries read per object at most, as q-view reads (libxul,
the largest object around, has about 200,000): an `.eh_frame_hdr` is read
up to its first MAX_FDES entries of 8 bytes, a scan stops after as many."""
HDR_BYTES = 12 + 8 * MAX_FDES


class ObjectCFI:
    """Unwind information of one object file's content (see the module doc)."""

    __slots__ = ("_src", "_data", "_origin", "_region", "_info", "arch", "_loaded", "_kind",
                 "_base",
                 "_locs", "_fdes", "_fde_is_offset", "_cies", "_cie_states", "_parsed",
                 "_fde_rows", "_rules", "_interned", "_compiled",
                 "fdes_decoded", "bytes_read", "_source")

    def __init__(self, src: Source | None, info: ElfHeader | None) -> None:
        self._src = src  # where the bytes are read from, until the table is loaded
        self._data: Buffer = b""  # the call-frame section read (FDE offsets are into it)
        self._origin = 0  # its file offset
        self._region: tuple[int, int, int] | None = None  # (offset, size, kind) asked for
        self._info = info
        self.arch: ArchRegs | None = BY_MACHINE.get(info.machine) if info else None
        self._loaded = False
        self._kind = EH_FRAME
        self._base = 0
        self._locs: tuple[int, ...] | list[int] = ()
        self._fdes: tuple[int, ...] | list[int] = ()
        self._fde_is_offset = False   # table values: FDE vaddrs (hdr) or offsets in _data (scan)
        self._cies = CieCache(b"", EH_FRAME)
        self._cie_states: dict[int, CfaState] = {}
        self._parsed: dict[int, Fde | None] = {}      # table index -> FDE (None: corrupt)
        self._fde_rows: dict[int, FdeRows | None] = {}
        self._rules: dict[int, Rule] = {}
        self._interned: dict[tuple[object, ...], Row] = {}   # row contents -> the shared Row
        self._compiled: dict[int, Rule] = {}  # id(shared Row) -> pc-independent rule
        #: number of FDEs parsed and decoded so far (they are decoded only when hit)
        self.fdes_decoded = 0
        #: bytes read from the file (``from_fd``), at most filebytes.READ_BUDGET
        self.bytes_read = 0
        self._source = ""

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_bytes(cls, data: Buffer) -> "ObjectCFI":
        """From the whole file's bytes. Never raises on bad content."""
        try:
            info: ElfHeader | None = parse_elf(data)
        except _PARSE_ERRORS:
            info = None
        return cls(MemoryBytes(data), info)

    @classmethod
    def from_fd(cls, fd: int) -> "ObjectCFI":
        """Read the file's headers and call-frame sections now, into memory
        (filebytes.py: the file is never mapped, so a user who cuts it cannot
        fault the reader). Never raises: a file that cannot be read gives no
        rules, one cut while it is read gives the rules of what was read."""
        try:
            src = FileBytes(fd)
        except OSError:
            return cls(None, None)
        try:
            info: ElfHeader | None = parse_elf_file(src)
        except _PARSE_ERRORS:
            info = None
        cfi = cls(src, info)
        cfi._load()
        cfi.bytes_read = src.read_bytes
        return cfi

    @classmethod
    def from_path(cls, path: str | os.PathLike[str]) -> "ObjectCFI":
        """Convenience: open, from_fd, close. Never raises."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return cls(None, None)
        try:
            return cls.from_fd(fd)
        finally:
            os.close(fd)

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
        info, src, self._src = self._info, self._src, None
        if info is None or src is None:
            return
        try:
            named = frame_sections(src)
        except _PARSE_ERRORS:
            named = {}
        try:
            self._load_hdr(src, info, named)
        except _PARSE_ERRORS:
            self._locs, self._fdes = (), ()
        if not self._locs:
            try:
                self._scan(src, named)
            except _PARSE_ERRORS:
                self._locs, self._fdes = (), ()

    def _load_hdr(self, src: Source, info: ElfHeader, named: dict[str, tuple[int, int]]) -> None:
        hdr = info.eh_frame_hdr
        if hdr is None:
            return
        size = min(hdr.filesz, HDR_BYTES)
        table = parse_hdr(src.read(hdr.offset, size), 0, size, hdr.vaddr)
        region = named.get(".eh_frame") or self._region_at(info, table)
        if region is None:
            return
        self._read(src, region, EH_FRAME)
        if table.locs:
            self._base, self._locs, self._fdes = table.base, table.locs, table.fdes
            self._fde_is_offset = False
            self._source = "eh_frame_hdr"
        else:
            self._build_table()
            self._source = "eh_frame" if self._locs else ""

    @staticmethod
    def _region_at(info: ElfHeader, table: HdrTable) -> tuple[int, int] | None:
        """Where `.eh_frame` lies without section headers to say: from the
        address the hdr gives (else its first FDE) to the end of the segment
        holding it."""
        first = table.eh_frame
        if first is None and table.fdes:
            first = table.base + min(table.fdes)
        start = None if first is None else offset_of(info.loads, first)
        if start is None:
            return None
        seg_end = next(s.offset + s.filesz for s in info.loads
                       if s.offset <= start < s.offset + s.filesz)
        return start, seg_end - start

    def _scan(self, src: Source, named: dict[str, tuple[int, int]]) -> None:
        for name, kind in ((".eh_frame", EH_FRAME), (".debug_frame", DEBUG_FRAME)):
            region = named.get(name)
            if region is not None and region[1]:
                self._read(src, region, kind)
                self._build_table()
                if self._locs:
                    self._source = name[1:]
                    return

    def _read(self, src: Source, region: tuple[int, int], kind: int) -> None:
        """Take the call-frame section at ``region`` (file offset, size)."""
        if self._region != (*region, kind):
            self._data, self._origin, self._kind = src.read(*region), region[0], kind
            self._region = (*region, kind)
        self._cies = CieCache(self._data, kind)

    def _build_table(self) -> None:
        """Sorted (pc_begin, FDE offset) table from a linear scan of the section read."""
        entries = sorted((fde.pc_begin, fde.offset) for fde in
                         iter_fdes(self._data, 0, len(self._data), self._kind, self._parse_fde_at,
                                   MAX_FDES))
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
        """Offset in ``_data`` of the FDE of a table entry; None outside it."""
        value = self._fdes[index]
        if self._fde_is_offset:
            return value
        off = offset_of(self._info.loads, self._base + value) if self._info else None
        if off is None or not 0 <= off - self._origin < len(self._data):
            return None
        return off - self._origin

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
            delta = 0
        else:
            vaddr = self.vaddr_of_offset(self._origin + off)
            if vaddr is None:
                raise CfiError(f"FDE at {self._origin + off:#x} outside every PT_LOAD segment")
            delta = vaddr - off
        return parse_fde(data, off, len(data), self._kind, delta, 0, self._cies)

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

