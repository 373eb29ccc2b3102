#!/usr/bin/env python3
"""The cost of q-syscollect as the systemd service runs it, idle and busy.

Runs q-syscollect with the arguments of `systemd/q-syscollect.service`
(ExecStart, its output directory moved to a temporary one) next to
`perf record -a -g` at the same rate, first on the machine as it is, then
with one p-fan per CPU. For each tool: its CPU use in steady state (the
whole process tree, read from /proc over a window that starts after the
start-up), as a share of one CPU and of the machine, and over the whole run
including start-up.

    sudo .venv/bin/python bench/service_overhead.py [--seconds 60] [--settle 10]

Prints a Markdown table for README.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_vs_perf import ROOT, prepare  # noqa: E402

UNIT = ROOT / "systemd" / "q-syscollect.service"


def service_args(directory: Path) -> list[str]:
    """ExecStart's arguments, writing into ``directory`` instead of /var/lib."""
    line = next(ln for ln in UNIT.read_text().splitlines() if ln.startswith("ExecStart="))
    args = shlex.split(line.removeprefix("ExecStart="))[1:]
    i = args.index("-d")
    args[i + 1] = str(directory)
    return args


def rate_of(args: list[str]) -> str:
    return args[args.index("-c") + 1] if "-c" in args else "997"


def tree_cpu(pid: int) -> float:
    """CPU seconds so far of a process and its living descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def measure(seconds: float, settle: float, work: Path, label: str) -> list[tuple[str, float, float]]:
    """(tool, steady CPU share of one CPU, whole-run CPU share) for both tools."""
    q_args = service_args(work / f"q-{label}")
    q = subprocess.Popen([sys.executable, "-m", "qtools.daemon.cli", *q_args],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    perf = subprocess.Popen(["perf", "record", "-q", "-a", "-g", "-F", rate_of(q_args),
                             "-o", str(work / f"perf-{label}.data")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    time.sleep(settle)
    before = {p.pid: tree_cpu(p.pid) for p in (q, perf)}
    t0 = time.monotonic()
    time.sleep(seconds)
    steady = {p.pid: (tree_cpu(p.pid) - before[p.pid]) / (time.monotonic() - t0)
              for p in (q, perf)}
    rows = []
    for name, proc in (("q-syscollect", q), ("perf record -a -g", perf)):
        proc.send_signal(signal.SIGINT if proc is perf else signal.SIGTERM)
        _pid, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) not in (0, -signal.SIGINT):
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise SystemExit(f"{name} failed: {err}")
        whole = (usage.ru_utime + usage.ru_stime) / (time.monotonic() - started)
        rows.append((name, steady[proc.pid], whole))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="steady-state window")
    ap.add_argument("--settle", type=float, default=10.0, help="start-up left out")
    args = ap.parse_args()
    work, pfan, ncpu = prepare("qtools-servicebench-")
    try:
        print(f"q-syscollect {' '.join(service_args(Path('DIR')))}; {ncpu} CPUs; "
              f"{args.seconds:.0f} s steady window after {args.settle:.0f} s")
        print()
        print("| machine | collector | steady, % of one CPU | steady, % of machine "
              "| whole run, % of one CPU |")
        print("|---|---|---|---|---|")
        for label in ("idle", "busy"):
            loads = []
            if label == "busy":
                total = args.settle + args.seconds + 30
                loads = [subprocess.Popen([str(pfan), str(total)]) for _ in range(ncpu)]
            try:
                for name, steady, whole in measure(args.seconds, args.settle, work, label):
                    print(f"| {label} | {name} | {100 * steady:.2f} | {100 * steady / ncpu:.2f} "
                          f"| {100 * whole:.2f} |", flush=True)
            finally:
                for p in loads:
                    p.kill()
                    p.wait()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
