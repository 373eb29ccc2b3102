"""Stripped objects by function: unnamed code grouped by its `.eh_frame` FDE."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from qsynth import MS, QBuilder
from scenarios import run

from dwarf_oracle import fde_entries

from qtools.qformat.objects.elfhdr import read_file_header
from qtools.viewer.naming.fde import _entries, read_fde_ranges, read_root_ranges


def test_fde_ranges_are_the_functions(stripped_plain):
    full, bare = stripped_plain
    table = read_fde_ranges(bare.path)
    ranges = dict(zip(table.starts, table.ends))
    for name in ("leaf1", "leaf2", "work", "main", "rec"):
        start, size = full.functions[name]
        assert ranges[start] == start + size, name


def test_unnamed_code_is_grouped_by_function(tmp_path, stripped_plain):
    full, bare = stripped_plain
    assert "leaf1" not in bare.functions  # strip removed the symbols
    q = QBuilder(tmp_path / ".q")
    o = q.load(bare, name="calls", path="/nonexistent/calls")

    def at(func: str, offset: int = 1) -> int:
        return o.link(full.functions[func][0] + offset)

    init = full.functions["_init"][0]  # .init has no FDE
    stacks = [(2 * MS, [at("leaf1"), at("work", 2), at("main", 2)]),
              (1 * MS, [at("leaf1", 3), at("work", 2), at("main", 2)]),
              (1 * MS, [at("leaf2"), at("main", 2)]),
              (1 * MS, [o.link(init + 1)])]
    name = q.task("calls", 2, 0, stacks=stacks, exe="/opt/demo/calls")
    code, out, err = run(q.info_path(name), "--flat")
    assert (code, err) == (0, "")
    rows = {line.split()[-1]: line.split()[1] for line in out.splitlines()
            if line.strip().endswith("<calls>")}
    leaf1 = f"0x{full.functions['leaf1'][0]:x}<calls>"
    assert rows == {leaf1: "3.00m", f"0x{full.functions['leaf2'][0]:x}<calls>": "1.00m",
                    f"0x{init + 1:x}<calls>": "1.00m"}
    assert ("1 row is a single address (no symbol, and no unwind entry to group by "
            "function): 1.00m seconds, 20.00% in all") in out
    # the call graph links the groups as it links functions
    doc = json.loads(run(q.info_path(name), "--format", "json")[1])
    arcs = {(a["caller"], a["callee"]) for a in doc["arcs"]}
    work = f"0x{full.functions['work'][0]:x}<calls>"
    main = f"0x{full.functions['main'][0]:x}<calls>"
    assert {(main, work), (work, leaf1)} <= arcs
    # --by address still shows each address
    doc = json.loads(run(q.info_path(name), "--format", "json", "--by", "address")[1])
    names = {f["name"] for f in doc["functions"] if f["self"]}
    leaf1_start = full.functions["leaf1"][0]
    assert {f"0x{leaf1_start + 1:x}<calls>", f"0x{leaf1_start + 3:x}<calls>"} <= names


def test_stack_quality_is_decided_by_the_unwind_tables(tmp_path, stripped_plain):
    """A stack is rooted when its outermost frame is where the CFI undefines
    the return address (_start), whatever the object's symbols say."""
    full, bare = stripped_plain
    q = QBuilder(tmp_path / ".q")
    o = q.load(bare, name="calls", path="/nonexistent/calls")

    def at(func: str, offset: int = 2) -> int:
        return o.link(full.functions[func][0] + offset)

    stacks = [(6 * MS, [at("leaf1", 1), at("work"), at("main"), at("_start")]),
              (2 * MS, [at("leaf2", 1), at("main")]),  # cut short: ends in main
              (2 * MS, [at("_start", 1)])]  # sampled in _start itself
    name = q.task("calls", 2, 0, stacks=stacks, exe="/opt/demo/calls")
    code, out, err = run(q.info_path(name), "--stack-quality")
    assert (code, err) == (0, "")
    assert "Stack quality: 80.0% of user stacks reach a root frame" in out
    doc = json.loads(run(q.info_path(name), "--format", "json")[1])
    assert doc["stack_quality"]["share"] == 0.8
    assert "undefined" in doc["stack_quality"]["rule"]


OBJECTS = ["/lib/x86_64-linux-gnu/libc.so.6", "/bin/bash", "/lib/x86_64-linux-gnu/libm.so.6"]


