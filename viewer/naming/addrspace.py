"""The address space of one task set: where each of its addresses is, and
its name.

Kernel or user is decided on the address recorded, against the set's
``q:kernel-from`` (qformat.arch); user addresses through the set's
mappings (``q:maps``) into its object copies; JIT code through its perf maps
and jitdump copies. Each address is resolved once per set (a memo); a
return address is named at address-1, inside its call.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple

from qtools.qformat import Info, MapRange, ObjectRef
from qtools.qformat.kernelspace import kernel_start
from qtools.qformat.jit.jitaddr import is_synthetic

from ..model.frames import Location, Symbolized
from ..model.profile import KERNEL, NOWHERE, Mapping
from .demangle import demangle
from .lines import InlineFrame, ObjectLines
from .symbols import (JIT_OBJECT, KERNEL_OBJECT, KERNEL_UNKNOWN, MAX_MEMO, OTHER_FUNCTIONS,
                      UNKNOWN_OBJECT, Symbols, _crc_of)


KERNEL_LIMIT = (1 << 64) - 1  # the kernel's mapping reaches the top of the address space


class _Mapping(NamedTuple):
    start: int
    end: int
    map: MapRange
    ref: ObjectRef
    copy: str | None
    crc: int | None  # the copy's crc32, as its name says


# Where an address is (``AddressSpace.place``), besides a mapping's index


class AddressSpace:
    """The address space of one task set, as its `.info` describes it."""

    def __init__(self, symbols: Symbols, directory: str, info: Info) -> None:
        self.symbols = symbols
        self.directory = directory
        # q:kernel-from, the collector's decision; for older files q:arch's fallback
        self.kernel_start = kernel_start(info.task)
        # Kernel or user is decided on the address recorded; a return address
        # is named at address-1, so the set's lowest kernel address, when it
        # is one (an interrupt entry's, mid-stack), is looked up one below.
        # No user address lies there: the halves are far apart.
        self.kernel_names_from = max(self.kernel_start - 1, 0)
        maps: list[_Mapping] = []
        for ref in info.objects:
            copy = ref.file or (info.vdso if ref.name == "[vdso]" else None)
            crc = _crc_of(copy)
            for m in ref.maps:
                if m.size > 0:
                    maps.append(_Mapping(m.addr, m.addr + m.size, m, ref, copy, crc))
        maps.sort(key=lambda m: m.start)
        self._maps = maps
        self._starts = [m.start for m in maps]
        self._kallsyms = info.kallsyms
        self._perf_maps = list(info.perf_maps)
        self._jitdumps = [j.file for j in info.jitdumps]
        self._info_pid = info.task.pid
        self._memo: dict[int, Symbolized] = {}
        self._has_lines: bool | None = None
        self._other_functions = _addresses(info.task.extra.get("q:other-functions"))

    def locate(self, address: int, is_return: bool = False, set_index: int = 0) -> Location:
        """Where ``address`` is without naming it: its mapping and file offset
        (of address-1 for a return address, as ``lookup`` takes it). Kernel
        or not is decided as ``lookup`` decides it: mappings first, JIT
        placements are user code."""
        return self.location(set_index, address, is_return, self.place(address, is_return))

    def place(self, address: int, is_return: bool = False) -> int:
        """``locate``'s answer as a small number, for tables of millions of
        addresses: the index of the mapping, else KERNEL or NOWHERE."""
        target = address - 1 if is_return and address > 0 else address
        if not is_synthetic(target):
            i = bisect_right(self._starts, target) - 1
            if i >= 0 and target < self._maps[i].end:
                return i
            if self.is_kernel(address):  # the address recorded, not the one looked up
                return KERNEL
        return NOWHERE

    def location(self, set_index: int, address: int, is_return: bool, place: int) -> Location:
        """The Location of ``address`` at ``place`` (``place`` gave it)."""
        if place >= 0:
            m = self._maps[place]
            target = address - 1 if is_return and address > 0 else address
            return Location(set_index, address, is_return, False, m.ref.name, m.copy, m.crc,
                            m.ref.build_id, m.map.file_offset(target))
        if place == KERNEL:
            return Location(set_index, address, is_return, True, KERNEL_OBJECT, self._kallsyms,
                            _crc_of(self._kallsyms), None, None)
        return Location(set_index, address, is_return, False, None, None, None, None, None)

    def export_mapping(self, place: int) -> Mapping | None:
        """The mapping at ``place`` (``place`` gave it) as pprof's mappings say
        it: the kernel's reaches the top of the address space."""
        if place >= 0:
            m = self._maps[place]
            return Mapping(m.map.addr, min(m.map.addr + m.map.size, KERNEL_LIMIT), m.map.offset,
                           m.ref.path or m.ref.name, m.ref.build_id or "")
        if place == KERNEL:
            # locations are written where they are named (a return address less one)
            return Mapping(self.kernel_names_from, KERNEL_LIMIT, 0, KERNEL_OBJECT, "")
        return None

    def mapping(self, address: int, is_return: bool = False) -> tuple[MapRange, ObjectRef] | None:
        """The mapping ``locate`` places ``address`` in, with its object: where
        the object sat (start, size, file offset), as pprof's mappings say it."""
        target = address - 1 if is_return and address > 0 else address
        m = None if is_synthetic(target) else self._mapping_at(target)
        return (m.map, m.ref) if m is not None else None

    def _mapping_at(self, target: int) -> _Mapping | None:
        i = bisect_right(self._starts, target) - 1
        return self._maps[i] if i >= 0 and target < self._maps[i].end else None

    def is_kernel(self, address: int) -> bool:
        return address >= self.kernel_start

    def lookup(self, address: int, is_return: bool = False) -> Symbolized:
        """The location of ``address``; a return address is looked up at address-1,
        inside the call instruction, so a call at a function's end is not
        mistaken for the next function."""
        target = address - 1 if is_return and address > 0 else address
        loc = self._memo.get(target)
        if loc is None:
            if len(self._memo) >= MAX_MEMO:
                self._memo.clear()
            loc = self._memo[target] = self._resolve(target)
        if target != address and loc.start is None and loc.name.startswith("0x"):
            # Unknown: show the address as it is in the stack (perf does too).
            shown = loc.offset + (address - target)
            loc = loc._replace(name=f"0x{shown:x}<{loc.object}>", offset=shown)
        return loc

    def is_root(self, address: int, is_return: bool) -> bool:
        """Whether a stack whose outermost frame is ``address`` is complete: the
        frame is code whose call-frame information says it has no caller
        (the return address is undefined: ``_start``, a new thread's first
        frame in ``clone3``), or the function of an entry point. Decided by
        the object's own unwind tables, not by a name, so a stripped program
        is judged like any other. Unknown (no copy of the object): False."""
        target = address - 1 if is_return and address > 0 else address
        i = bisect_right(self._starts, target) - 1
        if i < 0 or target >= self._maps[i].end or address >= self.kernel_start > target:
            return False
        mapping = self._maps[i]
        if mapping.copy is None:
            return False
        obj = self.symbols.object(self.directory, mapping.ref, mapping.copy)
        vaddr = obj.vaddr_of(mapping.map.file_offset(target)) if obj else None
        roots = self.symbols.roots(self.directory, mapping.copy) if vaddr is not None else None
        return bool(roots and roots.lookup(vaddr))  # type: ignore[arg-type]

    def line(self, address: int, is_return: bool = False) -> tuple[str, int] | None:
        """(source path, line) of a user address, from its object's DWARF line
        table (or its debug file's); None where there is none."""
        target = address - 1 if is_return and address > 0 else address
        where = self._lines_at(target)
        return where[0].lookup(where[1]) if where is not None else None

    def inlined(self, address: int, is_return: bool = False,
                with_line: bool = False) -> list[InlineFrame]:
        """The functions inlined where a user address is, innermost first,
        each with its file and line; the last entry (named "") is where the
        containing function is. Empty where DWARF describes none. The
        innermost's line is 0 unless ``with_line`` (which reads the line
        table too)."""
        target = address - 1 if is_return and address > 0 else address
        where = self._lines_at(target)
        return where[0].inlined(where[1], with_line) if where is not None else []

    def has_lines(self) -> bool:
        """Whether an object of the set has a line table (its own or a debug
        file's): where none has, no stack has inlined frames to look up."""
        if self._has_lines is None:
            self._has_lines = any(
                self.symbols.lines(self.directory, m.ref, m.copy) is not None
                for m in {m.copy: m for m in self._maps if m.copy}.values())
        return self._has_lines

    def _lines_at(self, target: int) -> tuple[ObjectLines, int] | None:
        m = None if is_synthetic(target) else self._mapping_at(target)
        if m is None or m.copy is None:
            return None
        obj = self.symbols.object(self.directory, m.ref, m.copy)
        vaddr = obj.vaddr_of(m.map.file_offset(target)) if obj else None
        lines = self.symbols.lines(self.directory, m.ref, m.copy) if vaddr is not None else None
        return (lines, vaddr) if lines is not None else None  # type: ignore[return-value]

    def _resolve(self, address: int) -> Symbolized:
        if address in self._other_functions:  # its object's rare functions, as one line
            loc = self._resolve_code(address)
            return Symbolized(OTHER_FUNCTIONS, loc.object, loc.kernel, loc.offset, None)
        return self._resolve_code(address)

    def _resolve_code(self, address: int) -> Symbolized:
        if is_synthetic(address):
            return self._jit(address)
        # Mappings first: a recorded [vsyscall] page lies above kernel_start.
        i = bisect_right(self._starts, address) - 1
        if i >= 0 and address < self._maps[i].end:
            return self._user(address, self._maps[i])
        if address >= self.kernel_names_from:
            return self._kernel(address)
        for copy in self._perf_maps:
            table = self.symbols.perf_map(self.directory, copy)
            hit = table.lookup(address) if table else None
            if hit:
                return Symbolized(demangle(hit[0]), JIT_OBJECT, False, address, hit[1])
        if len(self._jitdumps) == 1:
            names = self.symbols.jitdump(self.directory, self._jitdumps[0])
            hit = names.lookup_raw(address) if names is not None else None
            if hit:
                return Symbolized(hit[0], JIT_OBJECT, False, address, hit[1])
        return Symbolized(f"0x{address:x}<{UNKNOWN_OBJECT}>", UNKNOWN_OBJECT, False, address, None)

    def _jit(self, address: int) -> Symbolized:
        """A placement of JIT code, as the collector named it (qformat.jitdump)."""
        names = None
        if len(self._jitdumps) == 1:
            names = self.symbols.jitdump(self.directory, self._jitdumps[0])
        elif len(self._jitdumps) > 1:
            self.symbols.warn(f"{self.directory}: JIT code of several processes folded into "
                              "one set; its names are unknown")
        hit = names.lookup(address) if names is not None else None
        if hit is None:
            return Symbolized(f"0x{address:x}<{JIT_OBJECT}>", JIT_OBJECT, False, address, None)
        return Symbolized(hit[0], JIT_OBJECT, False, address, hit[1])

    def _user(self, address: int, mapping: _Mapping) -> Symbolized:
        ref = mapping.ref
        file_offset = mapping.map.file_offset(address)
        obj = self.symbols.object(self.directory, ref, mapping.copy)
        vaddr = obj.vaddr_of(file_offset) if obj else None
        where = vaddr if vaddr is not None else file_offset
        hit = obj.table.lookup(vaddr) if obj and vaddr is not None else None
        if hit is None:
            fde = obj.fdes.lookup(vaddr) if obj and obj.fdes and vaddr is not None else None
            if fde is not None:  # unnamed, but known to be one function
                return Symbolized(f"0x{fde[1]:x}<{ref.name}>", ref.name, False, where, fde[1],
                                True)
            return Symbolized(f"0x{where:x}<{ref.name}>", ref.name, False, where, None)
        return Symbolized(demangle(hit[0]), ref.name, False, where, hit[1])

    def _kernel(self, address: int) -> Symbolized:
        ks = self.symbols.kallsyms(self.directory, self._kallsyms) if self._kallsyms else None
        if ks is None or ks.restricted:
            return Symbolized(KERNEL_UNKNOWN, KERNEL_OBJECT, True, address, None)
        hit = ks.symbol(address)
        if hit is None:
            return Symbolized(f"0x{address:x}<{KERNEL_OBJECT}>", KERNEL_OBJECT, True, address, None)
        name, start, module = hit
        return Symbolized(name, f"[{module}]" if module else KERNEL_OBJECT, True, address, start)


def _addresses(value: object) -> frozenset[int]:
    """A list of addresses from a `.info` (anything else: none; a reader
    names those addresses as usual)."""
    if isinstance(value, list) and all(isinstance(a, int) and not isinstance(a, bool)
                                       for a in value):
        return frozenset(value)
    return frozenset()
