"""dwarfread.py reads what pyelftools reads: line rows and inlined code.

A first view reads the line program and the inlined subroutines of the
units its addresses fall in from the bytes (dwarfread.py) and leaves to
pyelftools only what that does not read. Checked here unit by unit
against pyelftools' own reading on real objects (C and C++, DWARF 4 and
5, compressed sections, this machine's separate debug files); split
DWARF goes to pyelftools; damaged bytes give an answer or one
LineProblem, never another exception.
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtools.qformat.elfhdr import read_sections
from qtools.viewer.naming import aranges, dwarflines
from qtools.viewer.naming.dwarfread import DwarfFile, Unsupported

SRC = Path(__file__).resolve().parent.parent / "data" / "src"


def _build(tmp_path: Path, source: str, *flags: str) -> Path:
    cxx = source.endswith(".cpp")
    out = tmp_path / (Path(source).stem + "".join(flags).replace("-", "_").replace("=", "_"))
    try:
        done = subprocess.run(["c++" if cxx else "cc", "-g", "-O2", *flags, "-o", str(out),
                               str(SRC / source), "-lm"], capture_output=True, text=True,
                              check=False, cwd=tmp_path)
    except OSError:
        pytest.skip("no C/C++ compiler")
    assert done.returncode == 0, done.stderr
    return out


def _table(t) -> tuple:
    return list(t.starts), list(t.ends), list(t.names)


def _compare(path: Path, units: int = 10_000, per_unit: int = 40) -> int:
    """Compare both readers on up to ``units`` units of ``path``; returns
    how many inlined ranges were compared (so a test knows it saw some)."""
    inlined = 0
    with open(path, "rb") as f1, open(path, "rb") as f2:
        dw = dwarflines.dwarf_of(f1)
        df = DwarfFile(f2)
        offsets = sorted(cu.cu_offset for cu in dw.iter_CUs())
        assert df.unit_offsets() == offsets
        if len(offsets) > units:
            offsets = sorted(random.Random(5).sample(offsets, units))
        for unit in offsets:
            work = dwarflines.parse_rows({unit})
            slow, fast = work.elftools(dw), work.own(df)
            assert _table(fast[0]) == _table(slow[0]), (path, unit)
            assert fast[1] == slow[1]
            starts = list(slow[0].starts)
            picked = starts if len(starts) <= per_unit else \
                random.Random(unit).sample(starts, per_unit)
            for address in picked:
                work = dwarflines.parse_inlines(unit, address, {})
                slow_i, fast_i = work.elftools(dw), work.own(df)
                assert fast_i[0] == slow_i[0], (path, unit, hex(address))
                assert _table(fast_i[1]) == _table(slow_i[1]), (path, unit, hex(address))
                inlined += len(slow_i[1].names)
    return inlined


@pytest.mark.parametrize("source,flags", [
    ("hotline.c", ()), ("hotline.c", ("-gdwarf-4",)), ("hotline.c", ("-gz",)),
    ("hotline.c", ("-gdwarf-4", "-gz")), ("hotline.c", ("-gz=zlib-gnu",)),
    ("calls.c", ()), ("calls.c", ("-gdwarf-4",)),
    ("shapes.cpp", ()), ("shapes.cpp", ("-gdwarf-4",)), ("shapes.cpp", ("-O3",))])
def test_rows_and_inlined_code_as_pyelftools_reads_them(tmp_path, source, flags):
    _compare(_build(tmp_path, source, *flags))


def test_this_machines_debug_files_read_as_pyelftools_reads_them(debug_files):
    # the largest (libc's, where installed) inline a lot: make sure some were compared
    assert sum(_compare(path, units=25, per_unit=25) for path in debug_files[:3]) > 0


def test_split_dwarf_is_left_to_pyelftools(tmp_path):
    """A skeleton unit (-gsplit-dwarf) is not read here: run() hands it
    to pyelftools, whose answer it returns."""
    path = _build(tmp_path, "hotline.c", "-gsplit-dwarf", "-gdwarf-5")
    with open(path, "rb") as f1, open(path, "rb") as f2:
        dw = dwarflines.dwarf_of(f1)
        df = DwarfFile(f2)
        unit = next(dw.iter_CUs()).cu_offset
        work = dwarflines.parse_rows({unit})
        with pytest.raises(Unsupported):
            work.own(df)
        got = dwarflines.run(work, df, lambda: dw)
        assert _table(got[0]) == _table(work.elftools(dw)[0])


def test_a_first_view_of_plain_dwarf_does_not_import_pyelftools(tmp_path):
    """pyelftools costs a first view more to import than the reading
    itself: an object with plain DWARF is read without it."""
    path = _build(tmp_path, "hotline.c", "-gz")
    code = f"""
