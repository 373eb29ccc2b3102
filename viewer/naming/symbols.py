"""Symbolization from the copies in a `.q` directory.

``Symbols`` loads each object copy once per run (and once per content
across runs, through ``SymbolCache``), checks its crc, finds separate debug
info for stripped copies, and reads kallsyms and JIT perf maps.
``AddressSpace(symbols, qdir, info)`` (``space.py``) is the address space
of one task set, which turns runtime addresses into ``Location``s (mapping
and offset, no name) and names them (``Symbolized``):

    runtime address -> mapping (q:maps) -> file offset -> PT_LOAD -> ELF vaddr
    -> symbol (bisect) -> demangled name

Nothing here prints: problems go to the ``warn`` callback, once each.
"""

from __future__ import annotations

import hashlib
import os
from array import array
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple

from qtools.qformat import ObjectRef, QDir, open_regular, parse_copy_name
from qtools.qformat.errors import QFormatError
from qtools.qformat.limits import DEFAULT_LIMITS
from qtools.qformat.stores import Store

from .debugfiles import DebugFile, Here, candidates, matching
from .debuginfod import Debuginfod
from .elfsymbols import ElfObject, ElfProblem, Segment, read_elf
from .fde import read_fde_ranges, read_root_ranges
from .kernelsymbols import MAX_TEXT, KallsymsText, read_lines, read_plain
from .localfiles import only_owner_can_change, same_file_here
from .lines import (LineIndex, LineProblem, ObjectLines, has_lines, path_opener, path_tag,
                    read_index)
from .perfmap import read_perf_map
from .symcache import SymbolCache
from .symtab import SymbolTable

if TYPE_CHECKING:
    from .jitnames import JitNames

KERNEL_OBJECT = "[kernel.kallsyms]"
KERNEL_UNKNOWN = "[kernel]"
UNKNOWN_OBJECT = "[unknown]"
JIT_OBJECT = "[jit]"
# The line of an object's functions that the collector's own sets met too
# rarely to keep one line each (q:other-functions, docs/q-format.md 5.2)
OTHER_FUNCTIONS = "(other functions)"
SYSTEM_DEBUG_ROOT = "/usr/lib/debug"
MAX_LOCAL = 4 << 30  # bytes of a local file compared with a copy (without --limits copy-size)
# Addresses remembered per task set, cleared when full. A set's locations
# are each named once anyway (build._Names): the memo serves an address
# met both as a leaf and as a return address, and at 300 bytes an entry a
# million of them was a third of a crafted set's memory.
MAX_MEMO = 1 << 16

Warn = Callable[[str], None]


class LoadedObject(NamedTuple):
    """Segments and symbols of one object copy (or of its debug file)."""

    segments: list[Segment]
    table: SymbolTable
    fdes: SymbolTable | None = None  # function ranges of a stripped object (fde.py)

    def vaddr_of(self, file_offset: int) -> int | None:
        for seg in self.segments:
            v = seg.vaddr_of(file_offset)
            if v is not None:
                return v
        return None


class Kallsyms(NamedTuple):
    table: SymbolTable
    modules: dict[int, str]  # symbol start -> module name, for module symbols
    restricted: bool  # all addresses zero (kptr_restrict): kernel frames stay unknown
    text: KallsymsText | None = None  # a copy in the kernel's layout: no table built

    def symbol(self, address: int) -> tuple[str, int, str | None] | None:
        """(name, start, module or None) of the text symbol holding ``address``."""
        if self.text is not None:
            return self.text.symbol(address)
        hit = self.table.lookup(address)
        return (hit[0], hit[1], self.modules.get(hit[1])) if hit is not None else None


def debug_roots_from_env() -> list[str]:
    """``Q_DEBUG_ROOT`` (colon-separated) before the system's /usr/lib/debug."""
    extra = [p for p in os.environ.get("Q_DEBUG_ROOT", "").split(":") if p]
    return extra + [SYSTEM_DEBUG_ROOT]


