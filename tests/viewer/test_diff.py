"""q-view --diff: two synthetic profiles with known changes compared.

BASE (10 ms of calls)            NEW (20 ms of calls)
  leaf1 <- work <- main  4 ms      leaf1 <- work <- main        2 ms
  leaf2 <- work <- main  2 ms      leaf2 <- work <- main        5 ms
  rec <- main            2 ms      ping <- main                 6 ms   (new)
  main                   2 ms      main                         3 ms
                                   vfs_read <- do_syscall_64 <- main 4 ms (kernel, new)

Self shares (base -> new, points): leaf1 40 -> 10 (-30), ping 0 -> 30 (+30),
rec 20 -> 0 (-20, gone), vfs_read 0 -> 20 (+20), leaf2 20 -> 25 (+5),
main 20 -> 15 (-5), work 0 -> 0 (inclusive 60 -> 35), do_syscall_64 0 -> 0
(inclusive 0 -> 20).
"""

from __future__ import annotations

import json

import pytest

from qsynth import MS, QBuilder
from scenarios import EXE, KALLSYMS, run
from tests.conftest import q_view

VFS_READ, DO_SYSCALL = 0xFFFFFFFF81004040, 0xFFFFFFFF81001010


def _side(path, binary, spec, pid, **task):
    q = QBuilder(path)
    o = q.load(binary, base=0x555500000000 + pid * 0x100000000)
    q.add_kallsyms(KALLSYMS)

    def frames(names):
        return [n if isinstance(n, int) else o.at(n) if i == 0 else o.ret(n)
                for i, n in enumerate(names)]
    q.task("calls", pid, 0, exe=EXE, stacks=[(ms * MS, frames(f)) for ms, f in spec], **task)
    return q


BASE = [(4, ["leaf1", "work", "main"]), (2, ["leaf2", "work", "main"]), (2, ["rec", "main"]),
        (2, ["main"])]
NEW = [(2, ["leaf1", "work", "main"]), (5, ["leaf2", "work", "main"]), (6, ["ping", "main"]),
       (3, ["main"]), (4, [VFS_READ, DO_SYSCALL + 1, "main"])]


@pytest.fixture
def sides(tmp_path, calls_pie):
    base = _side(tmp_path / "base.q", calls_pie, BASE, 100)
    new = _side(tmp_path / "new.q", calls_pie, NEW, 200)
    return str(base.path), str(new.path)


def _rows(doc):
    return [(f["name"], f["status"], f["base_self_percent"], f["new_self_percent"],
             f["self_points"], f["inclusive_points"]) for f in doc["functions"]]


def test_shares_points_order_and_new_gone(sides):
    code, out, err = run("--diff", *sides, "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["format"], doc["comparison"], doc["unit"], doc["by"]) == \
        (1, "shares", "seconds", "function")
    assert (doc["base"]["total"], doc["new"]["total"]) == (0.01, 0.02)
    assert doc["base"]["input"] == sides[0] and doc["new"]["tasks"][0]["pid"] == 200
    assert _rows(doc) == [
        ("leaf1", "both", 40.0, 10.0, -30.0, -30.0),
        ("ping", "new", 0.0, 30.0, 30.0, 30.0),
        ("rec", "gone", 20.0, 0.0, -20.0, -20.0),
        ("vfs_read", "new", 0.0, 20.0, 20.0, 20.0),
        ("leaf2", "both", 20.0, 25.0, 5.0, 5.0),
        ("main", "both", 20.0, 15.0, -5.0, 0.0),
        ("work", "both", 0.0, 0.0, 0.0, -25.0),
        ("do_syscall_64", "new", 0.0, 0.0, 0.0, 20.0),
    ]
    work = next(f for f in doc["functions"] if f["name"] == "work")
    assert (work["base_inclusive"], work["new_inclusive"], work["inclusive_change"],
            work["base_inclusive_percent"], work["new_inclusive_percent"]) == \
        (0.006, 0.007, 0.001, 60.0, 35.0)
    vfs = next(f for f in doc["functions"] if f["name"] == "vfs_read")
    assert vfs["kernel"] and vfs["base_self"] == 0.0 and vfs["new_self"] == 0.004


def test_text_report(sides):
    code, out, err = run("--diff", *sides)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "Comparison by function (change: new - base)",
        f"Base: {sides[0]}: 1 task set, 10.0m seconds of cpu-clock",
        f"New:  {sides[1]}: 1 task set, 20.0m seconds of cpu-clock",
        "times in seconds; m = 1e-3, u = 1e-6, n = 1e-9",
        "Shares (% time) of each side's own total; change in percentage points; "
        "largest change first",
        "        self %                 inclusive %",
        "   base     new  change     base     new  change  name",
        "  40.00   10.00  -30.00    40.00   10.00  -30.00  leaf1",
        "   0.00   30.00  +30.00     0.00   30.00  +30.00  ping [new]",
        "  20.00    0.00  -20.00    20.00    0.00  -20.00  rec [gone]",
        "   0.00   20.00  +20.00     0.00   20.00  +20.00  vfs_read [new]",
        "  20.00   25.00   +5.00    20.00   25.00   +5.00  leaf2",
        "  20.00   15.00   -5.00   100.00  100.00    0.00  main",
        "   0.00    0.00    0.00    60.00   35.00  -25.00  work",
        "   0.00    0.00    0.00     0.00   20.00  +20.00  do_syscall_64 [new]",
    ]


