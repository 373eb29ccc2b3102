"""dwarfread.py reads what pyelftools reads: line rows and inlined code.

q-view reads the line program and the inlined subroutines of the units
its addresses fall in from the bytes (dwarfread.py, lineprog.py,
diescan.py), with no other reader to fall back on. Checked here against
pyelftools (tests/dwarf_oracle.py) on objects built at test time: C and
C++, DWARF 2 to 5, compressed both ways, split DWARF, type units, 32-bit
x86 and, through LLVM, big-endian MIPS (32-bit) and PowerPC (64-bit);
64-bit DWARF, which pyelftools does not read, against the same program
built with 32-bit DWARF. Damaged bytes give an answer or one LineProblem,
never another exception.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dwarf_oracle import compare, dwarf_of
from tests.conftest import command

from qtools.qformat.objects.elfhdr import read_sections
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


FLAGS = [(), ("-gdwarf-2",), ("-gdwarf-3",), ("-gdwarf-4",), ("-gz",), ("-gdwarf-4", "-gz"),
         ("-gz=zlib-gnu",), ("-gsplit-dwarf",), ("-gsplit-dwarf", "-gdwarf-4"),
         ("-fdebug-types-section",), ("-fdebug-types-section", "-gdwarf-4"),
         ("-O3",), ("-Os", "-gstrict-dwarf", "-gdwarf-3")]


@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: " ".join(f) or "default")
@pytest.mark.parametrize("source", ["hotline.c", "calls.c", "shapes.cpp"])
def test_rows_and_inlined_code_as_pyelftools_reads_them(tmp_path, source, flags):
    got = compare(_build(tmp_path, source, *flags), per_unit=400)
    assert got.units and got.rows and got.addresses
    if source == "hotline.c" and "-gsplit-dwarf" not in flags:  # square() inlined in spin()
        assert got.inlined


def test_32_bit_x86_as_pyelftools_reads_it(tmp_path):
    out = tmp_path / "nolibc32"
    built = subprocess.run(["cc", "-m32", "-nostdlib", "-static", "-g", "-O2", "-o", str(out),
                            str(SRC / "nolibc.c")], capture_output=True, check=False)
    if built.returncode:
        pytest.skip("the compiler does not build 32-bit x86 programs")
    got = compare(out, per_unit=400)
    assert got.rows and got.fdes


def _tool(*names: str) -> str:
    for name in names:
        if shutil.which(name):
            return name
    pytest.skip(f"{names[0]} is not installed")


@pytest.mark.parametrize("version", [4, 5])
@pytest.mark.parametrize("triple", ["mips-linux-gnu", "powerpc64-linux-gnu", "i686-linux-gnu"])
def test_big_endian_and_32_bit_objects_as_pyelftools_reads_them(tmp_path, triple, version):
    """Objects no compiler here builds: LLVM's for big-endian MIPS (32-bit)
    and PowerPC (64-bit), and 32-bit x86, from IR with an inlined function."""
    llc, lld = _tool("llc", "llc-14"), _tool("ld.lld", "ld.lld-14")
    ir = tmp_path / "be.ll"
    ir.write_text(INLINED_IR.replace("@VERSION@", str(version)))
    obj, exe = tmp_path / "be.o", tmp_path / "be"
    subprocess.run([llc, "-O0", f"-mtriple={triple}", "-filetype=obj", "-generate-arange-section",
                    str(ir), "-o", str(obj)], check=True, capture_output=True)
    subprocess.run([lld, "-e", "spin", "-o", str(exe), str(obj)], check=True,
                   capture_output=True)
    got = compare(exe, per_unit=400)
    assert got.rows >= 4 and got.inlined and got.fdes == 2
    with open(exe, "rb") as f:
        index = aranges.read_index(str(exe))
        df = dwarflines.open_dwarf(f)
        spin = index.ranges[-1][0]  # square, then spin
        unit = index.ranges[0][2]
        names = set()
        for start, end in zip(*_table(dwarflines.run(dwarflines.parse_rows({unit}), df)[0])[:2]):
            _spans, chains = dwarflines.run(dwarflines.parse_inlines(unit, start, {}), df)
            names |= {c.split("\x1f")[0] for c in chains.names}
        assert spin and names == {"square"}


# A C function inlined twice, as LLVM IR (``@VERSION@``: the DWARF version)
INLINED_IR = """\
source_filename = "be.c"

define dso_local i32 @square(i32 %x) #0 !dbg !10 {
entry:
  %m = mul nsw i32 %x, %x, !dbg !14
  ret i32 %m, !dbg !15
}

define dso_local i32 @spin(i32 %n) #0 !dbg !16 {
entry:
  %a = mul nsw i32 %n, %n, !dbg !18
  %b = add nsw i32 %a, 1, !dbg !20
  %c = mul nsw i32 %b, %b, !dbg !21
  %d = add nsw i32 %c, %n, !dbg !23
  ret i32 %d, !dbg !23
}

attributes #0 = { nounwind uwtable "frame-pointer"="all" }

!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!3, !4}

