"""Every filter with every format, on every kind of input (a set's `.info`,
a program's sets as PROG.info, a directory): each output shows the same
functions with the same self times as the JSON report of the same input
and options (the terminal's report, exact), or the combination is refused
with one line and status 2 where it means nothing (REFUSED). A directory
with a report option is the whole machine's report with it, never the
overview.

Names are compared as each format writes them, mapped where formats differ
by design: pprof and OpenTelemetry name an inlined function by its own
name (the location's lines say it was inlined), and a thread's weight
without a stack, which q-view shows under the thread's frame, is a
sample of "[stacks not kept]" under the thread's labels there.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest

from qsynth import MS, QBuilder
from scenarios import KALLSYMS, run
from qtools.viewer.model.numfmt import si

KERNEL_PC = 0xFFFFFFFF81004040  # in vfs_read
PERF_MAP = ("7f0000001000 b py::outer:/app.py\n"
            "7f0000001010 b py::f4:/app.py\n")
OUTER, F4 = 0x7F0000001006, 0x7F0000001016

FILTERS: dict[str, list[str]] = {
    "none": [],
    "focus": ["--focus", "work"],
    "ignore": ["--ignore", "^ping$"],
    "hide": ["--hide", "^(rec|main)$"],
    "focus and hide": ["--focus", "leaf", "--hide", "work"],
    "min-percent": ["--min-percent", "12"],
    "no-kernel": ["--no-kernel"],
    "kernel-only": ["--kernel-only"],
    "python": ["--python"],
    "tid": ["--tid", "41"],
    "metric off-cpu": ["--metric", "off-cpu"],
    "metric wall": ["--metric", "wall"],
    "off-cpu without kernel": ["--metric", "off-cpu", "--no-kernel"],
    "by object": ["--by", "object"],
    "by address": ["--by", "address"],
    "by line": ["--by", "line"],
    "by thread": ["--by", "thread"],
    "inline": ["--inline"],
}
FORMATS = ("text", "json", "collapsed", "dot", "pprof", "otlp")
# (filter, format) refused, and the option the one line names
REFUSED = {("min-percent", "collapsed"): "--min-percent",
           ("min-percent", "pprof"): "--min-percent",
           ("min-percent", "otlp"): "--min-percent"}
THREAD = re.compile(r".* \[tid \d+\]$")
UNKEPT = "[stacks not kept]"


INPUTS = ("file", "program", "directory")


@pytest.fixture(scope="module")
def machine(tmp_path_factory, calls_pie) -> dict[str, str]:
    """Two processes: a C program with kernel frames under it and two threads
    (`.threads`: CPU and off-CPU stacks), and a Python one (a perf map)."""
    tmp = tmp_path_factory.mktemp("matrix")
    q = QBuilder(tmp / ".q")
    o = q.load(calls_pie, base=0x55D4C0000000)
    q.add_kallsyms(KALLSYMS)
    start = o.ret("_start")
    work = [o.at("leaf1"), o.ret("work"), o.ret("helper"), o.ret("main"), start]
    rec = [o.at("leaf1"), o.ret("rec"), o.ret("rec"), o.ret("main"), start]
    ping = [o.at("leaf2"), o.ret("ping"), o.ret("pong"), o.ret("ping"), o.ret("main"), start]
    syscall = [KERNEL_PC, o.at("leaf2"), o.ret("work"), o.ret("main"), start]
    c = q.task("calls", 40, 0, stacks=[(30 * MS, work), (20 * MS, rec), (25 * MS, ping),
                                       (15 * MS, syscall)])
    q.threads(c, {40: "calls", 41: "io worker"}, {
        ("cpu", 40, tuple(work)): 30 * MS, ("cpu", 40, tuple(rec)): 20 * MS,
        ("cpu", 41, tuple(ping)): 25 * MS, ("cpu", 41, tuple(syscall)): 15 * MS,
        ("S", 40, tuple(ping)): 200 * MS, ("D", 41, tuple(syscall)): 90 * MS,
        ("S", 41, ()): 7 * MS, ("W", 41, tuple(work)): 40 * MS})
    perf_map = tmp / "perf-77.map"
    perf_map.write_text(PERF_MAP)
    copy = q.copy(perf_map, "perf-77.map")
    q.task("python3.12", 77, 1, perf_maps=[copy], stacks=[
        (12 * MS, [o.at("leaf1"), F4, o.ret("work"), OUTER, o.ret("main"), start]),
        (8 * MS, [KERNEL_PC, o.at("leaf2"), F4, OUTER, start]),
        (5 * MS, [o.at("main"), start])])
    return {"file": q.info_path(c), "program": str(q.path / "calls.info"),
            "directory": str(q.path)}


def _leaf_name(name: str, fmt: str) -> str:
    """A JSON function's name as ``fmt`` writes it."""
    if fmt in ("pprof", "otlp"):
        return UNKEPT if THREAD.match(name) else name.removesuffix(" (inlined)")
    return name