def test_absolute_orders_by_time(sides):
    doc = json.loads(run("--diff", *sides, "--absolute", "--format", "json")[1])
    assert doc["comparison"] == "absolute"
    assert [(f["name"], f["self_change"], f["inclusive_change"]) for f in doc["functions"]] == [
        ("ping", 0.006, 0.006), ("vfs_read", 0.004, 0.004), ("leaf2", 0.003, 0.003),
        ("leaf1", -0.002, -0.002), ("rec", -0.002, -0.002), ("main", 0.001, 0.01),
        ("do_syscall_64", 0.0, 0.004), ("work", 0.0, 0.001)]
    code, out, err = run("--diff", *sides, "--absolute")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[4:9] == [
        "Times as measured, not normalized; largest change first",
        "         self                   inclusive",
        "   base     new  change     base     new  change  name",
        "   0.00   6.00m  +6.00m     0.00   6.00m  +6.00m  ping [new]",
        "   0.00   4.00m  +4.00m     0.00   4.00m  +4.00m  vfs_read [new]"]
    assert "  2.00m   3.00m  +1.00m    10.0m   20.0m  +10.0m  main" in lines


def test_min_percent_leaves_out_small_changes(sides):
    doc = json.loads(run("--diff", *sides, "--min-percent", "10", "--format", "json")[1])
    assert [f["name"] for f in doc["functions"]] == \
        ["leaf1", "ping", "rec", "vfs_read", "work", "do_syscall_64"]
    assert doc["functions_left_out"] == {"count": 2} and doc["min_percent"] == 10
    out = run("--diff", *sides, "--min-percent", "10")[1]
    assert out.endswith("... 2 more changed by less than 10 points\n")


def test_by_object(sides):
    doc = json.loads(run("--diff", *sides, "--by", "object", "--format", "json")[1])
    assert doc["by"] == "object"
    assert _rows(doc) == [("[kernel.kallsyms]", "new", 0.0, 20.0, 20.0, 20.0),
                          ("calls", "both", 100.0, 80.0, -20.0, 0.0)]


def test_collapsed_is_two_column_folded(sides):
    code, out, err = run("--diff", *sides, "--format", "collapsed", "--absolute")
    assert (code, err) == (0, "")
    assert out == (
        "calls;main 2000000 3000000\n"
        "calls;main;do_syscall_64_[k];vfs_read_[k] 0 4000000\n"
        "calls;main;ping 0 6000000\n"
        "calls;main;rec 2000000 0\n"
        "calls;main;work;leaf1 4000000 2000000\n"
        "calls;main;work;leaf2 2000000 5000000\n")
    # each column is what --format collapsed prints for that side alone
    for column, side in ((1, sides[0]), (2, sides[1])):
        alone = run(side, "--format", "collapsed")[1]
        want = {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in alone.splitlines()}
        got = {line.split(" ")[0]: line.split(" ")[column] for line in out.splitlines()
               if line.split(" ")[column] != "0"}
        assert got == want
    # by default BASE is scaled to NEW's total, as difffolded.pl -n does
    normalized = run("--diff", *sides, "--format", "collapsed")[1]
    assert normalized.splitlines()[0] == "calls;main 4000000 3000000"
    assert normalized.splitlines()[4] == "calls;main;work;leaf1 8000000 2000000"