!0 = distinct !DICompileUnit(language: DW_LANG_C99, file: !1, producer: "hand", \
isOptimized: true, runtimeVersion: 0, emissionKind: FullDebug)
!1 = !DIFile(filename: "be.c", directory: "/src")
!3 = !{i32 7, !"Dwarf Version", i32 @VERSION@}
!4 = !{i32 2, !"Debug Info Version", i32 3}
!10 = distinct !DISubprogram(name: "square", scope: !1, file: !1, line: 1, type: !11, \
scopeLine: 1, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !0)
!11 = !DISubroutineType(types: !12)
!12 = !{null}
!14 = !DILocation(line: 2, column: 10, scope: !10)
!15 = !DILocation(line: 2, column: 3, scope: !10)
!16 = distinct !DISubprogram(name: "spin", scope: !1, file: !1, line: 5, type: !11, \
scopeLine: 5, spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !0)
!18 = !DILocation(line: 2, column: 10, scope: !10, inlinedAt: !19)
!19 = distinct !DILocation(line: 6, column: 11, scope: !16)
!20 = !DILocation(line: 7, column: 5, scope: !16)
!21 = !DILocation(line: 2, column: 10, scope: !10, inlinedAt: !22)
!22 = distinct !DILocation(line: 8, column: 11, scope: !16)
!23 = !DILocation(line: 9, column: 3, scope: !16)
"""


def _everything(path: Path) -> tuple:
    """Every row of ``path`` and the inlined chain at each row's start."""
    with open(path, "rb") as f:
        df = dwarflines.open_dwarf(f)
        rows = dwarflines.run(dwarflines.parse_rows(None), df)[0]
        index = aranges.read_index(str(path))
        found: dwarflines.Functions = {}
        chains = []
        for start in rows.starts:
            unit = index.unit_of(start)
            got = dwarflines.run(dwarflines.parse_inlines(unit, start, found), df)
            chains.append((got[0], _table(got[1])))
        return _table(rows), chains


@pytest.mark.parametrize("source", ["hotline.c", "calls.c", "shapes.cpp"])
@pytest.mark.parametrize("version", ["-gdwarf-4", "-gdwarf-5"])
def test_64_bit_dwarf_reads_as_the_same_program_in_32_bit_dwarf(tmp_path, source, version):
    """pyelftools does not read a 64-bit DWARF line program (it fails on
    its header): the oracle is the same source built with 32-bit DWARF,
    whose code, rows and inlined chains are the same."""
    wide = _build(tmp_path, source, version, "-gdwarf64")
    narrow = _build(tmp_path, source, version, "-gdwarf32")
    with open(wide, "rb") as f:
        assert DwarfFile(f).unit(0).offset_size == 8
    assert wide.read_bytes() != narrow.read_bytes()
    ours, theirs = _everything(wide), _everything(narrow)
    assert ours == theirs and ours[0][0] and any(c[1][2] for c in ours[1])


def test_names_in_a_dwz_file_are_not_looked_up(tmp_path):
    """dwz moves what two programs share into a supplementary file
    (``.gnu_debugaltlink``), which q-view does not open: the rows and the
    inlined ranges are read as before, a name found only there is "?"
    (pyelftools, without that file, raised and the lines were lost)."""
    dwz = _tool("dwz")
    a = _build(tmp_path, "shapes.cpp")
    b = _build(tmp_path, "shapes.cpp", "-O3")
    before = _everything(a)
    common = tmp_path / "common.debug"
    subprocess.run([dwz, "-m", str(common), "-M", str(common), str(a), str(b)], check=True,
                   capture_output=True)
    with open(a, "rb") as f:
        assert ".gnu_debugaltlink" in {s.name for s in read_sections(f, a.stat().st_size)}
    after = _everything(a)
    assert after[0] == before[0]  # the rows
    unknown = 0
    for (spans, chains), (spans0, chains0) in zip(after[1], before[1], strict=True):
        assert spans == spans0 and chains[:2] == chains0[:2]  # the inlined ranges
        for chain, chain0 in zip(chains[2], chains0[2], strict=True):
            for frame, frame0 in zip(chain.split("\x1e"), chain0.split("\x1e"), strict=True):
                name, rest = frame.split("\x1f", 1)
                assert rest == frame0.split("\x1f", 1)[1] and name in ("?", frame0.split("\x1f")[0])
                unknown += name == "?"
    assert unknown


def test_a_skeleton_unit_gives_its_rows_and_no_inlined_code(tmp_path):
    """-gsplit-dwarf leaves a skeleton unit in the program (its entries are
    in the .dwo file, which q-view does not open): its line rows are read,
    as pyelftools reads them, and no inlined code is named."""
    path = _build(tmp_path, "hotline.c", "-gsplit-dwarf", "-gdwarf-5")
    with open(path, "rb") as f:
        df = dwarflines.open_dwarf(f)
        unit = df.unit_offsets()[0]
        assert df.unit(unit).top.tag == "DW_TAG_skeleton_unit" or df.unit(unit).version == 5
        rows = dwarflines.run(dwarflines.parse_rows({unit}), df)[0]
        assert any(name.endswith("hotline.c:" + name.rpartition(":")[2]) for name in rows.names)
        spans, chains = dwarflines.run(dwarflines.parse_inlines(unit, rows.starts[0], {}), df)
        assert not chains.names


