"""Separate debug files of an object: where they are looked for, and which
one matches.

An archive names the object's build-id, its ``.gnu_debuglink`` and the
path it was mapped from (``q:path``). A build-id is hex digits and is
looked up in the debug directories (``--debug-root``, ``$Q_DEBUG_ROOT``,
``/usr/lib/debug``) as it is: it names no directory. The other names lead
only to files inside the `.q` directory and the debug directories, with
symlinks resolved before the check (``localfiles.confined``), and beside
the object's path only where the copy is that very file of this machine's
(``here``): otherwise an archive could make q-view open any file of the
machine that has the debuglink's name.
"""

from __future__ import annotations

import os
import zlib
from typing import Callable, NamedTuple

from qtools.qformat import ObjectRef, check_plain_name, open_regular
from qtools.qformat.errors import QFormatError

from .debuginfod import Debuginfod
from .elfsymbols import ElfObject, ElfProblem, read_elf
from .localfiles import confined
from .symtab import SymbolTable

Here = Callable[[], bool]  # whether the copy is the very file at its q:path on this machine
HEX = frozenset("0123456789abcdef")


class DebugFile(NamedTuple):
    """A file that may hold an object's debug info."""

    path: str
    how: str  # "build-id" or "debuglink": what must match
    # In a debug directory of this machine's or beside the object itself,
    # not in the archive or fetched: the names in its line table are not
    # the archive's
    local: bool


def candidates(directory: str, ref: ObjectRef, build_id: str | None,
               debuglink: tuple[str, int] | None, here: Here, debug_roots: list[str],
               debuginfod: Debuginfod | None) -> list[DebugFile]:
    """The files that may hold the debug info of the copy in ``directory``
    (the `.q` directory), existing ones only, in the order to try them."""
    archive = directory or "."
    out: list[DebugFile | None] = []
    if build_id and len(build_id) > 2 and set(build_id) <= HEX:
        rel = os.path.join(".build-id", build_id[:2], build_id[2:] + ".debug")
        out.append(_within(archive, rel, "build-id", False))
        out += [DebugFile(os.path.join(root, rel), "build-id", True) for root in debug_roots]
    if debuglink:
        try:
            name = check_plain_name(debuglink[0])
        except QFormatError:
            name = None  # a debuglink with a path in it could point anywhere
        if name:
            out.append(_within(archive, name, "debuglink", False))
            if ref.path and os.path.isabs(ref.path):
                orig = os.path.dirname(os.path.normpath(ref.path))
                beside = [os.path.join(orig, name), os.path.join(orig, ".debug", name)]
                if any(os.path.isfile(p) for p in beside) and here():
                    out += [DebugFile(p, "debuglink", True) for p in beside]
                out += [_within(root, os.path.join(orig.lstrip("/"), name), "debuglink", True)
                        for root in debug_roots]
    found = [c for c in out if c is not None and os.path.isfile(c.path)]
    if not found and build_id and debuginfod is not None:
        fetched = debuginfod.debuginfo(build_id, lambda p: _has_build_id(p, build_id))
        if fetched:
            found.append(DebugFile(fetched, "build-id", False))
    return found


def matching(found: list[DebugFile], build_id: str | None,
             debuglink: tuple[str, int] | None) -> tuple[ElfObject, SymbolTable] | None:
    """The first of ``found`` that is the object's debug file (its build-id,
    or the debuglink's crc), read, with its symbols."""
    for path, how, _local in found:
        try:
            dbg = read_elf(path)
        except ElfProblem:
            continue
        if how == "build-id" and dbg.build_id and dbg.build_id != build_id:
            continue
        if how == "debuglink" and debuglink and not _crc_matches(path, debuglink[1]):
            if not (build_id and dbg.build_id == build_id):
                continue
        return dbg, dbg.symbols
    return None


def _within(root: str, rel: str, how: str, local: bool) -> DebugFile | None:
    """``root/rel`` where it leads (symlinks resolved) below ``root``, else None."""
    real = confined(os.path.join(root, rel), root)
    return DebugFile(real, how, local) if real is not None else None


def _has_build_id(path: str, build_id: str) -> bool:
    try:
        return read_elf(path, symbols=False).build_id == build_id
    except ElfProblem:
        return False


def _crc_matches(path: str, expected: int) -> bool:
    crc = 0
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            while chunk := f.read(1 << 20):
                crc = zlib.crc32(chunk, crc)
    except OSError:
        return False
    return crc == expected
