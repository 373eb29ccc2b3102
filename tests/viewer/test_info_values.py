"""Any value under any key of an `.info` that the overview and the default
report read: a report, or one line on stderr naming the set; never a
traceback. The values are what an archive's maker can write: wrong types,
integers at and past the 64-bit edges, negative counts, floats from the
smallest to the largest, nan and inf, long strings with control
characters, nested lists and alists.

Each example puts one value under one key of one set of a `.q` holding a
process (with stacks and threads), an aggregate of short-lived processes
and a kernel set with CPU statistics, then runs q-view's ``main`` on the
directory (the overview, text and JSON) and on the set (the default
report), in-process: an exception out of ``main`` is what a user would
see as a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qsynth import MS, QBuilder
from scenarios import run
from tests.conftest import q_view
from qtools.qformat.info import HEX_KEYS
from qtools.qformat.sexp import Symbol, dump_forms, parse_forms

# The keys each form's readers look at (forms.py, and the extra keys the
# viewer reads: overview.py, build.py, space.py, select.py)
INFO_KEYS = ["q:format-version", "q:syscollect-cmdline", "q:cmdline", "q:comm", "q:exe",
             "q:pid", "q:pids", "q:cpu", "q:hostname", "q:kernel-release", "q:arch",
             "q:run-id", "q:run-start", "q:start-time", "q:end-time", "q:samples",
             "q:lost-samples", "q:task-stats", "q:cpu-stats", "q:state", "q:clock-step",
             "q:samples-folded", "q:stacks-folded", "q:purpose", "q:kernel-from", "q:cgroup",
             "q:unit", "q:container", "q:idle-weight", "q:pids-not-listed", "q:hist-moved",
             "q:min-stack-share", "q:other-functions",
             "q:task-stats/q:utime", "q:task-stats/q:voluntary-switches",
             "q:task-stats/q:minor-faults", "q:cpu-stats/q:busy", "q:cpu-stats/q:seconds",
             "q:cpu-stats/q:frequency-mhz"]
KEYS = {
    "q:info": INFO_KEYS,
    "q:histogram": ["q:event-name", "q:x-unit-label", "q:y-unit-label",
                    "q:y-unit-conversion-factor", "q:y-granularity"],
    "q:call-stacks": ["q:unwinder"],
    "q:threads": ["q:off-cpu", "q:time-unit-label", "q:time-conversion-factor",
                  "q:min-stack-ns", "q:switches", "q:switch-records-lost",
                  "q:off-cpu-seconds", "q:cpu-wait-seconds", "q:cpu-rest"],
    "q:object": ["q:name", "q:path", "q:build-id", "q:maps", "q:maps/q:addr", "q:maps/q:size",
                 "q:maps/q:offset"],
}
TARGETS = [(form, key) for form, keys in KEYS.items() for key in keys]

EDGE_INTS = [0, 1, -1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), 2**64 - 1,
             -(2**64 - 1)]
# atoms the writer will not write: each goes in as a placeholder symbol
RAW_ATOMS = ["nan", "-nan", "inf", "-inf", "1e999", "-1e999", "#x1" + "0" * 16,
             "#x" + "f" * 4_000, "9" * 30, "-" + "9" * 30, "9" * 5_000, "0x10", "1.2.3", "#xZZ"]
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.builds(
    lambda c, n: c * n, st.sampled_from(["x", "\x1b[2J", "\n", "é", "\u202e"]),
    st.integers(1, 20_000))
LEAVES = st.one_of(
    st.sampled_from(EDGE_INTS), st.integers(-(2**64) + 1, 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 1e300, 1.7976931348623157e308,
                     -1.7976931348623157e308, 1e18, 1e10]),
    TEXT, st.sampled_from([Symbol("t"), Symbol("nil"), Symbol("closed"), Symbol("open"),
                           Symbol("q:busy")]),
    st.sampled_from(range(len(RAW_ATOMS))).map(lambda i: Symbol(f"qqraw{i}qq")))
VALUES = LEAVES | st.recursive(LEAVES, lambda inner: st.one_of(  # half of them scalars
    st.lists(inner, min_size=0, max_size=4),
    st.dictionaries(st.sampled_from(["q:busy", "q:seconds", "q:utime", "q:addr", "q:size",
                                     "q:x"]), inner, min_size=1, max_size=3)),
    max_leaves=8)


@pytest.fixture(scope="module")
def sets(tmp_path_factory, calls_pie) -> tuple[Path, dict[str, Path]]:
    q = QBuilder(tmp_path_factory.mktemp("values") / ".q")
    o = q.load(calls_pie, base=0x55D4C0000000)
    stacks = [(3 * MS, [o.at("leaf1"), o.ret("work"), o.ret("main")]),
              (2 * MS, [o.at("leaf2"), o.ret("main")])]
    process = q.task("calls", 7, 0, stacks=stacks,
                     extra_info={"start_time": 1.7e9, "end_time": 1.7e9 + 5, "run_id": "ab12",
                                 "task_stats": {"q:utime": 0.5, "q:voluntary-switches": 3},
                                 "extra": {"q:hist-moved": MS, "q:min-stack-share": 0.001}})
    q.threads(process, {7: "calls", 8: "worker"}, {("cpu", 7, tuple(stacks[0][1])): 3 * MS,
                                                   ("cpu", 8, tuple(stacks[1][1])): 2 * MS})
    aggregate = q.task("calls", None, 1, stacks=stacks, pids=[9, 10],
                       extra_info={"extra": {"q:pids-not-listed": 2}})
    kernel = q.task("kernel", None, 0, hist={0xFFFFFFFF81001000: 4 * MS}, objects=[],
                    extra_info={"cpu_stats": {"q:busy": 0.5, "q:seconds": 10.0,
                                              "q:frequency-mhz": 2400.0},
                                "extra": {"q:idle-weight": 4 * MS}})
    return q.path, {n: q.path / n for n in (process, aggregate, kernel)}


def _with_value(text: str, form: str, key: str, value: object) -> str:
    """The `.info` ``text`` with ``value`` under ``key`` of its first ``form``
    (``outer/inner``: inside the alist, or the first map, at ``outer``)."""
    forms = parse_forms(text)
    target = next((f for f in forms if f.tag == form), None)
    if target is None:
        return text
    alist = target.args[0]
    outer, _, inner = key.partition("/")
    if inner:
        holder = alist.get(outer)
        holder = holder[0] if isinstance(holder, list) and holder else holder
        if not isinstance(holder, dict):
            holder = alist[outer] = {}
        holder[inner] = value
    else:
        alist[outer] = value
    return re.sub(r"qqraw(\d+)qq", lambda m: RAW_ATOMS[int(m[1])], dump_forms(forms, HEX_KEYS))


def _check(result: tuple[int, str, str], set_name: str) -> None:
    code, _out, err = result
    lines = err.splitlines()
    assert "Traceback" not in err
    if code == 0:
        assert all(line.startswith("q-view: ") for line in lines), err
    else:
        assert code == 1 and len(lines) == 1, err
        assert lines[0].startswith("q-view: ") and set_name.split(".")[0] in lines[0], err


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(target=st.sampled_from(TARGETS), which=st.sampled_from(["process", "aggregate", "kernel"]),
       value=VALUES)
def test_no_info_value_makes_a_traceback(sets, target, which, value):
    directory, paths = sets
    path = next(p for name, p in paths.items()
                if name.startswith({"process": "calls-pid", "aggregate": "calls-cpu",
                                    "kernel": "kernel"}[which]))
    original = path.read_text()
    try:
        path.write_text(_with_value(original, *target, value))
        _check(run(str(directory)), path.name)
        _check(run(str(directory), "--overview", "--format", "json"), path.name)
        _check(run(str(path)), path.name)
    finally:
        path.write_text(original)


@pytest.mark.parametrize("report", [(), ("FILE",)])
def test_a_pid_of_two_million_hex_digits_is_one_line(tmp_path, report):
    """The installed q-view, on ``(q:pid . #xfff...)`` of 2,000,000 digits:
    one line naming the file and the line, exit status 1."""
    q = QBuilder(tmp_path / ".q")
    name = q.task("calls", 7, 0, hist={0x1000: MS})
    path = q.path / name
    text = path.read_text()
    assert "(q:pid . 7)" in text
    path.write_text(text.replace("(q:pid . 7)", "(q:pid . #x" + "f" * 2_000_000 + ")"))
    proc = q_view(str(path) if report else str(q.path))
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    # the line where the form holding it starts (docs/q-format.md 3.3)
    assert proc.stderr.startswith(f"q-view: {path}:1: integer out of range"), proc.stderr
