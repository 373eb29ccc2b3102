"""Call graphs of a plain `cc -O2` program (no frame pointers), unwound with
DWARF CFI by q-syscollect and shown by q-view; cross-checked against
`perf record --call-graph dwarf` + `perf report --children` on the same run."""

from __future__ import annotations

import json
import re
import subprocess

from tests.conftest import q_syscollect
from tests.integration.test_view_e2e import q_view, record_with_perf

CALLERS = {"f06": "main", "f07": "main", "f08": "main", "f09": "main"}


def _pfan_json(q, comm: str) -> dict:
    r = q_view(str(q), "--comm", comm, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_plain_O2_program_gets_its_true_callers(perf, build, tmp_path):
    pfan = build("p-fan")  # cc -O2 -fno-inline: no frame pointers
    assert b".eh_frame" in pfan.read_bytes()
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--", str(pfan), "2")
    assert r.returncode == 0, r.stderr
    data = _pfan_json(q, pfan.name)
    arcs = {(a["caller"], a["callee"]): a for a in data["arcs"]}
    for callee, caller in CALLERS.items():
        assert (caller, callee) in arcs, sorted(arcs)
    # f06..f09 call into libm: the callee is libm's code, whatever it is named here
    for f in ("f06", "f07", "f08", "f09"):
        into_libm = [a for (caller, _c), a in arcs.items()
                     if caller == f and a["callee_object"] == "libm.so.6"]
        assert into_libm and sum(a["self"] + a["children"] for a in into_libm) > 0
    assert ("_start", "__libc_start_main") in arcs or any(
        c == "_start" for c, _ in arcs), "stacks do not reach _start"
    assert data["stack_quality"]["share"] > 0.95
    main = next(f for f in data["functions"] if f["name"] == "main")
    assert main["inclusive"] > 0.95 * data["total"]  # nearly every sample is under main


def _perf_children(path: str) -> dict[str, float]:
    out = subprocess.run(["perf", "report", "-i", path, "--children", "--sort", "sym",
                          "--stdio", "-q", "-g", "none"], capture_output=True, text=True).stdout
    found: dict[str, float] = {}
    for m in re.finditer(r"^\s*([\d.]+)%\s+[\d.]+%\s+\[[.k]\]\s+(\S+)(\s+\(inlined\))?$", out,
                         re.M):
        if not m[3]:  # inlined pseudo-frames have no function of their own here
            found.setdefault(m[2], float(m[1]))
    return found


def test_inclusive_percent_agrees_with_perf_dwarf(perf, build, tmp_path):
    q, data, comm = record_with_perf(build, tmp_path, "--call-graph", "dwarf")
    theirs = _perf_children(str(data))
    ours_json = _pfan_json(q, comm)
    total = ours_json["total"]
    ours: dict[str, float] = {}
    for f in ours_json["functions"]:  # _start is in the program and in ld.so: the larger
        ours[f["name"]] = max(ours.get(f["name"], 0.0), 100 * f["inclusive"] / total)
    compared = [name for name, pct in theirs.items() if pct >= 5.0 and name in ours]
    assert {"main", "f08", "f09", "f06", "f07"} <= set(compared), compared
    for name in compared:
        assert abs(ours[name] - theirs[name]) < 4.0, (name, ours[name], theirs[name])
