"""The overview's CPU table: each CPU's time by the kernel's counters,
busy, steal, iowait and idle adding up to 100%; unknown shown as unknown."""

from __future__ import annotations

import json
import time

import pytest

from qsynth import MS, QBuilder
from scenarios import run

HOUR = 3600.0
HEAD = " cpu    busy   steal  iowait    idle      MHz     lost"


def _kernel(q: QBuilder, cpu: int, stats: dict, version: int = 0, samples: int = 10,
            cmdline: tuple[str, ...] = ("q-syscollect",), idle_weight: int | None = None,
            times: dict | None = None) -> None:
    extra = {"q:idle-weight": idle_weight} if idle_weight is not None else {}
    if not samples:
        extra["q:purpose"] = "cpu-stats"
    q.task("kernel", None, cpu, version=version, comm="kernel", objects=[],
           hist={0xFFFFFFFF81000000: samples * MS} if samples else {},
           extra_info={**(times or {}), "syscollect_cmdline": list(cmdline),
                       "samples": samples, "extra": extra, "cpu_stats": {**stats, "q:frequency-mhz": 2400.0}})


def _cpu_lines(out: str) -> dict[int, list[str]]:
    lines = out.split(HEAD + "\n")[1].split("\n\n")[0].splitlines()
    return {int(line.split()[0]): line.split() for line in lines}


def _percent(cell: str) -> float:
    return float(cell.rstrip("%"))


def test_busy_steal_iowait_and_idle_add_up_over_slices(tmp_path):
    q = QBuilder(tmp_path / ".q")
    now = time.time()
    q.task("app", 7, 0, hist={0x1000: MS})
    # CPU 0: a one-hour slice and a three-hour one, weighted by their lengths
    _kernel(q, 0, {"q:busy": 0.9, "q:steal": 0.1, "q:iowait": 0.05, "q:seconds": 3600.0},
            times={"start_time": now - 4 * HOUR, "end_time": now - 3 * HOUR})
    _kernel(q, 0, {"q:busy": 0.1, "q:steal": 0.0, "q:iowait": 0.3, "q:seconds": 10800.0},
            version=1, times={"start_time": now - 3 * HOUR, "end_time": now})
    # CPU 1: written before steal and iowait were kept
    _kernel(q, 1, {"q:busy": 0.25, "q:seconds": 3600.0})
    window = ("--since", "5h ago")
    code, out, err = run(str(q.path), *window)
    assert (code, err) == (0, ""), err
    cpus = _cpu_lines(out)
    busy = (0.9 * 1 + 0.1 * 3) / 4
    assert cpus[0][:5] == ["0", f"{100 * (busy - 0.025):.1f}%", "2.5%", "23.8%",
                           f"{100 * (1 - busy - 0.2375):.1f}%"]
    assert cpus[1][:5] == ["1", "25.0%", "-", "-", "75.0%"]  # idle holds iowait there
    for cells in cpus.values():
        assert sum(_percent(c) for c in cells[1:5] if c != "-") == pytest.approx(100, abs=0.2)
    assert "adding up to 100%" in out
    doc = json.loads(run(str(q.path), *window, "--overview", "--format", "json")[1])
    for c in doc["cpus"]:
        assert sum(c[k] or 0 for k in ("busy", "steal", "iowait", "idle")) == \
            pytest.approx(1, abs=1e-5)
    assert doc["cpus"][1]["steal"] is None and doc["cpus"][1]["iowait"] is None


def test_idle_not_sampled_is_unknown_not_zero(tmp_path):
    """With -u the idle task is never sampled: no idle row of 0 s, and
    the CPU's sampled idle is unknown; the counters still tell idle."""
    q = QBuilder(tmp_path / ".q")
    q.task("app", 7, 0, hist={0x1000: 5 * MS})
    _kernel(q, 0, {"q:busy": 0.132, "q:seconds": 3.0}, samples=0,
            cmdline=("q-syscollect", "-u", "-t", "3"))
    code, out, _err = run(str(q.path))
    assert code == 0
    assert not [line for line in out.splitlines() if line.startswith("idle ")], out
    assert _cpu_lines(out)[0][:5] == ["0", "13.2%", "-", "-", "86.8%"]
    doc = json.loads(run(str(q.path), "--overview", "--format", "json")[1])
    assert doc["cpus"][0]["sampled_idle"] is None
    # a run that samples the idle task and saw none of it (a CPU busy all
    # along) says so: 0 is known there
    q = QBuilder(tmp_path / "busy")
    q.task("app", 7, 0, hist={0x1000: 5 * MS})
    _kernel(q, 0, {"q:busy": 1.0, "q:seconds": 3.0}, samples=0, idle_weight=0)
    doc = json.loads(run(str(q.path), "--overview", "--format", "json")[1])
    assert doc["cpus"][0]["sampled_idle"] == 0.0


def test_counters_never_read_show_as_unknown(tmp_path):
    """A set without q:task-stats (its counters were never read again after
    its first sample) shows "-", and its JSON row has no such key."""
    q = QBuilder(tmp_path / ".q")
    q.task("brief", None, 0, hist={0x1000: 490 * MS}, pids=[300, 301])
    q.task("long", 9, 0, hist={0x1000: 10 * MS},
           extra_info={"task_stats": {"q:user-seconds": 0.0, "q:system-seconds": 0.01}})
    out = run(str(q.path))[1]
    brief = next(line for line in out.splitlines() if line.startswith("brief"))
    long_ = next(line for line in out.splitlines() if line.startswith("long"))
    assert brief.split()[6:8] == ["-", "-"] and long_.split()[5:7] == ["0.00", "10.0m"]
    doc = json.loads(run(str(q.path), "--overview", "--format", "json")[1])
    stats = {r["command"]: r["stats"] for r in doc["sets"]}
    assert stats["brief"] == {} and stats["long"]["user-seconds"] == 0.0
