"""Stripped objects by function: unnamed code grouped by its `.eh_frame` FDE."""

from __future__ import annotations

import json

from qsynth import MS, QBuilder
from scenarios import run

from qtools.viewer.naming.fde import read_fde_ranges


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
