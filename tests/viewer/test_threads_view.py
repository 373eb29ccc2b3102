"""q-view on `.threads` files (docs/q-format.md 4.9, 5.8): --metric,
--tid, --by thread, several --metric names; and the CPU profile unchanged by them."""

from __future__ import annotations

import copy
import json

from qsynth import MS, QBuilder
from scenarios import run, threads_setup as _setup, with_threads

from qtools.qformat import dump_info, read_info


def _replaced(threads, **changes):
    """A copy of a q:threads form with ``changes``."""
    new = copy.copy(threads)
    for name, value in changes.items():
        setattr(new, name, value)
    return new


def _by_thread(out: str) -> dict[str, float]:
    got: dict[str, float] = {}
    for line in out.splitlines():
        stack, _, count = line.rpartition(" ")
        thread = stack.split(";")[1]
        got[thread] = got.get(thread, 0.0) + int(count) / 1e9
    return got


def test_each_metric_per_thread(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    want = {"cpu": {"calls [tid 40]": 0.03, "io worker [tid 41]": 0.01},
            "off-cpu": {"calls [tid 40]": 0.6, "io worker [tid 41]": 0.307},
            "cpu-wait": {"io worker [tid 41]": 0.05},
            "wall": {"calls [tid 40]": 0.63, "io worker [tid 41]": 0.367}}
    for event, expected in want.items():
        code, out, err = run(q.info_path(name), "--metric", event, "--by", "thread",
                             "--format", "collapsed")
        assert (code, err) == (0, ""), (event, err)
        got = _by_thread(out)
        assert got.keys() == expected.keys(), (event, got)
        for k, v in expected.items():
            assert abs(got[k] - v) < 1e-9, (event, k, got[k])


def test_tid_and_json_event(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--metric", "off-cpu", "--tid", "41",
                         "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["event"] == "off-cpu" and data["unit"] == "seconds"
    assert abs(data["total"] - 0.307) < 1e-9
    assert any(f["name"] == "[stacks not kept]" for f in data["functions"])


def test_the_cpu_profile_is_the_same_with_and_without_threads(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    with_threads = run(q.info_path(name), "--flat")
    plain = QBuilder(tmp_path / "plain")
    o = plain.load(calls_pie)
    other = plain.task("calls", 40, 0, stacks=[
        (30 * MS, [o.at("leaf1"), o.ret("work"), o.ret("main")]),
        (10 * MS, [o.at("leaf2"), o.ret("main")])])
    without = run(plain.info_path(other), "--flat")
    assert with_threads[0] == without[0] == 0
    body = [line for line in with_threads[1].splitlines() if "%" in line or "  " in line]
    assert body[2:] == [line for line in without[1].splitlines()
                        if "%" in line or "  " in line][2:]


def test_metrics_side_by_side(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--metric", "wall,cpu,off-cpu", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [m["event"] for m in data["metrics"]] == ["wall", "cpu", "off-cpu"]
    main = next(f for f in data["functions"] if f["name"] == "main")
    assert abs(main["wall"]["inclusive"] - 0.99) < 1e-9  # all but the 7 ms without a stack
    assert abs(main["cpu"]["inclusive"] - 0.04) < 1e-9
    code, out, err = run(q.info_path(name), "--metric", "cpu,bogus")
    assert code == 2 and out == ""  # argparse's usage and "not a metric: 'bogus'" on stderr


def test_a_bad_threads_line_names_file_and_line(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    tfile = q.path / name.replace(".info#", ".threads#")
    tfile.write_bytes(tfile.read_bytes() + b"S 41 12 0xzz\n")
    code, out, err = run(q.info_path(name), "--metric", "off-cpu")
    assert code == 1 and f"{tfile.name}:" in err and "bad address" in err


def test_no_kernel_keeps_off_cpu_time_with_the_user_code(tmp_path, calls_pie):
    """Off-CPU stacks all start in the kernel: --no-kernel takes the kernel
    frames away and leaves the time with the user frames (here there are
    none to take: the total is the same)."""
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--metric", "off-cpu", "--no-kernel",
                         "--format", "json")
    assert code == 0, err
    assert abs(json.loads(out)["total"] - 0.907) < 1e-9


def _graph_entries(out: str, metrics: int) -> dict[str, list[list[str]]]:
    """The call graph of several --metric names with -g: each entry's name -> its lines (callers,
    the entry, callees), each as its cells and then its name."""
    body = out.split("[total]\n", 1)[1]
    entries: dict[str, list[list[str]]] = {}
    for block in body.split("-" * 47 + "\n"):
        lines = [line.split() for line in block.splitlines()
                 if line and "<spontaneous>" not in line]
        if not lines:
            continue
        parsed = [t[:1 + 2 * metrics] + [" ".join(t[1 + 2 * metrics:])] if t[0].startswith("[")
                  and t[0].endswith("]") and t[0][1:-1].isdigit()
                  else t[:2 * metrics] + [" ".join(t[2 * metrics:])] for t in lines]
        head = next((p for p in parsed if len(p) == 2 + 2 * metrics), None)
        if head is None:  # the note on the entries --min-percent left out
            continue
        entries[head[-1].rsplit(" [", 1)[0]] = parsed
    return entries


def test_metrics_call_graph_text(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--metric", "cpu,off-cpu,wall", "-g")
    assert (code, err) == (0, "")
    assert "Functions by" not in out  # the graph alone, as --graph alone shows it
    entries = _graph_entries(out, 3)
    main = entries["main"]
    # the entry: each metric's self and inclusive; then the callees, heaviest first
    assert main[0] == ["[1]", "0.00", "40.0m", "0.00", "0.900", "0.00", "0.990", "main [1]"]
    assert main[1][:-1] == ["0.00", "30.0m", "0.00", "0.300", "0.00", "0.330"]
    assert main[1][-1].startswith("work [")
    assert main[2][:-1] == ["10.0m", "10.0m", "0.600", "0.600", "0.660", "0.660"]
    assert main[2][-1].startswith("leaf2 [")
    leaf1 = entries["leaf1"]  # its caller above it, with what it spent for that caller
    assert leaf1[0][:-1] == ["30.0m", "30.0m", "0.300", "0.300", "0.330", "0.330"]
    assert leaf1[0][-1].startswith("work [")
    # time with no stack: no CPU time at all, so "-" there, not 0
    assert entries["[stacks not kept]"][0][1:7] == ["-", "-", "7.00m", "7.00m", "7.00m", "7.00m"]
    code, flat, _ = run(q.info_path(name), "--metric", "cpu,off-cpu,wall")
    assert code == 0 and "Functions by" in flat and "Call graph" not in flat
    code, both, _ = run(q.info_path(name), "--metric", "cpu,off-cpu,wall", "--flat", "--graph")
    assert code == 0 and both == flat + "\n" + out


def test_metrics_call_graph_json(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--metric", "wall,cpu-wait", "--graph",
                         "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["metrics"][1] == {"event": "cpu-wait", "unit": "seconds", "total": 0.05}
    arcs = {(a["caller"], a["callee"]): a for a in data["arcs"]}
    assert set(arcs) == {("main", "work"), ("main", "leaf2"), ("work", "leaf1")}
    assert arcs[("main", "leaf2")]["wall"] == {"self": 0.66, "inclusive": 0.66}
    assert arcs[("main", "leaf2")]["cpu-wait"] == {"self": 0.05, "inclusive": 0.05}
    assert arcs[("main", "work")]["wall"] == {"self": 0.0, "inclusive": 0.33}
    assert "cpu-wait" not in arcs[("main", "work")]  # no wait for a CPU under work: no key
    code, out, err = run(q.info_path(name), "--metric", "wall,cpu-wait", "--format", "json")
    assert code == 0 and "arcs" not in json.loads(out)  # without --graph: as before


def test_metrics_call_graph_of_a_set_without_threads(tmp_path, calls_pie):
    """A set collected without --off-cpu has CPU time only: its off-CPU
    columns are "-" everywhere, never 0."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 40, 0, stacks=[(30 * MS, [o.at("leaf1"), o.ret("main")])])
    code, out, err = run(q.info_path(name), "--metric", "cpu,off-cpu", "-g")
    assert code == 0, err
    main = _graph_entries(out, 2)["main"]
    assert main[0][:5] == ["[2]", "0.00", "30.0m", "-", "-"]
    assert main[1] == ["30.0m", "30.0m", "-", "-", "leaf1 [1]"]
    assert next(line for line in out.splitlines() if line.endswith("[total]")).split() \
        == ["30.0m", "-", "[total]"]
    code, out, err = run(q.info_path(name), "--metric", "cpu,off-cpu", "--format", "json")
    assert code == 0
    assert json.loads(out)["metrics"][1] == {"event": "off-cpu", "unit": "seconds",
                                             "total": None}


def test_metrics_call_graph_min_percent(tmp_path, calls_pie):
    """Under --min-percent (of the first metric) the entries below it go, and
    the calls to them are summed on one line per entry, each metric apart."""
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--metric", "cpu,off-cpu", "-g",
                         "--min-percent", "50")
    assert code == 0, err
    entries = _graph_entries(out, 2)
    assert set(entries) == {"main", "leaf1", "work"}  # cpu inclusive 40 and 30 of 40 ms
    main = entries["main"]
    assert main[-1][:4] == ["10.0m", "10.0m", "0.600", "0.600"]  # the call of leaf2
    assert main[-1][-1] == "(other) 1 callee below 50%"
    assert out.rstrip().endswith("(2 functions below 50% of cpu inclusive each)")


def test_overview_json_off_cpu_seconds(tmp_path, calls_pie):
    """The overview's JSON carries each process's off-CPU and wait-for-CPU
    seconds in its stats, as the text's off-cpu and cpuwait columns; a set
    collected without --off-cpu leaves them out (unknown, not 0)."""
    q, name = _setup(tmp_path, calls_pie)
    o = q.objects[0]
    q.task("calls", 40, 1, stacks=[(5 * MS, [o.at("leaf1"), o.ret("main")])])
    second = q.task("calls", 40, 2, stacks=[(5 * MS, [o.at("leaf1"), o.ret("main")])])
    with_threads(q, second, {40: "calls"}, {("S", 40, ()): 100 * MS})  # says 0.9 and 0.05
    q.task("plain", 50, 0, stacks=[(5 * MS, [o.at("leaf2"), o.ret("main")])])
    cpu_only = q.task("bythread", 60, 0, stacks=[(5 * MS, [o.at("leaf2"), o.ret("main")])])
    with_threads(q, cpu_only, {60: "bythread"}, {("cpu", 60, ()): 5 * MS})
    info = read_info(q.path / cpu_only)  # .threads of the CPU samples only: no --off-cpu
    info.threads = _replaced(info.threads, off_cpu=None, off_cpu_seconds=None,
                                       cpu_wait_seconds=None)
    (q.path / cpu_only).write_text(dump_info(info))
    for extra in ((), ("--per-cpu",), ("--group", "unit")):
        code, out, err = run(str(q.path), "--overview", "--format", "json", *extra)
        assert code == 0, err
        rows = {(r["command"], r["cpu"]): r["stats"] for r in json.loads(out)["sets"]}
        if extra == ("--per-cpu",):
            assert rows[("calls", "0")] == {"off-cpu-seconds": 0.9, "cpu-wait-seconds": 0.05}
            assert "off-cpu-seconds" not in rows[("calls", "1")]
            assert rows[("calls", "2")]["off-cpu-seconds"] == 0.9
        elif extra:
            assert rows[("-", "0,1,2")] == {"off-cpu-seconds": 1.8, "cpu-wait-seconds": 0.1}
            continue  # one unit: every process
        else:  # each wait is counted in the set of the CPU it began on: they add up
            assert rows[("calls", "0,1,2")] == {"off-cpu-seconds": 1.8, "cpu-wait-seconds": 0.1}
        assert "off-cpu-seconds" not in rows[("plain", "0")]
        assert "off-cpu-seconds" not in rows[("bythread", "0")]
        assert "cpu-wait-seconds" not in rows[("bythread", "0")]


def test_diff_of_off_cpu_time(tmp_path, calls_pie):
    """--diff --metric off-cpu compares off-CPU time per function, in seconds
    with --absolute; --tid and --by thread apply to both sides."""
    base, base_name = _setup(tmp_path / "base", calls_pie)
    q = QBuilder(tmp_path / "new" / ".q")
    o = q.load(calls_pie)
    sleep = (o.at("leaf2"), o.ret("main"))
    work = (o.at("leaf1"), o.ret("work"), o.ret("main"))
    name = q.task("calls", 40, 0, stacks=[(30 * MS, list(work))])
    with_threads(q, name, {40: "calls", 41: "io worker"}, {
        ("cpu", 40, work): 30 * MS, ("S", 40, sleep): 900 * MS, ("D", 41, work): 100 * MS})
    code, out, err = run("--diff", str(base.path), str(q.path), "--metric", "off-cpu",
                         "--absolute", "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["unit"] == "seconds" and data["base"]["event"] == data["new"]["event"] == "off-cpu"
    rows = {f["name"]: f for f in data["functions"]}
    assert abs(rows["leaf2"]["self_change"] - 0.3) < 1e-9  # 0.6 s -> 0.9 s
    assert abs(rows["leaf1"]["self_change"] + 0.2) < 1e-9  # 0.3 s -> 0.1 s
    assert rows["[stacks not kept]"]["status"] == "gone"
    code, out, err = run("--diff", str(base.path), str(q.path), "--metric", "off-cpu",
                         "--tid", "41", "--by", "thread", "--absolute", "--format", "json")
    assert (code, err) == (0, "")
    rows = {f["name"]: f for f in json.loads(out)["functions"]}
    assert "calls [tid 40]" not in rows
    thread = rows["io worker [tid 41]"]
    assert abs(thread["base_inclusive"] - 0.307) < 1e-9
    assert abs(thread["new_inclusive"] - 0.1) < 1e-9
    code, out, err = run("--diff", str(base.path), str(q.path), "--metric", "off-cpu")
    assert code == 0 and "0.907 seconds of off-cpu" in out and "1.00 seconds of off-cpu" in out


def test_diff_and_one_metric_reports_refuse_several_metrics(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run("--diff", str(q.path), str(q.path), "--metric", "cpu,off-cpu")
    assert (code, out) == (2, "")
    assert err == "q-view: --diff compares one metric: give --metric one name\n"
    for option in ("--stacks", "--stack-quality"):
        code, out, err = run(str(q.path), "--metric", "cpu,off-cpu", "--format", "json", option)
        assert (code, out) == (2, "") and err.count("\n") == 1 and option in err


def test_a_metric_of_sets_without_off_cpu_data_says_so(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.task("calls", 40, 0, stacks=[(30 * MS, [o.at("leaf1"), o.ret("main")])])
    code, out, err = run(str(q.path), "--metric", "off-cpu", "--flat")
    assert code == 0 and "(no samples)" in out
    assert err == (f"q-view: warning: {q.path}: no off-CPU data in the selected sets "
                   "(collected without q-syscollect --off-cpu): off-cpu is empty\n")
    code, out, err = run(str(q.path), "--flat")  # the CPU profile: nothing to say
    assert (code, err) == (0, "")


def _leave_out_cpu_of(q: QBuilder, name: str, tid: int) -> None:
    """Rewrite the set's `.threads` as q-syscollect does (q:cpu-rest): the
    `cpu` lines of ``tid`` left out, to be read back from the `.stack`."""
    from qtools.qformat import QDir, read_stacks, read_threads, rest_thread, thread_lines
    from qtools.qformat.threads import ThreadName

    info = read_info(q.info_path(name))
    names, weights = {}, {}
    for rec in read_threads(q.path / info.threads.file):
        if isinstance(rec, ThreadName):
            names[rec.tid] = rec.name
        else:
            weights[(rec.kind, rec.tid, rec.frames)] = rec.weight
    stacks = {s.frames: s.weight for s in read_stacks(q.path / info.call_stacks.file)}
    assert rest_thread(stacks, 0, weights) == tid  # as the collector would choose
    with QDir.open(q.path) as qd:
        qd.atomic_write(info.threads.file, thread_lines(names, weights, cpu_rest=tid))
        info.threads = _replaced(info.threads, cpu_rest=tid)
        qd.atomic_write(name, dump_info(info).encode())


def test_a_thread_read_back_from_the_stack_shows_the_same(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    asks = [(ev, "--by", "thread", "--format", "collapsed") for ev in
            ("--metric=cpu", "--metric=wall")]
    asks += [("--tid", "40", "--format", "json"), ("--tid", "41", "--flat"),
             ("--by", "thread", "--graph"), ("--metric", "cpu,off-cpu,wall")]
    exports = [("--format", fmt, "-o", str(tmp_path / f"out.{fmt}")) for fmt in ("pprof",)]
    before = [run(q.info_path(name), *ask) for ask in asks]
    exported = []
    for ask in exports:
        assert run(q.info_path(name), *ask)[0] == 0
        exported.append((tmp_path / ask[-1]).read_bytes())
    threads = (q.path / read_info(q.info_path(name)).threads.file).read_bytes()
    _leave_out_cpu_of(q, name, 40)
    after_file = (q.path / read_info(q.info_path(name)).threads.file).read_bytes()
    assert b"cpu 40 " in threads and b"cpu 40 " not in after_file
    for ask, want in zip(asks, before):
        assert want[0] == 0, (ask, want[2])
        assert run(q.info_path(name), *ask) == want, ask
    for ask, want_bytes in zip(exports, exported):
        assert run(q.info_path(name), *ask)[0] == 0
        assert (tmp_path / ask[-1]).read_bytes() == want_bytes, ask


def test_cpu_rest_lines_that_do_not_add_up_name_the_file(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    info = read_info(q.info_path(name))
    info.threads = _replaced(info.threads, cpu_rest=41)  # 41's lines are there
    (q.path / name).write_text(dump_info(info))
    code, out, err = run(q.info_path(name), "--by", "thread")
    assert code != 0 and info.threads.file in err and "q:cpu-rest" in err
    assert "Traceback" not in err


def test_the_old_spellings_of_metric_still_work_with_a_warning(tmp_path, calls_pie):
    """--event NAME and --metrics LIST are --metric until the release
    CHANGELOG.md names: the same report, and one line saying so."""
    q, name = _setup(tmp_path, calls_pie)
    for old, new in ((["--event", "off-cpu"], ["--metric", "off-cpu"]),
                     (["--metrics", "cpu,off-cpu"], ["--metric", "cpu,off-cpu"])):
        code, out, err = run(q.info_path(name), *old)
        want_code, want_out, want_err = run(q.info_path(name), *new)
        assert (code, out) == (want_code, want_out) and want_err == ""
        assert err == (f"q-view: warning: {old[0]} is deprecated and goes in 0.2.0: "
                       f"use --metric {old[1]}\n")
