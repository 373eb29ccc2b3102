"""q-view's command line: inputs, merging, selection, JSON, options."""

from __future__ import annotations

import json

import pytest

import golden
from qsynth import MS, QBuilder
from scenarios import EXE, calls_dir, run


def _two_processes(tmp_path, binary):
    """calls ran twice (pids 10 and 11, different load addresses) on two CPUs;
    pid 10 has two versions (a rotation)."""
    q = QBuilder(tmp_path / ".q")
    a = q.load(binary, base=0x555500000000)
    q.task("calls", 10, 0, version=0, objects=[a], exe=EXE,
           stacks=[(1 * MS, [a.at("leaf1"), a.ret("work"), a.ret("main")])])
    q.task("calls", 10, 0, version=1, objects=[a], exe=EXE,
           stacks=[(2 * MS, [a.at("leaf1"), a.ret("work"), a.ret("main")])])
    q.task("calls", 10, 1, objects=[a], exe=EXE,
           stacks=[(3 * MS, [a.at("leaf2"), a.ret("work"), a.ret("main")])])
    b = QBuilder(q.path).load(binary, base=0x7A0000000000)
    q.task("calls", 11, 0, objects=[b], exe=EXE,
           stacks=[(4 * MS, [b.at("leaf1"), b.ret("helper"), b.ret("main")])])
    q.task("other", 12, 0, objects=[b], exe="/bin/other",
           stacks=[(5 * MS, [b.at("main")])])
    return q


def _selfs(out: str) -> dict[str, float]:
    doc = json.loads(out)
    return {f["name"]: round(f["self"] * 1000, 6) for f in doc["functions"] if f["self"]}


def test_merging_cpus_pids_and_versions(tmp_path, calls_pie):
    q = _two_processes(tmp_path, calls_pie)
    d = str(q.path)
    # without #N: the latest version (2 ms, not 1 ms)
    assert _selfs(run(f"{d}/calls-pid10-cpu0.info", "--format", "json")[1]) == {"leaf1": 2}
    assert _selfs(run(f"{d}/calls-pid10-cpu0.info#0", "--format", "json")[1]) == {"leaf1": 1}
    # two CPUs of one process
    code, out, err = run(f"{d}/calls-pid10-cpu0.info", f"{d}/calls-pid10-cpu1.info",
                         "--format", "json")
    assert (code, err) == (0, "")
    assert _selfs(out) == {"leaf1": 2, "leaf2": 3}
    # two processes at different load addresses: merged by function
    out = run(d, "--comm", "calls", "--format", "json")[1]
    assert _selfs(out) == {"leaf1": 6, "leaf2": 3}
    doc = json.loads(out)
    assert sorted((t["pid"], t["cpu"]) for t in doc["tasks"]) == [(10, 0), (10, 1), (11, 0)]
    work = next(f for f in doc["functions"] if f["name"] == "work")
    assert work["inclusive"] == pytest.approx(0.005)
    # all versions
    out = run(d, "--comm", "calls", "--all-versions", "--format", "json")[1]
    assert _selfs(out) == {"leaf1": 7, "leaf2": 3}
    # pid and cpu selections
    assert _selfs(run(d, "--pid", "10", "--format", "json")[1]) == {"leaf1": 2, "leaf2": 3}
    assert _selfs(run(d, "--cpu", "0", "--format", "json")[1]) == {"leaf1": 6, "main": 5}
    assert _selfs(run(d, "--cpu", "0", "--comm", "other", "--format", "json")[1]) == {"main": 5}
    code, out, err = run(d, "--comm", "calls", "--flat")
    golden.check("merged.txt", out)


def test_the_same_set_named_twice_counts_once(tmp_path, calls_pie):
    q = _two_processes(tmp_path, calls_pie)
    name = f"{q.path}/calls-pid10-cpu1.info"
    assert _selfs(run(name, name + "#0", "--format", "json")[1]) == {"leaf2": 3}