def _reference(q: str, options: list[str]) -> tuple[dict[str, float], float]:
    """The JSON report's self time per function, and what percentages are of;
    the rows --min-percent sums as the flat profile names them."""
    code, out, err = run(q, "--format", "json", "--no-cache", *options)
    assert code == 0, err
    doc = json.loads(out)
    selfs: dict[str, float] = {}
    for f in doc["functions"]:
        selfs[f["name"]] = selfs.get(f["name"], 0.0) + f["self"]
    if doc["functions_left_out"]["count"]:
        selfs[f"below {doc['min_percent']:g}% self each"] = doc["functions_left_out"]["self"]
    return selfs, doc["selection_total"]


def _text(out: str) -> dict[str, str]:
    """name -> self as the flat profile prints it (three significant digits)."""
    rows: dict[str, str] = {}
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("% time"))
    for line in lines[start + 1:]:
        if not line.strip():
            break
        fields = line.split(None, 6)
        rows[re.sub(r" <cycle \d+>$", "", fields[6])] = fields[1]
    return rows


def _collapsed(out: str, unit: float) -> dict[str, float]:
    selfs: dict[str, float] = {}
    for line in out.splitlines():
        frames, count = line.rsplit(" ", 1)
        leaf = frames.split(";")[-1].removesuffix("_[k]")
        selfs[leaf] = selfs.get(leaf, 0.0) + int(count) * unit
    return selfs


def _dot(out: str) -> dict[str, str]:
    """name -> self share, as the node labels say it."""
    nodes = re.findall(r'label="((?:[^"\\]|\\.)*)"\];', out)
    found = {}
    for label in nodes:
        parts = label.split("\\n")
        if len(parts) >= 4 and parts[3].startswith("("):
            found[parts[0]] = parts[3].strip("()%")
    return found


def _pprof(path: Path) -> dict[str, float]:
    from qtools.viewer.render.pprof import Profile
    p = Profile()
    p.ParseFromString(gzip.decompress(path.read_bytes()))
    names = {f.id: p.string_table[f.name] for f in p.function}
    leaf = {loc.id: names[loc.line[0].function_id] for loc in p.location}
    selfs: dict[str, float] = {}
    for s in p.sample:
        selfs[leaf[s.location_id[0]]] = selfs.get(leaf[s.location_id[0]], 0.0) \
            + s.value[-1] * 1e-9
    return selfs


def _otlp(path: Path) -> dict[str, float]:
    from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb
    data = pb.ProfilesData()
    data.ParseFromString(path.read_bytes())
    d = data.dictionary
    st = d.string_table
    selfs: dict[str, float] = {}
    for resource in data.resource_profiles:
        profile = resource.scope_profiles[0].profiles[0]  # the metric's; the count's last
        for s in profile.samples:
            loc = d.location_table[d.stack_table[s.stack_index].location_indices[0]]
            name = st[d.function_table[loc.lines[0].function_index].name_strindex]
            selfs[name] = selfs.get(name, 0.0) + s.values[0] * 1e-9
    return selfs


def _close(got: dict[str, float], want: dict[str, float], slack: float) -> None:
    want = {k: v for k, v in want.items() if v > 0}
    got = {k: v for k, v in got.items() if v > 0}
    assert set(got) == set(want)
    for name, value in want.items():
        assert math.isclose(got[name], value, rel_tol=1e-9, abs_tol=slack), name