def test_q_view_never_imports_pyelftools(tmp_path, hotline):
    """pyelftools is the tests' oracle only: the installed q-view, showing
    a profile's source lines, inlined frames and annotated code, never
    imports it (``python -X importtime`` lists every module imported)."""
    from test_lines import _inlined_q
    info = _inlined_q(tmp_path, hotline)
    for args, shown in ((["--flat", "--graph", "--inline"], "square"),
                        (["--flat", "--by", "line"], "hotline.c:"),
                        (["--annotate", "spin"], "/* INLINED */")):
        done = subprocess.run([sys.executable, "-X", "importtime", command("q-view"), *args,
                               "--no-cache", info], capture_output=True, text=True,
                              check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        imported = [line.rpartition("|")[2].strip() for line in done.stderr.splitlines()
                    if line.startswith("import time:")]
        assert "qtools.viewer.naming.dwarfread" in imported, args  # DWARF was read
        assert not [m for m in imported if m.split(".")[0] == "elftools"], args
        assert shown in done.stdout, (args, done.stdout)


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
        try:
            df = dwarflines.open_dwarf(f)
        except dwarflines.LineProblem:
            return
        for start, _end, unit in index.ranges[:3]:
            for work in (dwarflines.parse_rows({unit}),
                         dwarflines.parse_inlines(unit, start, {})):
                try:
                    dwarflines.run(work, df)
                except dwarflines.LineProblem:
                    pass


def test_a_sibling_that_leads_back_is_not_followed(tmp_path):
    """A unit whose DW_AT_sibling leads back to an earlier entry (a walk
    that followed it would never end; pyelftools' does not): the scan stops
    there and the unit is read entry by entry, its functions and inlined
    code as before the damage."""
    path = _build(tmp_path, "hotline.c", "-gdwarf-4")
    with open(path, "rb") as f:
        dw = dwarf_of(f)
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
    addresses = [lo for lo, _hi, _u in aranges.read_index(str(path)).ranges]

    def read() -> list:
        with open(path, "rb") as f:
            df = dwarflines.open_dwarf(f)
            found: dwarflines.Functions = {}
            got = [dwarflines.run(dwarflines.parse_inlines(unit, a, found), df)
                   for a in addresses]
            return [(spans, _table(t)) for spans, t in got] + [found]
    before = read()
    with open(path, "r+b") as f:
        f.seek(info.offset + at)
        f.write(back.to_bytes(4, "little"))
    assert read() == before and before[-1][unit]


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
            dwarflines.run(dwarflines.parse_rows({unit}), dwarflines.open_dwarf(f, cap))
    with pytest.raises(dwarflines.LineProblem, match=r"over the limit of 64 bytes \(debug-size\)"):
        aranges.read_index(str(path), cap)


def test_a_plain_section_over_the_cap_is_not_read_either(tmp_path):
    path = _build(tmp_path, "hotline.c")
    assert aranges.read_index(str(path)).ranges  # read under the default cap
    with pytest.raises(dwarflines.LineProblem, match=r"\.debug_\w+ holds \d+ bytes, over the "
                                                     r"limit of 64 bytes \(debug-size\)"):
        aranges.read_index(str(path), 64)


def test_a_vliw_line_program_and_a_file_it_defines():
    """What no compiler here emits, on a program made byte by byte: several
    operations per instruction (the address advances by whole instructions,
    DWARF 5 6.2.5.1) and DW_LNE_define_file (DWARF 2 to 4)."""
    from qtools.viewer.naming.lineprog import _Advance, _rows
    special = bytes([13 + 1 * 14 + 5])  # one operation on, the line as it is
    program = (b"\x00\x09\x02" + (0x1000).to_bytes(8, "little")  # set_address
               + special * 3
               + b"\x02\x04\x01"  # advance_pc: 4 operations, then copy
               + b"\x08\x01"  # const_add_pc: 17 operations, then copy
               + b"\x00\x08\x03x.c\x00\x01\x00\x00"  # define_file x.c, directory 1
               + b"\x04\x02\x01"  # set_file 2, copy
               + b"\x00\x01\x01")  # end_sequence
    files: list[tuple[str, int]] = [("a.c", 0)]
    rows = list(_rows(program, 0, len(program), "little", 8,
                      _Advance(min_inst=4, max_ops=3, line_base=-5, line_range=14,
                               opcode_base=13), bytes([0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1]),
                      files))
    assert rows == [(0x1000, 1, 1, False), (0x1000, 1, 1, False), (0x1004, 1, 1, False),
                    (0x1008, 1, 1, False), (0x1020, 1, 1, False), (0x1020, 2, 1, False),
                    (0x1020, 2, 1, True)]
    assert files == [("a.c", 0), ("x.c", 1)]