def test_json_follows_the_design_contract(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    for key in ("event", "unit", "total", "lost_samples", "tasks", "functions", "arcs"):
        assert key in doc
    assert (doc["event"], doc["unit"], doc["lost_samples"]) == ("cpu-clock", "seconds", 0)
    assert doc["total"] == pytest.approx(0.024)
    assert doc["tasks"][0] == {**doc["tasks"][0], "comm": "calls", "pid": 1234, "cpu": 0,
                               "file": "calls-pid1234-cpu0.info#0"}
    main = next(f for f in doc["functions"] if f["name"] == "main")
    assert main == {**main, "object": "calls", "self": 0.002, "inclusive": 0.024,
                    "calls": None}
    arc = next(a for a in doc["arcs"] if (a["caller"], a["callee"]) == ("work", "leaf1"))
    assert arc == {**arc, "self": 0.005, "children": 0, "calls": None}
    assert doc["cycles"][0]["members"] == [{"name": "ping", "object": "calls"},
                                           {"name": "pong", "object": "calls"}]
    sq = doc["stack_quality"]
    assert sq["share"] == pytest.approx(22 / 24)
    assert {o["object"]: o["share"] for o in sq["objects"]} == {
        "calls": pytest.approx(22 / 23), "[unknown]": 0}


def test_overview_json(tmp_path, calls_pie):
    q = _two_processes(tmp_path, calls_pie)
    doc = json.loads(run(str(q.path), "--format", "json", "--overview", "--per-cpu")[1])
    rows = {r["file"]: r["amount"] for r in doc["sets"]}
    assert rows["calls-pid10-cpu0.info#1"] == pytest.approx(0.002)
    assert len(rows) == 4
    doc = json.loads(run(str(q.path), "--format", "json", "--overview")[1])
    rows = {(r["command"], r["pid"], r["cpu"]): r["amount"] for r in doc["sets"]}
    assert rows == {("calls", "10", "0,1"): pytest.approx(0.005),  # one row per process
                    ("calls", "11", "0"): pytest.approx(0.004),
                    ("other", "12", "0"): pytest.approx(0.005)}


def test_compressed_data_files_read_the_same(tmp_path, calls_pie):
    plain, _o, name = calls_dir(tmp_path / "a", calls_pie)
    packed, _o, name2 = calls_dir(tmp_path / "b", calls_pie, compress=True)
    assert (packed.path / name2.replace(".info", ".stack")).read_bytes()[:2] == b"\x1f\x8b"
    assert run(plain.info_path(name))[1] == run(packed.info_path(name2))[1]


def test_a_set_that_says_it_has_no_samples_needs_no_data_files(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    q.load(calls_pie)
    name = q.task("calls", 1, 0, write_hist=False, exe=EXE, extra_info={"samples": 0})
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "")
    assert "(no samples)" in out


def test_units_other_than_seconds(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, event="CPU_CYCLES", unit="cycles", factor=1.0,
                  granularity=1e6, stacks=[(3_000_000, [o.at("leaf1"), o.ret("main")])])
    code, out, err = run(q.info_path(name), "--flat")
    assert code == 0
    assert "Flat profile of CPU_CYCLES in" in out
    assert "Each histogram sample counts as 1.00M cycles" in out
    assert " 3.00M " in out


def test_sets_of_different_units_are_not_merged(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    a = q.task("calls", 1, 0, stacks=[(1, [o.at("main")])])
    b = q.task("calls", 1, 1, unit="cycles", factor=1.0, stacks=[(1, [o.at("main")])])
    code, _out, err = run(q.info_path(a), q.info_path(b))
    assert code == 1 and "different units" in err


def test_usage_errors_exit_2(capsys):
    assert run("--format", "xml")[0] == 2
    assert run("--no-kernel", "--kernel-only")[0] == 2
    assert run("--min-percent", "200", "x")[0] == 2
    assert run("--by", "statement")[0] == 2


def test_console_script_entry_point(tmp_path, calls_pie):
    from tests.conftest import q_view
    q, _o, name = calls_dir(tmp_path, calls_pie)
    proc = q_view(q.info_path(name), "--flat")
    assert proc.returncode == 0 and "leaf1" in proc.stdout


def test_warm_symbol_cache_gives_the_same_answer(tmp_path, calls_pie, monkeypatch):
    from scenarios import KALLSYMS
    cache = tmp_path / "cache"
    monkeypatch.setenv("Q_CACHE_DIR", str(cache))
    q, o, name = calls_dir(tmp_path, calls_pie)
    q.add_kallsyms(KALLSYMS)
    name = q.task("calls", 1234, 0, version=1, exe=EXE,
                  stacks=[(MS, [0xFFFFFFFFC0001010, o.ret("main")]), (MS, [o.at("leaf1")])])
    cold = run(q.info_path(name))
    entries = sorted(p.name for p in cache.iterdir())
    assert sorted(e.rsplit("-", 1)[1] for e in entries) == ["elf.sym", "kallsyms.sym", "roots.sym"]
    assert run(q.info_path(name)) == cold
    for entry in cache.iterdir():  # corrupt entries are ignored and rewritten
        entry.write_bytes(entry.read_bytes()[:-7] + b"garbage")
    assert run(q.info_path(name)) == cold
    assert run(q.info_path(name), "--no-cache") == cold
    assert "ext4_file_read_iter" in cold[1]


def test_pid_selects_aggregate_sets_by_their_pids(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.task("sh", None, 1, pids=[300, 301], stacks=[(2 * MS, [o.at("work")])])
    q.task("sh", 302, 1, stacks=[(3 * MS, [o.at("leaf1")])])
    assert _selfs(run(str(q.path), "--pid", "301", "--format", "json")[1]) == {"work": 2}
    assert _selfs(run(str(q.path), "--comm", "sh", "--format", "json")[1]) == {
        "work": 2, "leaf1": 3}


def test_dot_output_is_valid_graphviz(tmp_path, calls_pie):
    import shutil
    import subprocess
    if shutil.which("dot") is None:
        pytest.skip("graphviz is not installed")
    q, _o, name = calls_dir(tmp_path, calls_pie)
    dot = run(q.info_path(name), "--format", "dot")[1]
    proc = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "leaf1" in proc.stdout


def test_bare_names_are_looked_for_in_the_q_directory(tmp_path, calls_pie, monkeypatch):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    monkeypatch.chdir(tmp_path)
    expected = run(q.info_path(name), "--flat")
    assert run(name.split("#")[0], "--flat") == expected  # ./.q by default
    monkeypatch.chdir("/")
    assert run("-d", str(q.path), name, "--flat") == expected


def test_lost_samples_are_reported(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])],
                  extra_info={"lost_samples": 17})
    assert "Lost samples: 17\n" in run(q.info_path(name), "--flat")[1]
    assert json.loads(run(q.info_path(name), "--format", "json")[1])["lost_samples"] == 17


