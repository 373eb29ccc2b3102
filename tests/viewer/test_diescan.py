"""The unit scan of diescan.py finds the functions pyelftools finds.

A first view names the code inlined at a return address by the subprogram
that holds it; the scan steps over a unit's entries by their bytes rather
than decoding every one. Checked here against pyelftools' own walk
(tests/dwarf_oracle.py) on real objects (C and C++, DWARF 4 and 5,
compressed, a function split into a hot and a cold part), and on units
made byte by byte: what it does not read it leaves to dwarfread.py, and
damaged bytes end it.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dwarf_oracle

from qtools.viewer.naming import dwarflines
from qtools.viewer.naming.diescan import UnitBytes, subprograms
from qtools.viewer.naming.dwarflines import functions_by_entry, own_unit

SRC = Path(__file__).resolve().parent.parent / "data" / "src"
COLD = """
#include <stdlib.h>
__attribute__((noinline)) int work(int n) {
    if (__builtin_expect(n < 0, 0)) { abort(); }
    int s = 0;
    for (int i = 0; i < n; i++) s += i * i;
    return s;
}
int main(int argc, char **argv) { (void)argv; return work(argc); }
"""


def _build(tmp_path: Path, src: Path, *flags: str, cxx: bool = False) -> Path:
    out = tmp_path / (src.stem + "".join(flags).replace("-", "_"))
    try:
        done = subprocess.run(["c++" if cxx else "cc", "-g", "-O2", *flags, "-o", str(out),
                               str(src), "-lm"], capture_output=True, text=True, check=False)
    except OSError:
        pytest.skip("no C/C++ compiler")
    assert done.returncode == 0, done.stderr
    return out


def _both(path: Path, units: int = 10_000) -> list[tuple[list, list | None, list]]:
    """Per unit (up to ``units``, picked alike each time): pyelftools' spans,
    the scan's and dwarfread's entry by entry (``functions_by_entry``)."""
    out = []
    with open(path, "rb") as f, open(path, "rb") as f2:
        dw = dwarf_oracle.dwarf_of(f)
        df = dwarflines.open_dwarf(f2)
        offsets = dwarf_oracle.unit_offsets(dw)
        if len(offsets) > units:
            offsets = random.Random(7).sample(offsets, units)
        for offset in offsets:
            slow = dwarf_oracle.functions(dw, offset)
            u = df.unit(offset)
            fast = subprograms(own_unit(u), lambda off, u=u: u.ranges(u.entry(off), u.low_pc))
            whole = functions_by_entry(u, u.low_pc)
            out.append((sorted(slow), None if fast is None else sorted(fast), sorted(whole)))
    return out


@pytest.mark.parametrize("source,flags", [
    ("calls.c", ()), ("calls.c", ("-gdwarf-4",)), ("hotline.c", ("-gz",)),
    ("shapes.cpp", ()), ("shapes.cpp", ("-gdwarf-4",)), ("cold.c", ()),
    ("cold.c", ("-gdwarf-4",))])
def test_the_scan_finds_what_pyelftools_finds(tmp_path, source, flags):
    src = SRC / source
    if source == "cold.c":
        src = tmp_path / source
        src.write_text(COLD)
    units = _both(_build(tmp_path, src, *flags, cxx=source.endswith(".cpp")))
    assert units and any(slow for slow, _, _ in units)
    for slow, fast, whole in units:
        assert fast == slow and whole == slow
    if source == "cold.c":  # work and work.cold: one subprogram, two ranges (DW_AT_ranges)
        offsets = [off for slow, _, _ in units for _lo, _hi, off in slow]
        assert any(offsets.count(o) == 2 for o in offsets)


def test_this_machines_debug_files_scan_as_pyelftools_reads_them(debug_files):
    for path in debug_files[:2]:
        for slow, fast, whole in _both(path, units=80):
            assert fast == slow and whole == slow, path


# ---------------------------------------------------------------- units made by hand

ABBREVS = {
    1: ("DW_TAG_compile_unit", True, [("DW_AT_name", "DW_FORM_string")]),
    2: ("DW_TAG_subprogram", False, [("DW_AT_name", "DW_FORM_string"),
                                     ("DW_AT_low_pc", "DW_FORM_addr"),
                                     ("DW_AT_high_pc", "DW_FORM_data4")]),
    3: ("DW_TAG_namespace", True, [("DW_AT_name", "DW_FORM_strp")]),
    4: ("DW_TAG_subprogram", True, [("DW_AT_sibling", "DW_FORM_ref4"),
                                    ("DW_AT_low_pc", "DW_FORM_addr"),
                                    ("DW_AT_high_pc", "DW_FORM_addr")]),
    5: ("DW_TAG_variable", False, [("DW_AT_location", "DW_FORM_exprloc"),
                                   ("DW_AT_const_value", "DW_FORM_sdata")]),
    6: ("DW_TAG_subprogram", True, [("DW_AT_low_pc", "DW_FORM_addr"),
                                    ("DW_AT_high_pc", "DW_FORM_udata")]),
    7: ("DW_TAG_subprogram", False, [("DW_AT_ranges", "DW_FORM_sec_offset")]),
    8: ("DW_TAG_base_type", False, [("DW_AT_name", "DW_FORM_GNU_weird")]),
}
HEADER = 11  # DWARF 4, 32-bit: unit_length 4, version 2, abbrev offset 4, address size 1


def _unit(body: bytes, abbrevs=ABBREVS) -> UnitBytes:
    """A DWARF 4 unit at offset 0 whose entries are ``body``."""
    return UnitBytes(body, HEADER, 0, 4, 8, 4, "little", lambda code: abbrevs[code])


def _u32(v: int) -> bytes:
    return v.to_bytes(4, "little")


def _u64(v: int) -> bytes:
    return v.to_bytes(8, "little")


def _unit_bytes() -> tuple[bytes, list[tuple[int, int, int]], int]:
    """A unit: a function; a namespace holding a function with children
    (jumped over by its sibling) and one whose children are stepped over
    (a nested function there is not the unit's); a function with a range
    list (left to dwarfread). Returns the bytes, the spans and the range
    entry's offset."""
    body = bytearray()
    spans = []
    body += b"\x01cu\x00"
    at = HEADER + len(body)
    body += b"\x02f\x00" + _u64(0x1000) + _u32(0x40)
    spans.append((0x1000, 0x1040, at))
    body += b"\x03" + _u32(0)  # namespace
    at = HEADER + len(body)
    sibling_at = len(body) + 1
    body += b"\x04" + _u32(0) + _u64(0x2000) + _u64(0x2100)
    spans.append((0x2000, 0x2100, at))
    body += b"\x05\x02\x91\x7c\x7f" + b"\x02inner\x00" + _u64(0x9000) + _u32(1) + b"\x00"
    body[sibling_at:sibling_at + 4] = _u32(HEADER + len(body))
    at = HEADER + len(body)
    body += b"\x06" + _u64(0x3000) + b"\x80\x01"  # high_pc 128 as ULEB128
    spans.append((0x3000, 0x3080, at))
    body += b"\x02nested\x00" + _u64(0x8000) + _u32(8) + b"\x00"  # its child, not the unit's
    body += b"\x00"  # the namespace ends
    ranged = HEADER + len(body)
    body += b"\x07" + _u32(0x100)
    spans.append((0x4000, 0x4010, ranged))
    spans.append((0x5000, 0x5008, ranged))
    body += b"\x00"  # the unit ends
    return bytes(body), spans, ranged


def test_a_unit_made_by_hand_gives_its_functions():
    body, spans, ranged = _unit_bytes()
    unit = _unit(body)
    asked = []

    def ranges_of(offset: int) -> list[tuple[int, int]]:
        asked.append(offset)
        return [(0x4000, 0x4010), (0x5000, 0x5008)]

    assert subprograms(unit, ranges_of) == spans
    assert asked == [ranged]


@pytest.mark.parametrize("damage", ["backward sibling", "truncated", "unknown form",
                                    "unknown abbreviation"])
def test_what_the_scan_cannot_read_ends_it(damage):
    body, _spans, _ = _unit_bytes()
    body = bytearray(body)
    if damage == "backward sibling":
        at = body.index(b"\x04")
        body[at + 1:at + 5] = _u32(HEADER)
    elif damage == "truncated":
        body = body[:len(body) // 2]
    elif damage == "unknown form":
        body[-1:-1] = b"\x08x\x00"
    else:
        body[-1:-1] = b"\x2a"
    unit = _unit(bytes(body))
    assert subprograms(unit, lambda off: []) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 200))
def test_any_bytes_end_in_an_answer_or_none(noise, at):
    """Damage anywhere: the scan returns (spans or None), it never raises
    nor loops."""
    body, _spans, _ = _unit_bytes()
    at = min(at, len(body))
    damaged = body[:at] + noise + body[at + len(noise):]
    unit = _unit(damaged)
    got = subprograms(unit, lambda off: [])
    assert got is None or all(isinstance(s, tuple) and len(s) == 3 for s in got)
