#!/usr/bin/env python3
"""q-view against `perf report` on one task of the same DWARF collection.

One busy workload per CPU (p-fan, or bench/workloads/cost_shallow.c or
cost_deep.c, built with `cc -O2`) is recorded at the same time system-wide
by q-syscollect (its defaults: DWARF, 16 KiB stacks, 997 Hz) and by `perf
record -a -F 997 -e cpu-clock --call-graph dwarf,16384`. Then one task is
viewed, as a user would type it: `q-view .q --comm NAME` with an empty
symbol cache (Q_CACHE_DIR a fresh directory), again with the cache it
filled, and `perf report -i perf.data --stdio --comm NAME` (its defaults
otherwise). CPU seconds are user + system of the viewer and its children
(wait4); output goes to /dev/null. Rounds alternate the viewers, so a
loaded machine weighs on both alike.

    sudo .venv/bin/python bench/view_vs_perf.py [--seconds 10 40]
        [--workload p-fan|cost_shallow|cost_deep] [--rounds 3] [--keep DIR]
    sudo .venv/bin/python bench/view_vs_perf.py --use DIR    # a kept recording

`measure_view(q_dir, perf_data, comm, cache_dir)` is the measuring step
alone, for a benchmark that records by itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = {"p-fan": ROOT / "tests/workloads/p-fan.c",
             "cost_shallow": ROOT / "bench/workloads/cost_shallow.c",
             "cost_deep": ROOT / "bench/workloads/cost_deep.c"}


def _bin(name: str) -> str:
    """An installed command beside this interpreter (the venv's), else PATH's."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


def cpu_of(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """CPU seconds (user + system) of a command and its children; output thrown away."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err.decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime


def measure_view(q_dir: Path, perf_data: Path, comm: str, cache_dir: Path) -> dict[str, float]:
    """CPU seconds of `q-view Q_DIR --comm COMM` with CACHE_DIR emptied first
    (cold), again with what it cached (warm), and of `perf report --stdio
    --comm COMM` on PERF_DATA."""
    shutil.rmtree(cache_dir, ignore_errors=True)
    cache_dir.mkdir(parents=True)
    env = dict(os.environ, Q_CACHE_DIR=str(cache_dir))
    q_view = [_bin("q-view"), str(q_dir), "--comm", comm]
    cold = cpu_of(q_view, env)
    warm = cpu_of(q_view, env)
    perf = cpu_of(["perf", "report", "-i", str(perf_data), "--stdio", "--comm", comm])
    return {"q_view_cold_cpu": cold, "q_view_warm_cpu": warm, "perf_report_cpu": perf}


def build(workload: str, work: Path) -> Path:
    """The workload, built with plain cc -O2 (no frame pointers)."""
    out = work / workload
    subprocess.run(["cc", "-O2", "-o", str(out), str(WORKLOADS[workload]), "-lm"], check=True)
    return out


def record(work: Path, binary: Path, seconds: float) -> tuple[Path, Path]:
    """One run of BINARY per CPU recorded by q-syscollect and perf record at
    once; their outputs (a .q, a perf.data) under WORK."""
    ncpu = len(os.sched_getaffinity(0))
    q, data = work / "q", work / "perf.data"
    perf = subprocess.Popen(["perf", "record", "-q", "-a", "-F", "997", "-e", "cpu-clock",
                             "--call-graph", "dwarf,16384", "-o", str(data)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loads = " ".join(f"{binary} {seconds:g} &" for _ in range(ncpu))
    try:
        subprocess.run([_bin("q-syscollect"), "-q", "-d", str(q), "--", "sh", "-c",
                        f"{loads} wait"], check=True)
    finally:
        perf.send_signal(2)
        perf.wait()
    return q, data


def _loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, nargs="+", default=[10.0, 40.0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="p-fan")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="keep the recordings in DIR/SECONDS")
    ap.add_argument("--use", type=Path, help="measure recordings kept with --keep in DIR")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed (Debian: linux-perf)")
    work = Path(tempfile.mkdtemp(prefix="qtools-viewbench-"))
    comm = args.workload[:15]
    runs: list[tuple[str, Path, Path]] = []
    if args.use:
        for sub in sorted(p for p in args.use.iterdir() if (p / "perf.data").exists()):
            runs.append((sub.name, sub / "q", sub / "perf.data"))
    else:
        binary = build(args.workload, work)
        for seconds in args.seconds:
            where = (args.keep or work) / f"{seconds:g}"
            where.mkdir(parents=True, exist_ok=True)
            runs.append((f"{seconds:g}", *record(where, binary, seconds)))
    print(f"\n{comm}, one per CPU, recorded at once by q-syscollect (defaults) and perf record "
          "--call-graph dwarf,16384 at 997 Hz; one task viewed: q-view .q --comm "
          f"{comm} / perf report --stdio --comm {comm}; CPU seconds of the viewer:\n")
    print("| run s | round | load avg | q-view cold | q-view warm | perf report | cold / perf |")
    print("|---|---|---|---|---|---|---|")
    for name, q, data in runs:
        for n in range(args.rounds):
            load = _loadavg()
            r = measure_view(q, data, comm, work / "cache")
            print(f"| {name} | {n + 1} | {load} | {r['q_view_cold_cpu']:.2f} | "
                  f"{r['q_view_warm_cpu']:.2f} | {r['perf_report_cpu']:.2f} | "
                  f"{r['q_view_cold_cpu'] / r['perf_report_cpu']:.2f} |", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