def test_each_side_has_its_own_window(tmp_path, calls_pie):
    """One directory, two days: --base-since/--base-until window BASE,
    --since/--until NEW."""
    day = 86400.0
    q = _side(tmp_path / ".q", calls_pie, BASE, 100,
              extra_info={"start_time": 10 * day, "end_time": 10 * day + 3600})
    o = q.objects[0]
    q.task("calls", 100, 0, version=1, exe=EXE,
           extra_info={"start_time": 11 * day, "end_time": 11 * day + 3600},
           stacks=[(4 * MS, [o.at("leaf2"), o.ret("work"), o.ret("main")])])
    d = str(q.path)
    code, out, err = run("--diff", d, d, "--base-since", f"@{10 * day}", "--base-until",
                         f"@{10.5 * day}", "--since", f"@{11 * day}", "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert (doc["base"]["since"], doc["base"]["until"], doc["new"]["since"],
            doc["new"]["until"]) == (10 * day, 10.5 * day, 11 * day, None)
    assert (doc["base"]["total"], doc["new"]["total"]) == (0.01, 0.004)
    assert doc["functions"][0]["name"] == "leaf2" and doc["functions"][0]["self_points"] == 80
    # without --base-*, --since/--until window both sides
    doc = json.loads(run("--diff", d, d, "--since", f"@{11 * day}", "--format", "json")[1])
    assert doc["base"]["total"] == doc["new"]["total"] == 0.004
    assert all(f["self_points"] == 0 for f in doc["functions"])


def test_bad_inputs_one_line(tmp_path, sides):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = q_view("--diff", str(empty), sides[1])
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"q-view: base side: {empty}: ")
    proc = q_view("--diff", sides[0], str(tmp_path / "nothing.q"))
    assert proc.returncode == 1 and proc.stderr.startswith("q-view: new side")
    assert proc.stderr.count("\n") == 1
    code, out, err = run("--diff", *sides, "--comm", "nosuch")
    assert code == 1 and err.startswith("q-view: base side: ") and err.count("\n") == 1
    for argv, message in (
            (["--diff", *sides, "--format", "dot"], "--diff shows --format text, json, "
                                                    "collapsed, not dot"),
            (["--diff", *sides, "--graph"], "--graph does not go with --diff"),
            ([sides[0], "--diff", *sides], "--diff BASE NEW takes its two inputs itself"),
            ([sides[0], "--base-since", "1h ago"], "--base-since goes with --diff"),
            ([sides[0], "--absolute"], "--absolute goes with --diff"),
            (["--diff", *sides, "--base-since", "soon"], "--base-since: not a time"),
            (["--diff", *sides, "--base-since", "@20", "--base-until", "@10"],
             "--base-until @10 is before --base-since @20")):
        code, out, err = run(*argv)
        assert code == 2 and out == "" and err.startswith(f"q-view: {message}"), (argv, err)
        assert err.count("\n") == 1
    proc = q_view("--diff", sides[0])
    assert proc.returncode == 2 and "expected 2 arguments" in proc.stderr


def test_installed_command_diffs(sides):
    proc = q_view("--diff", *sides, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["functions"][0]["name"] == "leaf1"
    assert "--diff BASE NEW" in q_view("--help").stdout


def test_program_names_and_sides_without_stacks(tmp_path, calls_pie):
    """PROG.info on each side; histograms alone: no inclusive times."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.task("calls", 1, 0, exe=EXE, hist={o.at("leaf1"): 3 * MS, o.at("leaf2"): 1 * MS})
    q.task("other", 2, 0, exe=EXE, hist={o.at("leaf2"): 2 * MS, o.at("work"): 2 * MS})
    d = q.path
    code, out, err = run("--diff", f"{d}/calls.info", f"{d}/other.info", "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert not doc["has_stacks"]
    assert [(f["name"], f["status"], f["self_points"], f["inclusive_points"])
            for f in doc["functions"]] == [
        ("leaf1", "gone", -75.0, None), ("work", "new", 50.0, None),
        ("leaf2", "both", 25.0, None)]
    out = run("--diff", f"{d}/calls.info", f"{d}/other.info")[1]
    assert "  75.00    0.00  -75.00        -       -       -  leaf1 [gone]\n" in out