@pytest.mark.parametrize("kind", INPUTS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(FILTERS))
def test_every_format_shows_what_the_report_shows(machine, tmp_path, name, fmt, kind):
    options = FILTERS[name]
    out_file = tmp_path / f"out.{fmt}"
    argv = [machine[kind], "--format", fmt, "--no-cache", *options]
    if fmt == "text" and not options:
        argv.append("--flat")  # a directory and nothing asked: its overview (test below)
    if fmt in ("pprof", "otlp"):
        argv += ["-o", str(out_file)]
    code, out, err = run(*argv)
    if (name, fmt) in REFUSED:
        assert (code, out) == (2, "") and REFUSED[name, fmt] in err and err.count("\n") == 1
        return
    assert code == 0, err
    want, base = _reference(machine[kind], options)
    assert want, "the filter left nothing to compare"
    if fmt == "json":
        return  # the reference itself
    if fmt == "text":
        shown = {k: si(v) for k, v in want.items() if v > 0}
        got = {k: v for k, v in _text(out).items() if k in shown or float(si_value(v)) > 0}
        assert got == shown
    elif fmt == "collapsed":
        # a stack is at least one count (one nanosecond): the slack of rounding
        _close(_collapsed(out, 1e-9), {_leaf_name(k, fmt): v for k, v in want.items()},
               1e-6)
    elif fmt == "dot":
        # dot's --min-percent is its own cut-off of nodes by inclusive time
        want, base = _reference(machine[kind], [o for o in options if o not in
                                                ("--min-percent", "12")])
        nodes = _dot(out)
        shown = {k: f"{100 * v / base:.2f}" for k, v in want.items() if k in nodes}
        assert {k: nodes[k] for k in shown} == shown
        assert nodes.keys() <= want.keys()
    else:
        got = _pprof(out_file) if fmt == "pprof" else _otlp(out_file)
        mapped: dict[str, float] = {}
        for k, v in want.items():
            mapped[_leaf_name(k, fmt)] = mapped.get(_leaf_name(k, fmt), 0.0) + v
        _close(got, mapped, 1e-9)


def si_value(text: str) -> float:
    """A number as ``si`` prints it, back."""
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3, "u": 1e-6, "n": 1e-9}
    return float(text[:-1]) * scale[text[-1]] if text[-1] in scale else float(text)


def test_pprof_of_a_focus_is_the_focused_report(machine, tmp_path):
    """The issue's own words: pprof of --focus X shows the functions and
    absolute times q-view --focus X shows."""
    out = tmp_path / "focus.pb.gz"
    code, _out, err = run(machine["directory"], "--format", "pprof", "-o", str(out),
                          "--focus", "work", "--no-cache")
    assert code == 0, err
    want, _base = _reference(machine["directory"], ["--focus", "work"])
    got = _pprof(out)
    assert "vfs_read" in got and "rec" not in got  # a syscall under work; rec never is
    _close(got, want, 1e-9)


OVERVIEW_ONLY = {"--per-cpu": ["--per-cpu"], "--group": ["--group", "unit"]}


@pytest.mark.parametrize("option", list(OVERVIEW_ONLY))
def test_what_shapes_the_overview_is_refused_with_a_report(machine, option):
    """Every option applies or is refused: the overview's own options with a
    report option, a FILE.info, or --overview with a report option."""
    code, out, err = run(machine["directory"], *OVERVIEW_ONLY[option])
    assert code == 0 and "Task sets in" in out
    for with_report in (["--flat"], ["--python"], ["--by", "object"]):
        code, out, err = run(machine["directory"], *OVERVIEW_ONLY[option], *with_report)
        assert (code, out) == (2, "") and option in err and err.count("\n") == 1, err
    code, out, err = run(machine["file"], *OVERVIEW_ONLY[option])
    assert (code, out) == (2, "") and option in err
    code, out, err = run(machine["directory"], "--overview", "--inline")
    assert (code, out) == (2, "") and "--inline" in err
    code, out, err = run(machine["file"], "--overview")
    assert (code, out) == (2, "") and "--overview" in err


def test_a_directory_alone_is_its_overview(machine):
    code, out, err = run(machine["directory"])
    assert code == 0 and "Task sets in" in out and "Flat profile" not in out
