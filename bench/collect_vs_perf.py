#!/usr/bin/env python3
"""q-syscollect against `perf record -a -g` on the same busy workload.

Both tools sample the same event at the same rate on every CPU while one
p-fan per CPU keeps the machine busy. For each tool: CPU seconds it used
(itself and its children), samples, lost samples, and output bytes per
minute. Then the highest rate at which q-syscollect lost no samples.

    .venv/bin/python bench/collect_vs_perf.py [--seconds 10] [--rate 997]

Run as root (system-wide sampling). Prints a Markdown table for README.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_measured(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    before = child_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return child_cpu() - before, proc


def q_syscollect(out: Path, seconds: float, rate: int, event: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cpu, proc = run_measured([sys.executable, "-m", "qtools.daemon.cli", "-v", "-d", str(out),
                              "-t", str(seconds), "-c", str(rate), "-e", event])
    if proc.returncode:
        raise SystemExit(f"q-syscollect failed: {proc.stderr}")
    counts = re.findall(r"collected (\d+) samples \((\d+) lost\)", proc.stderr)
    data = sum(p.stat().st_size for p in out.iterdir() if not p.name.startswith("."))
    copies = sum(p.stat().st_size for p in out.iterdir() if p.name.startswith("."))
    return {"cpu": cpu, "samples": sum(int(s) for s, _ in counts),
            "lost": sum(int(lost) for _, lost in counts), "bytes": data, "copies": copies}


def perf_record(out: Path, seconds: float, rate: int, event: str) -> dict:
    data = out / "perf.data"
    out.mkdir(parents=True, exist_ok=True)
    cpu, proc = run_measured(["perf", "record", "-a", "-g", "-e", event, "-F", str(rate),
                              "-o", str(data), "--", "sleep", str(seconds)])
    if proc.returncode:
        raise SystemExit(f"perf record failed: {proc.stderr}")
    stats = subprocess.run(["perf", "report", "-i", str(data), "--stats"], capture_output=True,
                           text=True).stdout
    samples = re.search(r"SAMPLE events:\s+(\d+)", stats)
    lost = re.search(r"LOST events:\s+(\d+)", stats)
    lost_samples = re.search(r"LOST_SAMPLES events:\s+(\d+)", stats)
    return {"cpu": cpu, "samples": int(samples[1]) if samples else 0,
            "lost": (int(lost[1]) if lost else 0) + (int(lost_samples[1]) if lost_samples else 0),
            "bytes": data.stat().st_size, "copies": 0}


def highest_lossless_rate(work: Path, event: str, seconds: float) -> tuple[int, int | None]:
    best, first_lossy = 0, None
    limit = int(Path("/proc/sys/kernel/perf_event_max_sample_rate").read_text())
    for rate in (997, 1999, 4999, 9973, 19997, 49999, 99991):
        if rate > limit:
            break
        r = q_syscollect(work / f"rate{rate}", seconds, rate, event)
        if r["lost"]:
            first_lossy = rate
            break
        best = rate
    return best, first_lossy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=997)
    ap.add_argument("--event", default="cpu-clock")
    ap.add_argument("--skip-rates", action="store_true", help="skip the lossless-rate search")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed (Debian: linux-perf)")
    work = Path(tempfile.mkdtemp(prefix="qtools-bench-"))
    pfan = work / "p-fan"
    subprocess.run(["cc", "-O2", "-fno-inline", "-o", str(pfan),
                    str(ROOT / "tests/workloads/p-fan.c"), "-lm"], check=True)
    ncpu = len(os.sched_getaffinity(0))
    loads = [subprocess.Popen([str(pfan)]) for _ in range(ncpu)]
    try:
        q = q_syscollect(work / "q", args.seconds, args.rate, args.event)
        # The start-up cost (imports, /proc scan, kallsyms copy), from a short run:
        q_short = q_syscollect(work / "q-short", 1.0, args.rate, args.event)
        p = perf_record(work / "perf", args.seconds, args.rate, args.event)
        rates = None if args.skip_rates else highest_lossless_rate(work, args.event, 3.0)
    finally:
        for load in loads:
            load.kill()
            load.wait()
    per_minute = 60.0 / args.seconds
    steady = (q["cpu"] - q_short["cpu"]) / (args.seconds - 1.0)
    print(f"\n{args.seconds:g} s, {args.event} at {args.rate} Hz on {ncpu} busy CPUs "
          f"(one p-fan each), same run:\n")
    print("| | CPU seconds | samples | lost | output per minute |")
    print("|---|---|---|---|---|")
    for name, r in (("q-syscollect", q), ("perf record -a -g", p)):
        print(f"| {name} | {r['cpu']:.2f} | {r['samples']} | {r['lost']} | "
              f"{r['bytes'] * per_minute / 1e6:.2f} MB |")
    print(f"\nq-syscollect / perf record CPU: {q['cpu'] / p['cpu']:.2f}x; "
          f"q-syscollect steady state {100 * steady / ncpu:.2f}% of a core per CPU "
          f"(start-up {q_short['cpu']:.2f} s); object copies {q['copies'] / 1e6:.1f} MB "
          "(once per content, mostly hard links)")
    if rates:
        best, lossy = rates
        print(f"highest rate without lost samples (3 s runs): {best} Hz"
              + (f" (first loss at {lossy} Hz)" if lossy else " (no loss up to the kernel's limit)"))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
