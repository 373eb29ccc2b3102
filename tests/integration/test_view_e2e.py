"""q-view on a real collection, cross-checked against perf on the same run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import q_syscollect, q_view


def test_view_of_a_real_collection(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--", str(pfan), "2")
    assert r.returncode == 0, r.stderr
    overview = q_view(str(q))
    assert overview.returncode == 0, overview.stderr
    assert re.search(rf"^{re.escape(pfan.name)}\s+\d+", overview.stdout, re.M)
    flat = q_view(str(q), "--comm", pfan.name, "--flat")
    assert flat.returncode == 0, flat.stderr
    assert flat.stdout.startswith(f"Command: {pfan} 2\n")
    assert "Flat profile of cpu-clock in" in flat.stdout
    names = re.findall(r"^\s*[\d.]+\s+\S+\s+\S+\s+-\s+-\s+-\s+(\S+)$", flat.stdout, re.M)
    assert "main" in names and {"f08", "f09"} <= set(names)
    assert not [n for n in names if n.startswith("0x") and "<" + pfan.name in n]
    data = json.loads(q_view(str(q), "--comm", pfan.name, "--format", "json").stdout)
    assert data["event"] == "cpu-clock" and data["unit"] == "seconds"
    assert abs(sum(f["self"] for f in data["functions"]) - data["total"]) < 1e-6
    assert 1.5 < data["total"] < 2.5  # p-fan ran for 2 s on one CPU at a time


def _perf_self_percent(data: str) -> dict[str, float]:
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "sym",
                          "--stdio", "-q"], capture_output=True, text=True).stdout
    return {m[2]: float(m[1]) for m in re.finditer(r"^\s*([\d.]+)%\s+\[(?:\.|k)\]\s+(\S+)",
                                                   out, re.M)}


def record_with_perf(build, tmp_path, *perf_options: str) -> tuple[Path, Path, str]:
    """One run of p-fan recorded by both tools: perf records p-fan (the
    command q-syscollect waits for) while q-syscollect samples the machine.
    Returns the .q directory, the perf.data file and p-fan's command name."""
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed")
    pfan = build("p-fan")
    q, data = tmp_path / "q", tmp_path / "perf.data"
    r = q_syscollect("-d", str(q), "--", "perf", "record", "-q", "-F", "997", "-e", "cpu-clock",
                     *perf_options, "-o", str(data), "--", str(pfan), "3")
    assert r.returncode == 0, r.stderr
    return q, data, pfan.name


def test_self_percent_agrees_with_perf_report(perf, build, tmp_path):
    q, data, comm = record_with_perf(build, tmp_path)
    theirs = _perf_self_percent(str(data))
    view = q_view(str(q), "--comm", comm, "--format", "json")
    assert view.returncode == 0, view.stderr
    ours_json = json.loads(view.stdout)
    total = ours_json["total"]
    ours: dict[str, float] = {}
    for f in ours_json["functions"]:
        ours[f["name"]] = ours.get(f["name"], 0) + 100 * f["self"] / total
    big = {name for name, pct in theirs.items() if pct >= 2.0}
    assert {"main", "f08"} <= big
    for name in big:
        assert abs(ours.get(name, 0.0) - theirs[name]) < 3.0, (name, ours.get(name), theirs[name])
