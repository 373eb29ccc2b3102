#!/usr/bin/env python3
"""q-syscollect --off-cpu against `perf record -e sched:sched_switch
--call-graph dwarf` on a context-switch-heavy load.

The load is a pipe ping-pong (tests/workloads/offcpu.c pingpong): two
threads pass a byte back and forth as fast as they can, each pass two
switches. Each tool records the whole machine while the load runs for
SECS seconds (one after the other, never both at once). For each tool:
the load's round trips (what the recording cost it), the recorder's CPU
seconds (itself and its children, from wait4; for perf, `perf report`
added as the viewing step), lost records, and bytes written (for
q-syscollect without the object copies, which perf does not make: its
build-id cache is not counted either).

    sudo .venv/bin/python bench/offcpu_vs_perf.py [--seconds 5] [--min-us 1000]

Prints a Markdown table for README.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"


def _children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def _trips(out: str) -> int:
    m = re.search(r"trips (\d+)", out)
    return int(m[1]) if m else 0


def load(exe: Path, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([str(exe), "pingpong", str(seconds)], stdout=subprocess.PIPE,
                            text=True)


def run_q(exe: Path, work: Path, seconds: float, min_us: int) -> dict[str, object]:
    q = work / "q"
    before = _children_cpu()
    rec = subprocess.Popen([str(BIN / "q-syscollect"), "--off-cpu", "--off-cpu-min",
                            str(min_us), "-d", str(q), "-t", str(seconds + 2)],
                           stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    w = load(exe, seconds)
    trips = _trips(w.communicate()[0])
    err = rec.communicate()[1]
    cpu = _children_cpu() - before
    lost = re.search(r"\((\d+) lost\)", err)
    data = sum(p.stat().st_size for p in q.iterdir() if not p.name.startswith("."))
    threads = sum(p.stat().st_size for p in q.iterdir() if ".threads#" in p.name)
    before = _children_cpu()
    subprocess.run([str(BIN / "q-view"), "-d", str(q), "--metric", "off-cpu", "--flat"],
                   capture_output=True, check=True)
    view = _children_cpu() - before
    return {"trips": trips, "cpu": cpu, "view": view, "lost": int(lost[1]) if lost else -1,
            "bytes": data, "threads": threads}


def run_perf(exe: Path, work: Path, seconds: float) -> dict[str, object]:
    data = work / "perf.data"
    before = _children_cpu()
    rec = subprocess.Popen(["perf", "record", "-q", "-a", "-e", "sched:sched_switch",
                            "--call-graph", "dwarf", "-o", str(data), "--", "sleep",
                            str(seconds + 2)], stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    w = load(exe, seconds)
    trips = _trips(w.communicate()[0])
    err = rec.communicate()[1]
    cpu = _children_cpu() - before
    lost = sum(int(n) for n in re.findall(r"Lost (\d+)", err))
    before = _children_cpu()
    rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--stats"],
                         capture_output=True, text=True)
    subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children"],
                   capture_output=True)
    view = _children_cpu() - before
    m = re.search(r"LOST events:\s+(\d+)", rep.stdout)
    lost = max(lost, int(m[1]) if m else 0)
    return {"trips": trips, "cpu": cpu, "view": view, "lost": lost,
            "bytes": data.stat().st_size, "threads": 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--min-us", type=int, default=1000)
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed")
    work = Path(tempfile.mkdtemp(prefix="offcpu-bench-"))
    exe = work / "offcpu"
    subprocess.run(["cc", "-O2", "-fno-inline", "-o", str(exe),
                    str(ROOT / "tests/workloads/offcpu.c"), "-lpthread"], check=True)
    alone = _trips(load(exe, args.seconds).communicate()[0])
    rows = [("nothing recording", {"trips": alone, "cpu": 0.0, "view": 0.0, "lost": 0,
                                   "bytes": 0, "threads": 0}),
            (f"q-syscollect --off-cpu (--off-cpu-min {args.min_us})",
             run_q(exe, work, args.seconds, args.min_us)),
            ("perf record -e sched:sched_switch --call-graph dwarf", run_perf(exe, work,
                                                                               args.seconds))]
    print(f"{args.seconds:g} s of pipe ping-pong, {os.cpu_count()} CPUs\n")
    print("| recorder | round trips/s | recorder CPU s | view CPU s | lost records | "
          "bytes (of which .threads) |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['trips'] / args.seconds:,.0f} | {r['cpu']:.1f} | "
              f"{r['view']:.1f} | {r['lost']:,} | {r['bytes']:,} ({r['threads']:,}) |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
