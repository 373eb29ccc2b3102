"""Units and columns: the legend, count events, --by object without cycles."""

from __future__ import annotations

import golden
from qsynth import MS, QBuilder
from scenarios import UNKNOWN, run


def test_a_count_event_is_headed_by_its_unit_and_counts_events(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    stacks = [(30, [o.at("leaf1"), o.ret("work"), o.ret("main")]),
              (1500, [o.at("leaf2"), o.ret("main")])]
    name = q.task("calls", 4, 0, stacks=stacks, event="sched:sched_switch", unit="events",
                  factor=1.0, granularity=1.0, exe="/opt/demo/calls")
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "")
    golden.check("events.txt", out)
    lines = out.splitlines()
    assert lines[3] == "counts in events; k = 1e3, M = 1e6, G = 1e9, m = 1e-3"
    assert lines[4].startswith("% events    self") and "% time" not in out
    assert "   98.04   1.50k   1.50k" in out  # leaf2: 1500 of 1530 events
    assert "%event" in out  # the call graph's share column


def test_by_object_marks_no_cycles(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    # calls -> [unknown] -> calls: the objects call each other both ways
    stacks = [(4 * MS, [o.at("leaf1"), UNKNOWN, o.ret("main")]),
              (2 * MS, [o.at("main")])]
    name = q.task("calls", 5, 0, stacks=stacks, exe="/opt/demo/calls")
    _c, by_function, _e = run(q.info_path(name), "--graph")
    assert "<cycle" not in by_function
    code, out, err = run(q.info_path(name), "--by", "object")
    assert (code, err) == (0, "")
    assert "<cycle" not in out
    assert "[1]    100.0    6.00m      0.00            -  calls [1]" in out


def test_folded_stacks_of_sets_counted_at_different_rates(tmp_path, calls_pie):
    """2 ms on each of two sets, one counted in cycles at 2 GHz (the
    collector's conversion to seconds), one by cpu-clock in nanoseconds:
    each set's counts are converted with its own factor, so both show their
    2 ms in nanoseconds, though the set counted in cycles comes first."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    stack = [o.at("leaf1"), o.ret("main")]
    q.task("busy", 2, 1, stacks=[(4_000_000, stack)], event="cycles", factor=1 / 2e9,
           granularity=1e6 / 2e9)
    q.task("clock", 1, 0, stacks=[(2 * MS, stack)])
    code, out, err = run(str(q.path), "--format", "collapsed")
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"busy;main;leaf1 {2 * MS}", f"clock;main;leaf1 {2 * MS}"]


def test_folded_stacks_of_sets_in_different_units_say_so(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    stack = [o.at("leaf1"), o.ret("main")]
    q.task("clock", 1, 0, stacks=[(2 * MS, stack)])
    q.task("faults", 2, 1, stacks=[(7, stack)], event="page-faults", unit="events",
           factor=1.0, granularity=1.0)
    code, out, err = run(str(q.path), "--format", "collapsed")
    assert code == 0
    assert err.splitlines() == ["q-view: warning: the merged sets are measured in different "
                                "units (events, seconds); each set's stacks weigh its own "
                                "event counts"]
    assert out.splitlines() == [f"clock;main;leaf1 {2 * MS}", "faults;main;leaf1 7"]
    # a profile cannot add them up: still an error
    code, _out, err = run(str(q.path), "--flat")
    assert code == 1 and "different units" in err
