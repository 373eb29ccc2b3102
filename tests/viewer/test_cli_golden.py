"""q-view end to end on synthetic `.q` directories: golden text outputs.

Goldens hold names and numbers only: addresses chosen by the compiler never
appear (the one unknown address is placed outside every object on purpose).
"""

from __future__ import annotations

import json

import golden
from qsynth import MS, QBuilder
from scenarios import EXE, KALLSYMS, UNKNOWN, calls_dir, run


def test_flat_profile_and_call_graph(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "")
    golden.check("calls.txt", out)
    # what a reader of the golden file checks by eye
    assert out.startswith(f"Command: {EXE} 3\nFlat profile of cpu-clock in "
                          "calls-pid1234-cpu0.hist#0:\nEach histogram sample counts as 1.00m "
                          "seconds\n")
    assert "sin@plt" in out and f"0x{UNKNOWN:x}<[unknown]>" in out
    assert "<cycle 1 as a whole>" in out and "<spontaneous>" in out


def test_flat_and_graph_alone(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    _code, both, _err = run(q.info_path(name))
    _code, flat, _err = run(q.info_path(name), "--flat")
    _code, graph, _err = run(q.info_path(name), "--graph")
    command_line, legend, rest = graph.split("\n", 2)
    assert command_line == f"Command: {EXE} 3" and both == flat + rest
    assert legend == "times in seconds; m = 1e-3, u = 1e-6, n = 1e-9" and legend in flat
    assert "call-graph" not in flat and "Flat profile" not in graph
    _code, flat_quality, _err = run(q.info_path(name), "--flat", "--stack-quality")
    assert flat_quality == flat + both[both.index("\nStack quality"):]
    _code, quality, _err = run(q.info_path(name), "--stack-quality")
    golden.check("calls-quality.txt", quality)


def test_min_percent_and_by_object(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    _code, out, _err = run(q.info_path(name), "--min-percent", "20", "--flat")
    golden.check("calls-min20.txt", out)
    _code, out, _err = run(q.info_path(name), "--by", "object")
    golden.check("calls-by-object.txt", out)


def test_by_address_names_offsets_within_functions(tmp_path, calls_pie):
    q, o, name = calls_dir(tmp_path, calls_pie)
    _code, out, _err = run(q.info_path(name), "--by", "address", "--format", "json")
    names = {f["name"] for f in json.loads(out)["functions"]}
    assert {"leaf1+0x1", "leaf2+0x1", "main+0x1", "sin@plt+0x4"} <= names


def test_collapsed_and_dot(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    code, out, _err = run(q.info_path(name), "--format", "collapsed")
    assert code == 0
    golden.check("calls.collapsed", out)
    for line in out.splitlines():  # flamegraph.pl / speedscope: "a;b;c COUNT"
        stack, count = line.rsplit(" ", 1)
        assert stack and int(count) > 0
    assert f"calls;_start;main;work;leaf2 {3 * MS}" in out.splitlines()
    code, out, _err = run(q.info_path(name), "--format", "dot")
    assert code == 0
    golden.check("calls.dot", out)


def test_hist_only_sets_have_a_flat_profile_and_no_graph(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 9, 1, hist={o.at("leaf1"): 3 * MS, o.at("leaf2", 2): 1 * MS,
                                       o.at("main"): 1 * MS}, exe=EXE)
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "")
    golden.check("hist-only.txt", out)


def test_call_counts_from_edges(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    stacks = [(6 * MS, [o.at("leaf1"), o.ret("work"), o.ret("main")]),
              (2 * MS, [o.at("work"), o.ret("main")]),
              (2 * MS, [o.at("main")])]
    edges = {(o.at("main", 4), o.at("work", 0)): 1000,
             (o.at("work", 3), o.at("leaf1", 0)): 1500,
             (o.at("rec", 3), o.at("rec", 0)): 20,
             (o.at("main", 8), o.at("rec", 0)): 10}
    name = q.task("calls", 5, 0, stacks=stacks, edges=edges, call_factor=2.0, exe=EXE)
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "")
    golden.check("edges.txt", out)
    doc = json.loads(run(q.info_path(name), "--format", "json")[1])
    calls = {f["name"]: f["calls"] for f in doc["functions"]}
    assert calls["work"] == 2000 and calls["leaf1"] == 3000 and calls["rec"] == 20
    rec = next(f for f in doc["functions"] if f["name"] == "rec")
    assert rec["recursive_calls"] == 40 and rec["self"] == 0


def test_demangled_cxx_names(tmp_path, shapes):
    q = QBuilder(tmp_path / ".q")
    o = q.load(shapes)
    area = "_ZNK3geo6Square4areaEi"
    twice = next(n for n in shapes.functions if "twice" in n)
    stacks = [(3 * MS, [o.at(area), o.ret("_Z5totalRKN3geo5ShapeEi"), o.ret("main")]),
              (2 * MS, [o.at(twice), o.ret("_Z5totalRKN3geo5ShapeEi"), o.ret("main")]),
              (1 * MS, [o.at("_Z5totalRKN3geo5ShapeEi"), o.ret("main")])]
    name = q.task("shapes", 3, 0, stacks=stacks, exe="/opt/demo/shapes")
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "")
    golden.check("cxx.txt", out)
    assert "geo::Square::area(int) const" in out and "total(geo::Shape const&, int)" in out


def test_kernel_frames_through_kallsyms(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.add_kallsyms(KALLSYMS)
    k = {"do_syscall_64": 0xFFFFFFFF81001010, "entry": 0xFFFFFFFF81002020,
         "vfs_read": 0xFFFFFFFF81004040, "ext4": 0xFFFFFFFFC0001010}
    stacks = [
        (3 * MS, [k["ext4"], k["vfs_read"] + 1, k["do_syscall_64"] + 1, k["entry"] + 1,
                  o.ret("work"), o.ret("main"), o.ret("_start")]),
        (1 * MS, [k["do_syscall_64"], k["entry"] + 1, o.ret("main"), o.ret("_start")]),
        (4 * MS, [o.at("work"), o.ret("main"), o.ret("_start")]),
    ]
    name = q.task("calls", 7, 0, stacks=stacks, exe=EXE)
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "")
    golden.check("kernel.txt", out)
    _c, user, _e = run(q.info_path(name), "--no-kernel", "--flat")
    golden.check("kernel-no-kernel.txt", user)
    _c, kern, _e = run(q.info_path(name), "--kernel-only")
    golden.check("kernel-only.txt", kern)
    assert "ext4_file_read_iter" in kern and "  main\n" not in kern


def test_restricted_kallsyms_gives_kernel_unknowns(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.add_kallsyms("0000000000000000 T _stext\n0000000000000000 T vfs_read\n")
    stacks = [(3 * MS, [0xFFFFFFFF81004040, 0xFFFFFFFF81001011, o.ret("main")]),
              (1 * MS, [o.at("main")])]
    name = q.task("calls", 7, 0, stacks=stacks, exe=EXE)
    code, out, err = run(q.info_path(name), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    kernel = [f for f in doc["functions"] if f["kernel"]]
    assert [(f["name"], f["object"], f["self"]) for f in kernel] == [
        ("[kernel]", "[kernel.kallsyms]", 0.003)]


def test_stripped_object_through_build_id_debug_file(tmp_path, stripped):
    full, bare, debug = stripped
    root = tmp_path / "dbg"
    target = root / ".build-id" / bare.build_id[:2] / (bare.build_id[2:] + ".debug")
    target.parent.mkdir(parents=True)
    target.write_bytes(debug.read_bytes())
    q = QBuilder(tmp_path / ".q")
    o = q.load(bare, name="calls", path="/nonexistent/calls")
    link = o.link
    stacks = [(2 * MS, [link(full.functions["leaf1"][0] + 1),
                        link(full.functions["work"][0] + 2),
                        link(full.functions["main"][0] + 2)])]
    name = q.task("calls", 2, 0, stacks=stacks, exe=EXE)
    _code, without, _err = run(q.info_path(name), "--flat")
    assert "leaf1" not in without and "<calls>" in without
    code, out, err = run(q.info_path(name), "--debug-root", str(root))
    assert (code, err) == (0, "")
    golden.check("stripped.txt", out)


def test_overview_of_a_directory(tmp_path, calls_pie, monkeypatch):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.task("calls", 10, 0, hist={o.at("main"): 5 * MS}, version=0)
    q.task("calls", 10, 0, hist={o.at("main"): 7 * MS}, version=1)  # latest of its set
    q.task("calls", 11, 1, hist={o.at("leaf1"): 2 * MS})
    q.task("kernel", None, 0, hist={0xFFFFFFFF81001000: 20 * MS}, comm="kernel", objects=[])
    q.task("sh", None, 1, hist={o.at("work"): 1 * MS}, pids=[300, 301, 302])
    monkeypatch.chdir(tmp_path)
    code, out, err = run(".q")
    assert (code, err) == (0, "")
    golden.check("overview.txt", out)
    assert run()[1] == out  # no input: ./.q
    monkeypatch.setenv("Q_DIR", ".q")
    monkeypatch.chdir("/")
    assert run("-d", str(tmp_path / ".q"))[1] == out.replace(".q (", f"{tmp_path}/.q (", 1)
