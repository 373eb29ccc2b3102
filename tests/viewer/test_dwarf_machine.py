"""q-view's DWARF and call-frame readers read this machine's objects as
pyelftools does.

q-view reads DWARF and ``.eh_frame`` with its own readers only
(viewer/naming: dwarfread, lineprog, diescan, aranges, fde); pyelftools is
their oracle here. Every ELF program and shared library under /usr/bin
and /usr/lib (recursively, symlinks not followed, each file once) that
has ``.debug_info`` and ``.debug_line`` is read both ways: its units and
``.debug_aranges``, the line rows of 3 of its units (all, where it has
fewer), each such unit's functions, the inlined chains at up to 100
addresses of each (row starts, addresses inside rows, function starts)
and its ``.eh_frame`` FDEs with the rows where a stack ends. Relocatable
objects (``.o``, ``.ko``) are not read: q-view reads only what a process
maps. On Debian most programs are stripped; CI installs libc6-dbg,
libpython3.11-dbg and libstdc++6-12-dbg (.ci/run), whose debug files and
debug builds (C and C++, DWARF 5) join the objects that ship their DWARF
(DWARF 4 and 5): 330 objects here, in about a minute.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dwarf_oracle import compare

from qtools.qformat.objects.elfhdr import read_file_header, read_sections

ROOTS = ("/usr/bin", "/usr/lib")


def _with_dwarf(path: str) -> tuple[int, bool] | None:
    """(DWARF version of the first unit, 64-bit ELF) of an ELF program or
    library with line tables; None for anything else."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return None
            header = read_file_header(f)  # (a relocatable object has no program headers)
            names = {s.name: s for s in read_sections(f, os.fstat(f.fileno()).st_size)}
    except (OSError, ValueError):
        return None
    info = names.get(".debug_info") or names.get(".zdebug_info")
    if info is None or not ({".debug_line", ".zdebug_line"} & set(names)):
        return None
    from qtools.viewer.naming.dwarfread import DwarfFile
    try:
        with open(path, "rb") as f:
            return DwarfFile(f).unit(0).version, header.is64
    except Exception:  # noqa: BLE001 - the comparison says what is wrong
        return 0, header.is64


def _objects() -> dict[str, tuple[int, bool]]:
    found: dict[str, tuple[int, bool]] = {}
    seen: set[tuple[int, int]] = set()
    for root in ROOTS:
        for directory, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                got = _with_dwarf(path)
                if got is not None:
                    found[path] = got
    return found


@pytest.fixture(scope="module")
def objects() -> dict[str, tuple[int, bool]]:
    found = _objects()
    if not found:
        pytest.skip("no object under /usr/bin or /usr/lib has DWARF here")
    return found


def test_every_object_with_dwarf_here_is_read_as_pyelftools_reads_it(objects):
    failed, totals = [], [0] * 5
    for path in sorted(objects):
        try:
            got = compare(path, units=3, per_unit=100)
        except AssertionError as e:
            failed.append(f"{path}: {e}"[:300])
            continue
        totals = [a + b for a, b in zip(totals, got)]
    assert not failed, "\n".join(failed)
    units, rows, addresses, inlined, fdes = totals
    # what was compared: enough that a reader's mistake would have shown
    assert units >= len(objects) and rows > 1000 and addresses > 1000 and inlined > 1000
    assert fdes > 1000


def test_the_objects_here_cover_dwarf_4_and_5_and_a_cxx_library(objects):
    """What CI installs (.ci/run) is here: the sweep above covers both DWARF
    versions in use and a large C++ library."""
    versions = {v for v, _ in objects.values()}
    assert {4, 5} <= versions, versions
    cxx = [p for p in objects if Path(p).name.startswith("libstdc++.so")]
    assert cxx, "libstdc++6-12-dbg is not installed"
