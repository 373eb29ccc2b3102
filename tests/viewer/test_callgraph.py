"""Exclusive, inclusive and attributed times with hand-computed answers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from qtools.viewer.model.profile import View
from qtools.viewer.profile import processors
from qtools.viewer.profile.group import processed
from qtools.viewer.profile.callgraph import analyze, strongly_connected
from qtools.viewer.model.frames import Frame
from qtools.viewer.model.graph import InconsistentGraph, Samples


def samples_of(stacks, calls=None, kernel=()):
    frames: list[Frame] = []
    ids: dict[str, int] = {}

    def fid(name: str) -> int:
        if name not in ids:
            ids[name] = len(frames)
            frames.append(Frame(name, "[k]" if name in kernel else "p", name in kernel))
        return ids[name]

    agg: dict[tuple[int, ...], float] = {}
    for w, names in stacks:
        key = tuple(fid(n) for n in names)
        agg[key] = agg.get(key, 0.0) + w
    call_map = None
    if calls is not None:
        call_map = {(fid(a), fid(b)): n for (a, b), n in calls.items()}
    return Samples("cpu-clock", "seconds", [1.0], 1.0, 0, [], frames, agg, True, call_map)


def F(name):  # noqa: N802 - reads like the names in the figures
    return Frame(name, "p", False)


def times(profile, name):
    fn = profile.functions[F(name)]
    return fn.self, fn.inclusive


def arc(profile, caller, callee):
    a = profile.arcs[(F(caller), F(callee))]
    return a.self, a.children


def test_attributed_metrics_of_the_analyzer_figure():
    # FIGURE 2-1 of 004_714d12a01dd1b197.txt: C has exclusive 5, inclusive
    # 25; it attributes 10 to E and 10 to F; A attributes 10 to C, B 15.
    p = analyze(samples_of([
        (5, ["E", "C", "A", "main"]), (5, ["C", "A", "main"]),
        (5, ["E", "C", "B", "main"]), (10, ["F", "C", "B", "main"]),
        (7, ["F", "G", "main"]),
    ]))
    p.self_check()
    assert p.total == 32
    assert times(p, "C") == (5, 25)
    assert arc(p, "C", "E") == (10, 0) and arc(p, "C", "F") == (10, 0)
    assert sum(arc(p, "A", "C")) == 10 and sum(arc(p, "B", "C")) == 15
    assert arc(p, "A", "C") == (5, 5) and arc(p, "B", "C") == (0, 15)
    assert times(p, "F") == (17, 17) and arc(p, "G", "F") == (7, 0)
    assert times(p, "main") == (0, 32)
    assert p.functions[F("main")].spontaneous == 32
    assert p.cycles == []


def test_direct_recursion_counts_each_sample_once():
    p = analyze(samples_of([
        (4, ["leaf", "rec", "rec", "rec", "main"]),
        (2, ["rec", "rec", "rec", "main"]),
        (1, ["rec", "main"]),
    ]))
    p.self_check()
    assert times(p, "rec") == (3, 7)  # not 4*3 + 2*3 + 1
    assert times(p, "leaf") == (4, 4)
    assert times(p, "main") == (0, 7)
    assert arc(p, "main", "rec") == (3, 4)
    assert arc(p, "rec", "rec") == (2, 4)
    assert arc(p, "rec", "leaf") == (4, 0)
    assert p.cycles == []  # direct recursion is no cycle


def test_mutual_recursion_is_a_cycle_with_exact_times():
    p = analyze(samples_of([
        (6, ["b", "a", "b", "a", "main"]),
        (3, ["a", "b", "a", "main"]),
        (2, ["leaf", "b", "a", "main"]),
        (1, ["a", "main"]),
    ]))
    p.self_check()
    assert times(p, "a") == (4, 12)
    assert times(p, "b") == (6, 11)
    assert times(p, "leaf") == (2, 2)
    assert arc(p, "main", "a") == (4, 8)
    assert arc(p, "a", "b") == (6, 5)
    assert arc(p, "b", "a") == (3, 6)
    assert arc(p, "b", "leaf") == (2, 0)
    (cycle,) = p.cycles
    assert cycle.number == 1 and cycle.members == [F("a"), F("b")]
    assert (cycle.self, cycle.inclusive) == (10, 12)
    entry = cycle.callers[F("main")]
    assert (entry.self, entry.children) == (10, 2)
    assert p.functions[F("a")].cycle == 1 and p.functions[F("leaf")].cycle is None


def test_two_cycles_are_numbered_by_time():
    p = analyze(samples_of([
        (1, ["x", "y", "x", "main"]),
        (5, ["q", "p", "q", "main"]),
    ]))
    p.self_check()
    assert [sorted(m.name for m in c.members) for c in p.cycles] == [["p", "q"], ["x", "y"]]
    assert [c.number for c in p.cycles] == [1, 2]


def test_call_counts_come_from_edges():
    p = analyze(samples_of([(3, ["f", "main"]), (1, ["main"])],
                           calls={("main", "f"): 100, ("f", "f"): 5, ("main", "g"): 7}))
    p.self_check()
    f = p.functions[F("f")]
    assert (f.calls, f.recursive_calls) == (100, 5)
    assert p.arcs[(F("main"), F("f"))].calls == 100
    g = p.functions[F("g")]  # called, never sampled
    assert (g.self, g.inclusive, g.calls) == (0, 0, 7)
    assert p.functions[F("main")].calls == 0


def test_no_edges_means_no_calls():
    p = analyze(samples_of([(3, ["f", "main"])]))
    assert p.functions[F("f")].calls is None and p.arcs[(F("main"), F("f"))].calls is None


def test_self_check_notices_a_broken_profile():
    p = analyze(samples_of([(3, ["f", "main"])]))
    p.functions[F("f")].self = 5
    with pytest.raises(InconsistentGraph, match="sum of self"):
        p.self_check()


def test_self_check_still_checks_under_python_O():
    """``python -O`` drops asserts; the check must not be one."""
    script = (
        "from qtools.viewer.profile.callgraph import analyze\n"
        "from qtools.viewer.model.frames import Frame\n"
        "from qtools.viewer.model.graph import InconsistentGraph, Samples\n"
        "assert False, 'asserts are on'\n"
        "s = Samples('cpu-clock', 'seconds', [1.0], 1.0, 0, [], [Frame('f', 'p'), Frame('main', 'p')],\n"
        "            {(0, 1): 3.0}, True, None)\n"
        "g = analyze(s)\n"
        "g.functions[Frame('f', 'p')].self = 5\n"
        "try:\n"
        "    g.self_check()\n"
        "except InconsistentGraph as e:\n"
        "    print('caught:', e)\n")
    done = subprocess.run([sys.executable, "-O", "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("caught: sum of self")


def test_tarjan_handles_long_chains_and_nested_cycles():
    nodes = [F(f"n{i}") for i in range(20000)]
    edges = {a: [b] for a, b in zip(nodes, nodes[1:])}
    assert all(len(c) == 1 for c in strongly_connected(nodes, edges))
    edges[nodes[-1]] = [nodes[0]]
    (whole,) = strongly_connected(nodes, edges)
    assert len(whole) == len(nodes)
    a, b, c, d = F("a"), F("b"), F("c"), F("d")
    comps = strongly_connected([a, b, c, d], {a: [b], b: [a, c], c: [d], d: [c]})
    assert sorted(sorted(f.name for f in comp) for comp in comps) == [["a", "b"], ["c", "d"]]


def test_hide_kernel_and_kernel_only():
    s = samples_of([
        (4, ["do_sys", "entry", "read", "main"]),  # in the kernel, called from user space
        (6, ["work", "main"]),
    ], calls={("main", "read"): 2, ("entry", "do_sys"): 2}, kernel=("do_sys", "entry"))
    user = analyze(processed(s, View(kernel="user")))
    user.self_check()
    assert user.total == 6
    assert {f.name for f, fn in user.functions.items() if fn.inclusive} == {"work", "main"}
    assert user.functions[F("read")].calls == 2  # still called, no longer sampled
    assert all(not f.kernel for f in user.functions)
    kern = analyze(processed(s, View(kernel="kernel")))
    kern.self_check()
    assert kern.total == 4 and set(f.name for f in kern.functions) == {"do_sys", "entry"}
    assert kern.functions[Frame("entry", "[k]", True)].inclusive == 4


def test_threshold_judges_by_the_column_a_table_is_sorted_by():
    p = analyze(samples_of([(98, ["big", "main"]), (2, ["small", "main"])]))
    t = processors.threshold(p, 5)
    assert t.total == 100
    # the call graph (by inclusive time) keeps main, which has no self time
    assert not t.shown(F("small")) and t.shown(F("big")) and t.shown(F("main"))
    # the flat profile (by self time) does not
    fns = t.functions
    assert t.shown_flat(fns[F("big")]) and not t.shown_flat(fns[F("main")])
    assert not t.shown_flat(fns[F("small")])


def _two_programs(tmp_path, calls_pie, second: list[str]):
    from qsynth import MS, QBuilder
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, base=0x55D4C0000000)

    def stack(*frames: str) -> list[int]:
        return [o.at(frames[0])] + [o.ret(f) for f in frames[1:]] + [o.ret("_start")]
    # one program calls ping from pong, the other pong from ping: no recursion
    q.task("first", 10, 0, stacks=[(4 * MS, stack("leaf2", "ping", "pong", "main"))])
    q.task("second", 20, 1, stacks=[(3 * MS, stack(*second))])
    return q


def test_calls_both_ways_in_two_programs_are_no_cycle(tmp_path, calls_pie):
    """Cycles are recursion: found in each program's own call graph, not in the
    merge of a whole machine's."""
    import json
    from scenarios import run
    q = _two_programs(tmp_path, calls_pie, ["leaf2", "pong", "ping", "main"])
    code, out, err = run(str(q.path), "--format", "json", "--no-cache")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["cycles"] == []
    assert all(f["cycle"] is None for f in doc["functions"])
    # which program each call came from, where callers come from several
    arcs = {(a["caller"], a["callee"]): a["programs"] for a in doc["arcs"]}
    assert arcs[("pong", "ping")] == ["first"] and arcs[("ping", "pong")] == ["second"]
    assert arcs[("main", "pong")] == ["first"] and arcs[("ping", "leaf2")] == ["first"]
    code, out, err = run(str(q.path), "--graph", "--no-cache")
    assert code == 0 and "<cycle" not in out
    # leaf2's callers are ping (in first) and pong (in second): each line says
    callers = [line for line in out.splitlines() if line.endswith(("(in first)", "(in second)"))]
    assert any("ping" in line and line.endswith("(in first)") for line in callers), out
    assert any("pong" in line and line.endswith("(in second)") for line in callers), out


def test_recursion_within_one_program_is_still_a_cycle(tmp_path, calls_pie):
    import json
    from scenarios import run
    q = _two_programs(tmp_path, calls_pie, ["leaf2", "ping", "pong", "ping", "main"])
    code, out, err = run(str(q.path), "--format", "json", "--no-cache")
    assert code == 0, err
    (cycle,) = json.loads(out)["cycles"]
    assert sorted(m["name"] for m in cycle["members"]) == ["ping", "pong"]