import sys
from qtools.viewer.naming import aranges, dwarflines
index = aranges.read_index({str(path)!r})
unit = index.ranges[0][2]
with open({str(path)!r}, "rb") as f:
    own = dwarflines.own_dwarf(f)
    rows = dwarflines.run(dwarflines.parse_rows({{unit}}), own, None)
    start = list(rows[0].starts)[len(rows[0].starts) // 2]
    dwarflines.run(dwarflines.parse_inlines(unit, start, {{}}), own, None)
print(len(rows[0].names), any(m.startswith("elftools") for m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert int(out[0]) > 0 and out[1] == "False"


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_damaged_dwarf_gives_an_answer_or_a_line_problem(tmp_path_factory, data):
    base = tmp_path_factory.mktemp("dwarf")
    path = _build(base, "hotline.c")
    damaged = base / "damaged"
    shutil.copyfile(path, damaged)
    with open(damaged, "rb") as f:
        sections = {s.name: s for s in read_sections(f, damaged.stat().st_size)}
    name = data.draw(st.sampled_from([".debug_info", ".debug_line", ".debug_abbrev",
                                      ".debug_rnglists", ".debug_str"]))
    sec = sections.get(name)
    if sec is None:
        return
    at = data.draw(st.integers(0, max(sec.size - 1, 0)))
    noise = data.draw(st.binary(min_size=1, max_size=16))
    with open(damaged, "r+b") as f:
        f.seek(sec.offset + at)
        f.write(noise[:max(sec.size - at, 0)])
    index = aranges.read_index(str(path))
    with open(damaged, "rb") as f:
        own = dwarflines.own_dwarf(f)
        dw: list = []

        def elftools():
            if not dw:
                dw.append(dwarflines.dwarf_of(f))
            return dw[0]
        for start, _end, unit in index.ranges[:3]:
            for work in (dwarflines.parse_rows({unit}),
                         dwarflines.parse_inlines(unit, start, {})):
                try:
                    dwarflines.run(work, own, elftools)
                except dwarflines.LineProblem:
                    pass


def test_a_sibling_that_leads_back_ends_in_a_line_problem(tmp_path):
    """A unit whose DW_AT_sibling leads back to an earlier entry: neither
    reader may walk it forever (pyelftools' children of such a unit are
    endless); the view gets a LineProblem."""
    path = _build(tmp_path, "hotline.c", "-gdwarf-4")
    with open(path, "rb") as f:
        dw = dwarflines.dwarf_of(f)
        info = next(s for s in read_sections(f, path.stat().st_size) if s.name == ".debug_info")
        cu = next(dw.iter_CUs())
        top = cu.get_top_DIE()
        first = next(top.iter_children())
        die = next(d for d in top.iter_children() if "DW_AT_sibling" in d.attributes
                   and d.offset > first.offset)
        attr = die.attributes["DW_AT_sibling"]
        assert attr.form == "DW_FORM_ref4"
        at, back = attr.offset, first.offset - cu.cu_offset
        unit = cu.cu_offset
    with open(path, "r+b") as f:
        f.seek(info.offset + at)
        f.write(back.to_bytes(4, "little"))
    with open(path, "rb") as f:
        own = dwarflines.own_dwarf(f)
        address = next(lo for lo, _hi, _u in aranges.read_index(str(path)).ranges)
        with pytest.raises(dwarflines.LineProblem):
            dwarflines.run(dwarflines.parse_inlines(unit, address, {}), own,
                           lambda: dwarflines.dwarf_of(f))


def test_a_compressed_section_shorter_than_it_says_is_not_read_past_its_end(tmp_path):
    """A compressed section whose header says more than it inflates to:
    what is not there is Unsupported (a string read there ended in an
    endless loop)."""
    path = _build(tmp_path, "hotline.c", "-gz")
    with open(path, "rb") as f:
        sec = next(s for s in read_sections(f, path.stat().st_size) if s.name == ".debug_str")
        f.seek(sec.offset)
        kind, _reserved, size = struct.unpack("<IIQ", f.read(16))
    assert kind == 1  # ELFCOMPRESS_ZLIB
    with open(path, "r+b") as f:
        f.seek(sec.offset + 8)
        f.write(struct.pack("<Q", size + 4096))
    with open(path, "rb") as f:
        df = DwarfFile(f)
        assert df.read(".debug_str", 0, 4) == df.read(".debug_str", 0, 4)  # what is there
        with pytest.raises(Unsupported):
            df.read(".debug_str", size, 16)
        with pytest.raises(Unsupported):
            df.cstr(".debug_str", size)


def test_a_compressed_section_that_says_it_is_huge_is_not_inflated(tmp_path):
    """A compressed section's header says how much it holds; past the
    bound it is read as absent (a zlib bomb is not inflated into memory),
    and the lines of its object are unknown rather than the view gone."""
    path = _build(tmp_path, "hotline.c", "-gz")
    unit = aranges.read_index(str(path)).ranges[0][2]
    cap = 64  # smaller than any real .debug_info
    with open(path, "rb") as f:
        with pytest.raises(Unsupported):
            DwarfFile(f, cap).read(".debug_info", 0, 16)
        with pytest.raises(dwarflines.LineProblem):
            dwarflines.run(dwarflines.parse_rows({unit}), dwarflines.own_dwarf(f, cap),
                           lambda: dwarflines.dwarf_of(f, cap))
    with pytest.raises(dwarflines.LineProblem, match=r"over the limit of 64 bytes \(debug-size\)"):
        aranges.read_index(str(path), cap)


def test_a_plain_section_over_the_cap_is_not_read_either(tmp_path):
    path = _build(tmp_path, "hotline.c")
    assert aranges.read_index(str(path)).ranges  # read under the default cap
    with pytest.raises(dwarflines.LineProblem, match=r"\.debug_\w+ holds \d+ bytes, over the "
                                                     r"limit of 64 bytes \(debug-size\)"):
        aranges.read_index(str(path), 64)