def test_first_user_frame_under_kernel_frames_is_an_exact_pc(tmp_path, calls_pie):
    """A page fault on the first byte of leaf2: the user pc under the kernel's
    frames is where the fault happened, not a return address, so it is not
    looked up at address-1 (which lies in the function before leaf2)."""
    q = QBuilder(tmp_path / ".q")
    q.add_kallsyms("ffffffff81000000 T _stext\nffffffff81001000 T asm_exc_page_fault\n"
                   "ffffffff81002000 T _etext\n")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[
        (MS, [0xFFFFFFFF81001010, o.at("leaf2", 0), o.ret("work"), o.ret("main")]),
        (MS, [o.at("leaf2", 0), o.ret("work"), o.ret("main")])])  # a user-mode sample
    code, out, err = run(q.info_path(name), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    inclusive = {f["name"]: round(f["inclusive"] * 1000, 6) for f in doc["functions"]}
    assert inclusive["leaf2"] == 2 and inclusive["asm_exc_page_fault"] == 1
    arcs = {(a["caller"], a["callee"]) for a in doc["arcs"]}
    assert ("leaf2", "asm_exc_page_fault") in arcs and ("work", "leaf2") in arcs


def test_a_format_is_one_entry_in_the_renderer_table(tmp_path, calls_pie, monkeypatch, capsys):
    """--format offers, lists and dispatches to what render.FORMATS holds."""
    from qtools.viewer import render
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(2 * MS, [o.at("leaf1"), o.ret("main")])])

    def count(graph, out, options):
        out.write(f"{len(graph.functions)} functions, min {options.min_percent}\n")
    monkeypatch.setitem(render.FORMATS, "count",
                        render.Format("count", "how many functions", count))
    assert run(q.info_path(name), "--format", "count", "--min-percent", "5") == \
        (0, "2 functions, min 5.0\n", "")
    assert run("--help")[0] == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "{" + ",".join(render.FORMATS) + "}" in help_text
    assert help_text.index("{text,json,collapsed,dot,") < help_text.index(",count}")
    assert "count: how many functions" in help_text