@pytest.mark.parametrize("path", OBJECTS)
def test_the_shared_parser_reads_what_pyelftools_reads(path):
    """Objects are read with the collector's parser (qformat.ehframe):
    every FDE, and every row that undefines the return address, as
    pyelftools decodes them (32-bit and big-endian objects:
    test_dwarfread.py)."""
    if not os.path.exists(path):
        pytest.skip(f"{path} is not on this machine")
    with open(path, "rb") as f:
        theirs = [(e.start, e.size, e.ra_undefined or None) for e in fde_entries(f, True)]
    with open(path, "rb") as f:
        ours = [(e.start, e.size, e.ra_undefined or None)
                for e in _entries(f, read_file_header(f), True)]
    assert len(ours) > 100 and ours == theirs


def test_roots_of_libc_are_its_clone_children_and_entry():
    libc = OBJECTS[0]
    if not os.path.exists(libc):
        pytest.skip("no libc at the Debian path")
    roots = read_root_ranges(libc)
    assert "entry" in roots.names and "ra-undefined" in roots.names


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_eh_frame_gives_fewer_ranges_never_an_error(tmp_path, damage):
    data = bytearray(Path(OBJECTS[1]).read_bytes() if os.path.exists(OBJECTS[1]) else b"")
    if not data:
        pytest.skip("no /bin/bash")
    import io
    from qtools.qformat.objects.elfhdr import read_sections
    sec = next(s for s in read_sections(io.BytesIO(bytes(data)), len(data))
               if s.name == ".eh_frame")
    if damage == "truncate":  # zeros from the middle on: a terminator there
        half = sec.offset + sec.size // 2
        data[half:sec.offset + sec.size] = bytes(sec.offset + sec.size - half)
    else:
        rng = random.Random(3)
        for _ in range(200):
            data[sec.offset + rng.randrange(sec.size)] ^= 0xFF
    bad = tmp_path / "bash"
    bad.write_bytes(bytes(data))
    got = read_fde_ranges(bad)  # no exception, whatever the bytes say
    read_root_ranges(bad)
    if damage == "truncate":  # the entries before the zeros, as they were
        assert 0 < len(got.starts) < len(read_fde_ranges(OBJECTS[1]).starts)


def _libc_eh_frame():
    import io
    from qtools.qformat.objects.elfhdr import read_sections
    if not os.path.exists(OBJECTS[0]):
        pytest.skip("no libc at the Debian path")
    data = Path(OBJECTS[0]).read_bytes()
    sec = next(s for s in read_sections(io.BytesIO(data), len(data)) if s.name == ".eh_frame")
    return data[sec.offset:sec.offset + sec.size], sec.addr


def test_the_fde_walk_finds_what_the_unwinder_looks_up():
    """q-view's walk over `.eh_frame` (qformat.ehframe.iter_fdes) and the
    collector's lookup through `.eh_frame_hdr` find the same FDE at each start."""
    from qtools.daemon.unwind import ObjectCFI
    from qtools.qformat.objects.ehframe import EH_FRAME, CieCache, iter_fdes, parse_fde
    data, addr = _libc_eh_frame()
    cies = CieCache(data, EH_FRAME)
    fdes = list(iter_fdes(data, 0, len(data), EH_FRAME,
                          lambda off: parse_fde(data, off, len(data), EH_FRAME, addr, 0, cies)))
    cfi = ObjectCFI.from_path(OBJECTS[0])
    assert len(fdes) == cfi.fde_count > 1000
    for fde in fdes:
        if fde.pc_range > 0:
            found = cfi.fde_at(fde.pc_begin)
            assert found is not None and (found.pc_begin, found.pc_range) == \
                (fde.pc_begin, fde.pc_range)


def test_the_fde_walk_reads_at_most_max_entries():
    from qtools.qformat.objects.ehframe import EH_FRAME, CieCache, iter_fdes, parse_fde
    data, addr = _libc_eh_frame()
    cies = CieCache(data, EH_FRAME)

    def walk(limit):
        return list(iter_fdes(data, 0, len(data), EH_FRAME,
                              lambda off: parse_fde(data, off, len(data), EH_FRAME, addr, 0, cies),
                              limit))
    every, first = walk(None), walk(100)
    assert 90 < len(first) < 100 and first == every[:len(first)]  # the CIEs count too