class Symbols:
    """Loads symbol sources for a whole run; each copy once."""

    def __init__(self, cache: SymbolCache, debug_roots: list[str], warn: Warn,
                 max_copy: int | None = None, stores: dict[str, Store] | None = None,
                 debuginfod: Debuginfod | None = None,
                 max_debug: int = DEFAULT_LIMITS.debug_size) -> None:
        self.cache = cache
        # bytes a compressed DWARF section may inflate to (--limits debug-size)
        self.max_debug = max_debug
        self.debuginfod = debuginfod  # fetches debug files by build-id when servers are named
        self.max_copy = max_copy  # bytes of one copy checksummed (--limits copy-size)
        self.debug_roots = debug_roots
        self.warn = warn
        self._objects: dict[tuple[str, str], LoadedObject | None] = {}
        self._kallsyms: dict[tuple[str, str], Kallsyms | None] = {}
        self._perf_maps: dict[tuple[str, str], SymbolTable | None] = {}
        self._roots: dict[tuple[str, str], SymbolTable | None] = {}
        self._digests: dict[tuple[object, ...], str] = {}
        self._jitdumps: dict[tuple[str, str], JitNames | None] = {}
        self._qdirs: dict[str, QDir] = {}
        self._lines: dict[tuple[str, str], ObjectLines | None] = {}
        # where a copy's line table came from: None, the copy's own DWARF
        self._lines_from: dict[tuple[str, str], DebugFile | None] = {}
        self._here: dict[tuple[str, str], bool] = {}
        # by label: directories inside archives (their owner closes them)
        self.stores = stores or {}

    def close(self) -> None:
        for lines in self._lines.values():
            if lines is not None:
                lines.flush()
        for q in self._qdirs.values():
            q.close()
        self._qdirs.clear()
        if self.debuginfod is not None:
            self.debuginfod.close()
        self.cache.close()

    # ------------------------------------------------------------ copies

    def _qdir(self, directory: str) -> QDir | Store:
        if directory in self.stores:
            return self.stores[directory]
        q = self._qdirs.get(directory)
        if q is None:
            q = self._qdirs[directory] = QDir.open(directory or ".", reader=True)
        return q

    @contextmanager
    def _verified(self, directory: str, copy: str) -> Iterator[str | None]:
        """A path that reads the copy as it was checked (its descriptor,
        ``/proc/self/fd/N``, so that nothing swapped in after the check is
        read), or None after one warning where the copy is not trustworthy."""
        try:
            fd, problem = self._qdir(directory).open_copy(copy, self.max_copy)
        except OSError as e:
            fd, problem = None, f"{copy}: cannot open directory: {e.strerror}"  # type: ignore
        if fd is None:
            self.warn(f"{os.path.join(directory, str(problem))}; its symbols are unknown")
            yield None
            return
        try:
            yield f"/proc/self/fd/{fd}" if os.path.isdir("/proc/self/fd") \
                else os.path.join(directory, copy)
        finally:
            os.close(fd)

    def _cache_key(self, path: str, copy: str, kind: str) -> str | None:
        """The cache key of a verified copy: a SHA-256 of its content. Not its
        crc32, which anyone can forge: an archive whose copy matched a real
        library's crc32 and size would have put its symbol names into the
        cache, for every later profile of the real library to show."""
        digest = self._digest(path, copy)
        return None if digest is None else f"{digest}-{kind}"

    def _digest(self, path: str, copy: str) -> str | None:
        """The SHA-256 (40 hex digits) of a verified copy's content, once."""
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                identity = (copy, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                digest = self._digests.get(identity)
                if digest is None:
                    digest = self._digests[identity] = hashlib.file_digest(
                        f, "sha256").hexdigest()[:40]
        except OSError:
            return None
        return digest

    # ------------------------------------------------------------ ELF objects

    def object(self, directory: str, ref: ObjectRef, copy: str | None) -> LoadedObject | None:
        key = _content_key(directory, copy) if copy \
            else (directory, f"<{ref.name}:{ref.build_id}>")
        if key not in self._objects:
            loaded = self._objects[key] = self._load_object(directory, ref, copy)
            if loaded is None and copy is None:
                self.warn(f"{directory}: no copy of {ref.path or ref.name} was recorded; "
                          "its symbols are unknown")
        return self._objects[key]

    def _load_object(self, directory: str, ref: ObjectRef, copy: str | None) -> LoadedObject | None:
        if copy is None:
            return None
        with self._verified(directory, copy) as source:
            # No trustworthy copy, no symbols: a separate debug file alone
            # cannot say where file offsets load (its PT_LOADs are rewritten).
            return None if source is None else self._read_object(directory, ref, copy, source)

    def _read_object(self, directory: str, ref: ObjectRef, copy: str,
                     source: str) -> LoadedObject | None:
        path = os.path.join(directory, copy)
        cache_key = self._cache_key(source, copy, "elf")
        if cache_key:
            hit = self.cache.load(cache_key)
            if hit is not None and not self._stale(
                    hit[1], directory, ref, self._here_of(directory, ref, copy, source)):
                table, meta = hit
                fdes = self._fdes(source, cache_key) if meta.get("stripped_without_debug") \
                    else None
                return LoadedObject([Segment(*s) for s in meta["segments"]], table, fdes)
        try:
            elf = read_elf(source)
        except ElfProblem as e:
            self.warn(f"{path}: {e}; its symbols are unknown")
            return None
        debug = None
        if not elf.has_symtab:
            debug = self._debug_symbols(directory, ref, elf.build_id or ref.build_id,
                                        elf.debuglink, self._here_of(directory, ref, copy, source))
        table = _merge(elf.symbols, debug[1]) if debug else elf.symbols
        if cache_key:
            self.cache.store(cache_key, table, {
                "segments": [list(s) for s in elf.segments],
                "stripped_without_debug": not elf.has_symtab and debug is None,
                "build_id": elf.build_id or ref.build_id,
                "debuglink": list(elf.debuglink) if elf.debuglink else None,
            })
        stripped = not elf.has_symtab and debug is None
        fdes = self._fdes(source, cache_key) if stripped else None
        return LoadedObject(elf.segments, table, fdes)

    def _fdes(self, path: str, cache_key: str | None) -> SymbolTable:
        """The function ranges of a stripped copy, through the cache (a large
        library's unwind table takes a second to read)."""
        key = cache_key and cache_key.removesuffix("-elf") + "-fde"
        hit = self.cache.load(key) if key else None
        if hit is not None:
            return hit[0]
        table = read_fde_ranges(path)
        if key:
            self.cache.store(key, table, {})
        return table

    def _stale(self, meta: dict[str, Any], directory: str, ref: ObjectRef, here: Here) -> bool:
        """A cached stripped table is stale once a debug file has appeared."""
        try:
            segments_ok = all(len(s) == 3 and all(isinstance(v, int) for v in s)
                              for s in meta["segments"])
        except (KeyError, TypeError):
            return True
        if not segments_ok:
            return True
        if not meta.get("stripped_without_debug"):
            return False
        link = meta.get("debuglink")
        debuglink = (link[0], link[1]) if isinstance(link, list) and len(link) == 2 else None
        build_id = meta.get("build_id") if isinstance(meta.get("build_id"), str) else None
        return bool(self._debug_candidates(directory, ref, build_id, debuglink, here))

    def _debug_candidates(self, directory: str, ref: ObjectRef, build_id: str | None,
                          debuglink: tuple[str, int] | None, here: Here) -> list[DebugFile]:
        """The files that may hold the debug info, existing ones only (debugfiles.py)."""
        return candidates(directory, ref, build_id, debuglink, here, self.debug_roots,
                          self.debuginfod)

    def _here_of(self, directory: str, ref: ObjectRef, copy: str, source: str) -> Here:
        """Whether the copy (verified, at ``source``) is the very file its
        ``q:path`` names on this machine, one that only the user or root can
        change (``localfiles.same_file_here``); asked only when it matters,
        answered once per copy."""
        def here() -> bool:
            key = _content_key(directory, copy)
            if key not in self._here:
                digest = self._digest(source, copy)
                try:
                    size = os.stat(source).st_size
                except OSError:
                    size = -1
                self._here[key] = size >= 0 and digest is not None and same_file_here(
                    ref.path, size, digest, self.max_copy or MAX_LOCAL)
            return self._here[key]
        return here

    def _debug_symbols(self, directory: str, ref: ObjectRef, build_id: str | None,
                       debuglink: tuple[str, int] | None,
                       here: Here) -> tuple[ElfObject, SymbolTable] | None:
        return matching(self._debug_candidates(directory, ref, build_id, debuglink, here),
                        build_id, debuglink)

    # ------------------------------------------------------------ source lines

    def lines(self, directory: str, ref: ObjectRef, copy: str | None) -> ObjectLines | None:
        """The source lines of an object copy: from its own DWARF, else from
        its separate debug file (build-id, debuglink); None without either."""
        if copy is None:
            return None
        key = _content_key(directory, copy)
        if key not in self._lines:
            self._lines[key] = None
            with self._verified(directory, copy) as source:
                if source is not None:
                    self._lines[key] = self._load_lines(directory, ref, copy, source)
        return self._lines[key]

    def _load_lines(self, directory: str, ref: ObjectRef, copy: str,
                    source: str) -> ObjectLines | None:
        cache_key = self._cache_key(source, copy, "lines")
        opener: Any = None
        label = os.path.join(directory, copy)
        key = _content_key(directory, copy)
        if has_lines(source):
            opener = lambda: self._verified(directory, copy)  # noqa: E731
            self._lines_from[key] = None
        else:
            try:
                elf = read_elf(source, symbols=False)
            except ElfProblem:
                return None
            for debug in self._debug_candidates(directory, ref, elf.build_id or ref.build_id,
                                                elf.debuglink,
                                                self._here_of(directory, ref, copy, source)):
                if has_lines(debug.path):
                    opener, label = path_opener(debug.path), debug.path
                    cache_key = cache_key and f"{cache_key}-{path_tag(debug.path)}"
                    self._lines_from[key] = debug
                    break
        if opener is None:
            return None
        hit = self.cache.load(cache_key) if cache_key else None
        inl = self.cache.load(cache_key + "-inl") if cache_key and hit is not None else None
        index = LineIndex.from_meta(hit[0], hit[1], inl) if hit is not None else None
        if index is None:
            try:
                with opener() as path:
                    if path is None:
                        return None
                    index = read_index(path, self.max_debug)
            except LineProblem as e:
                self.warn(f"{label}: {e}; its source lines are unknown")
                return None
        def store(ix: LineIndex) -> None:
            if cache_key:
                self.cache.store(cache_key + "-inl", ix.inlines, ix.meta())
                self.cache.store(cache_key, ix.table, ix.meta())
        return ObjectLines(index, opener, label, store, self.warn, self.max_debug)

    def lines_named_here(self, directory: str, ref: ObjectRef, copy: str) -> bool:
        """Whether the line table ``lines`` gave for the copy is that of a file
        of this machine's that only the user or root can change: the object
        at its ``q:path``, or a debug file in a debug directory or beside
        it. The source files it names are then the user's own business, not
        the archive's (docs/security.md 6)."""
        key = _content_key(directory, copy)
        if key not in self._lines_from:
            return False
        debug = self._lines_from[key]
        if debug is not None:
            return debug.local and only_owner_can_change(debug.path)
        with self._verified(directory, copy) as source:
            return source is not None and self._here_of(directory, ref, copy, source)()

    def roots(self, directory: str, copy: str) -> SymbolTable | None:
        """Where stacks end in the object ``copy`` (fde.read_root_ranges); None
        where there is no trustworthy copy to read them from."""
        key = _content_key(directory, copy)
        if key not in self._roots:
            self._roots[key] = None
            with self._verified(directory, copy) as source:
                if source is not None:
                    cache_key = self._cache_key(source, copy, "roots")
                    hit = self.cache.load(cache_key) if cache_key else None
                    table = hit[0] if hit is not None else read_root_ranges(source)
                    if hit is None and cache_key:
                        self.cache.store(cache_key, table, {})
                    self._roots[key] = table
        return self._roots[key]

    # ------------------------------------------------------------ kallsyms, perf maps

    def kallsyms(self, directory: str, copy: str) -> Kallsyms | None:
        key = _content_key(directory, copy)
        if key not in self._kallsyms:
            self._kallsyms[key] = None
            with self._verified(directory, copy) as source:
                if source is not None:
                    self._kallsyms[key] = self._cached_kallsyms(directory, copy, source)
        return self._kallsyms[key]

    def _cached_kallsyms(self, directory: str, copy: str, source: str) -> Kallsyms | None:
        # A kallsyms copy is 5 MB of text: parsing it line by line dominates
        # a view. One in the kernel's own layout is looked up in its sorted
        # lines (kallsyms.py), which costs less than a cached table: its
        # cache entry only says that its layout was checked. Any other is
        # parsed and cached like any object's symbols.
        path = os.path.join(directory, copy)
        cache_key = self._cache_key(source, copy, "kallsyms")
        hit = self.cache.load(cache_key) if cache_key else None
        checked = hit is not None and hit[1].get("layout") == "kernel"
        if hit is None or checked:
            try:
                with os.fdopen(open_regular(source), "rb") as f:
                    text = read_plain(f.read(MAX_TEXT + 1), checked)
            except OSError as e:
                self.warn(f"{path}: cannot read: {e.strerror}; kernel symbols are unknown")
                return None
            if text is not None:
                if cache_key and not checked:
                    self.cache.store(cache_key, SymbolTable.empty(), {"layout": "kernel"})
                return Kallsyms(SymbolTable.empty(), {}, text.restricted,
                                None if text.restricted else text)
        if hit is not None and not checked:
            table, meta = hit
            modules = meta.get("modules")
            if isinstance(modules, list) and all(
                    isinstance(m, list) and len(m) == 2 and isinstance(m[0], int)
                    and isinstance(m[1], str) for m in modules):
                return Kallsyms(table, dict((a, b) for a, b in modules),
                                bool(meta.get("restricted")))
        ks = self._load_kallsyms(path, source)
        if ks is not None and cache_key:
            self.cache.store(cache_key, ks.table, {
                "restricted": ks.restricted, "modules": sorted(ks.modules.items())})
        return ks

    def _load_kallsyms(self, path: str, source: str) -> Kallsyms | None:
        try:
            with os.fdopen(open_regular(source), "rb") as f:
                got = read_lines(f)
        except OSError as e:
            self.warn(f"{path}: cannot read: {e.strerror}; kernel symbols are unknown")
            return None
        if got.malformed:
            self.warn(f"{path}: {got.malformed} malformed line(s) ignored")
        return Kallsyms(got.table, got.modules, got.restricted)

    def perf_map(self, directory: str, copy: str) -> SymbolTable | None:
        key = _content_key(directory, copy)
        if key not in self._perf_maps:
            self._perf_maps[key] = None
            with self._verified(directory, copy) as source:
                if source is not None:
                    self._perf_maps[key] = self._load_perf_map(os.path.join(directory, copy),
                                                               source)
        return self._perf_maps[key]

    def _load_perf_map(self, path: str, source: str) -> SymbolTable | None:
        try:
            with os.fdopen(open_regular(source), "rb") as f:
                table, bad = read_perf_map(f)
        except OSError as e:
            self.warn(f"{path}: cannot read: {e.strerror}")
            return None
        if bad:
            self.warn(f"{path}: {bad} malformed line(s) ignored")
        return table

    def jitdump(self, directory: str, copy: str) -> JitNames | None:
        key = _content_key(directory, copy)
        if key not in self._jitdumps:
            self._jitdumps[key] = None
            with self._verified(directory, copy) as source:
                if source is not None:
                    from .jitnames import load_jitdump  # only where a JIT wrote a dump
                    self._jitdumps[key] = load_jitdump(source, self.warn,
                                                        os.path.join(directory, copy))
        return self._jitdumps[key]


def _merge(a: SymbolTable, b: SymbolTable) -> SymbolTable:
    """Symbols of a stripped copy (dynsym, PLT) completed by its debug file's:
    where both name a start, the debug file's symbol (its name and end)."""
    by_start = dict(zip(a.starts, zip(a.ends, a.names)))
    by_start.update(zip(b.starts, zip(b.ends, b.names)))
    order = sorted(by_start)
    return SymbolTable(array("Q", order), array("Q", [by_start[s][0] for s in order]),
                       [by_start[s][1] for s in order])


def _content_key(directory: str, copy: str) -> tuple[str, str]:
    """What a loaded copy is remembered by. A copy named by its content
    (``.NAME.crc32.XXXXXXXX``) is read once whichever directory, archive or
    host holds it: the inputs of one profile are trusted alike, and the
    symbol cache is keyed by a SHA-256 of the content anyway. Other names
    (hand-made files) are per directory."""
    return ("", copy) if _crc_of(copy) is not None else (directory, copy)


def _crc_of(copy: str | None) -> int | None:
    try:
        return parse_copy_name(copy)[1] if copy else None
    except QFormatError:
        return None  # a hand-made .info may name its copies otherwise
