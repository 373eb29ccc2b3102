"""--min-percent, --focus, --ignore, --hide: what a filtered report shows."""

from __future__ import annotations

import json
import re

import golden
import pytest
from scenarios import calls_dir, run

ROW = re.compile(r"^ *(\d+\.\d\d) +(\S+) +(\S+) .*  (\S.*)$")


def flat_rows(out: str) -> list[tuple[float, str]]:
    """(share, name) of each flat-profile row, the summary row included."""
    rows = []
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("% time"))
    for line in lines[start + 1:]:
        m = ROW.match(line)
        if not m:
            break
        rows.append((float(m[1]), m[4]))
    return rows


@pytest.mark.parametrize("percent", ["1", "4.5", "5", "10", "20", "40", "90"])
def test_min_percent_never_drops_a_row_larger_than_a_kept_one(tmp_path, calls_pie, percent):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    _c, full, _e = run(q.info_path(name), "--flat")
    code, out, err = run(q.info_path(name), "--flat", "--min-percent", percent)
    assert (code, err) == (0, "")
    every = dict((n, share) for share, n in flat_rows(full))
    rows = flat_rows(out)
    kept = [(share, n) for share, n in rows if not n.startswith("...")]
    summary = [(share, n) for share, n in rows if n.startswith("...")]
    dropped = [share for n, share in every.items() if n not in dict((n, s) for s, n in kept)]
    assert all(share >= float(percent) for share, _n in kept)
    if dropped:
        assert min(share for share, _n in kept or [(100.0, "")]) >= max(dropped)
        # one row sums what was left out, so the column still adds to 100%
        (share, text), = summary
        assert text == f"... {len(dropped)} more below {float(percent):g}% self each"
        assert share == pytest.approx(sum(dropped), abs=0.02)
    else:
        assert not summary
    assert sum(s for s, _n in rows) == pytest.approx(100, abs=0.05)


def test_min_percent_in_the_call_graph_sums_the_rest_in_other_lines(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--graph", "--min-percent", "25")
    assert (code, err) == (0, "")
    golden.check("calls-min25-graph.txt", out)
    # main's entry: callees under 25% inclusive are summed in one (other) line
    main = out[out.index("[1] "):].split("-----")[0]
    assert re.search(r"\(other\) \d+ callees below 25%", main)
    assert "more below 25% inclusive each" in out


def test_focus_ignore_hide_keep_shares_of_the_whole(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    path = q.info_path(name)

    def doc(*args: str) -> dict:
        code, out, err = run(path, "--format", "json", *args)
        assert (code, err) == (0, "")
        return json.loads(out)

    whole = doc()
    assert whole["total"] == pytest.approx(0.024) and whole["selection_total"] == whole["total"]
    focus = doc("--focus", "^work$")
    names = {f["name"] for f in focus["functions"]}
    # stacks through work only: work called leaf1 (5 ms, via helper) and leaf2 (3 ms)
    assert names == {"work", "leaf1", "leaf2", "helper", "main", "_start"}
    assert focus["total"] == pytest.approx(0.008)
    assert focus["selection_total"] == pytest.approx(0.024)
    ignore = doc("--ignore", "^work$")
    assert ignore["total"] == pytest.approx(0.016) and "work" not in {
        f["name"] for f in ignore["functions"]}
    hide = doc("--hide", "^(work|helper)$")
    fns = {f["name"]: f for f in hide["functions"]}
    assert "work" not in fns and "helper" not in fns
    assert hide["total"] == pytest.approx(0.024)  # no stack is lost, only frames
    assert {(a["caller"], a["callee"]) for a in hide["arcs"]} >= {("main", "leaf1"),
                                                                ("main", "leaf2")}
    code, out, err = run(path, "--flat", "--focus", "^work$")
    assert (code, err) == (0, "")
    assert ("Percentages are of the whole selection (24.0m seconds); --focus ^work$ keeps "
            "8.00m (33.3%)") in out
    leaf1 = next(line for line in out.splitlines() if line.endswith("  leaf1"))
    assert leaf1.split()[0] == "20.83"  # 5 ms of the whole 24 ms, not of the 8 ms kept


def test_bad_regular_expression_is_a_usage_error(tmp_path, calls_pie, capsys):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    code, out, _err = run(q.info_path(name), "--focus", "(")
    assert code == 2 and out == ""
    assert "argument --focus: not a regular expression: '('" in capsys.readouterr().err


def test_json_stacks_rebuild_the_profile(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--format", "json", "--stacks",
                         "--min-percent", "30")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["format"] == 1
    fns = doc["functions"]
    # stacks refer to every function, so --min-percent leaves none out here
    assert doc["functions_left_out"] == {"count": 0, "self": 0.0}
    self_of = [0.0] * len(fns)
    incl_of = [0.0] * len(fns)
    for st in doc["stacks"]:
        self_of[st["frames"][-1]] += st["weight"]
        for i in set(st["frames"]):
            incl_of[i] += st["weight"]
    assert sum(st["weight"] for st in doc["stacks"]) == pytest.approx(doc["total"])
    for i, f in enumerate(fns):
        assert self_of[i] == pytest.approx(f["self"], abs=1e-12), f["name"]
        assert incl_of[i] == pytest.approx(f["inclusive"], abs=1e-12), f["name"]
    # the collapsed lines, rebuilt from the JSON alone
    names = [f["name"] for f in fns]
    assert {";".join(names[i] for i in st["frames"]) for st in doc["stacks"]} >= {
        "_start;main;work;leaf2", "_start;main;helper;work;leaf1", "main;0x10000<[unknown]>"}
    # without --stacks, --min-percent lists what the flat profile shows
    doc = json.loads(run(q.info_path(name), "--format", "json", "--min-percent", "30")[1])
    assert [f["name"] for f in doc["functions"]] == ["leaf1", "leaf2"]
    assert doc["functions_left_out"]["count"] == 10  # five of them have no self time
    assert doc["functions_left_out"]["self"] == pytest.approx(0.006)
    assert "stacks" not in doc
