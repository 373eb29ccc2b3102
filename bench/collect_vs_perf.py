#!/usr/bin/env python3
"""q-syscollect against `perf record` on the same busy workload, in the same run.

One p-fan per CPU keeps the machine busy while q-syscollect and perf record
sample it at the same time, same event and rate, with stacks the same way
(frame pointers: `perf record -a -g`; DWARF: `--call-graph dwarf`). For each
tool: CPU seconds it used (itself and its children, from wait4), samples,
lost samples, output bytes per minute. Then each viewer reports the p-fan
processes, so "collect + view" can be compared as a whole. Finally the
highest rate at which q-syscollect loses no samples.

    sudo .venv/bin/python bench/collect_vs_perf.py [--seconds 10] [--rate 997]
        [--call-graph dwarf|fp|both] [--skip-rates]

Prints Markdown tables for README.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    cpu: float
    samples: int
    lost: int
    bytes: int
    view_cpu: float = 0.0


def prepare(prefix: str) -> tuple[Path, Path, int]:
    """A work directory, p-fan built in it, and the number of CPUs to load;
    perf must be installed to compare against."""
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed (Debian: linux-perf)")
    work = Path(tempfile.mkdtemp(prefix=prefix))
    return work, build_pfan(work), len(os.sched_getaffinity(0))


def build_pfan(work: Path) -> Path:
    """The example workload, built with plain cc -O2 (no frame pointers)."""
    pfan = work / "p-fan"
    subprocess.run(["cc", "-O2", "-fno-inline", "-o", str(pfan),
                    str(ROOT / "tests/workloads/p-fan.c"), "-lm"], check=True)
    return pfan


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


class Deadline:
    """Kills the processes still running after ``limit`` seconds (None: no
    limit). perf can block for good: its build-id pass (perf record) and its
    symbol lookup (perf report) open every sampled object by path, and a
    FIFO left at such a path, as a test on a shared machine may leave,
    never opens."""

    def __init__(self, procs: list[subprocess.Popen], limit: float | None) -> None:
        self.fired = False
        self._procs = procs
        self._timer = threading.Timer(limit, self._kill) if limit else None
        if self._timer:
            self._timer.daemon = True
            self._timer.start()

    def _kill(self) -> None:
        self.fired = True
        for proc in self._procs:
            if proc.returncode is None:  # not Popen.kill: its poll() could reap it first
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def cancel(self, what: str) -> str:
        """Stop the timer; why ``what`` failed if the deadline passed."""
        if self._timer:
            self._timer.cancel()
        return f"; {what} still running after {self._timer.interval:g} s, killed" \
            if self.fired and self._timer else ""


def run_together(q_cmd: list[str], perf_cmd: list[str], limit: float | None = None
                 ) -> tuple[float, float, str]:
    """Start both, wait for both; CPU seconds of each (with its children)."""
    q = subprocess.Popen(q_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    p = subprocess.Popen(perf_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = Deadline([q, p], limit)
    assert q.stderr is not None
    q_err = q.stderr.read()
    cpu: dict[int, float] = {}
    for proc in (q, p):
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        cpu[proc.pid] = _cpu(usage)
    late = deadline.cancel("a collector")
    if q.returncode or p.returncode:
        raise SystemExit(f"a collector failed: q-syscollect {q.returncode} perf {p.returncode}"
                         f"{late}\n{q_err}")
    return cpu[q.pid], cpu[p.pid], q_err


def cpu_of(cmd: list[str], env: dict[str, str] | None = None, limit: float | None = None
           ) -> float:
    """CPU seconds of a command (with its children); its output is thrown away."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = Deadline([proc], limit)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    late = deadline.cancel(cmd[0])
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed{late}")
    return _cpu(usage)


def perf_stats(data: Path) -> tuple[int, int]:
    stats = subprocess.run(["perf", "report", "-i", str(data), "--stats"], capture_output=True,
                           text=True).stdout
    samples = re.search(r"SAMPLE events:\s+(\d+)", stats)
    lost = sum(int(n) for n in re.findall(r"LOST(?:_SAMPLES)? events:\s+(\d+)", stats))
    return (int(samples[1]) if samples else 0), lost


def compare(work: Path, seconds: float, rate: int, event: str, mode: str) -> tuple[Result, Result]:
    q, data = work / f"q-{mode}", work / f"perf-{mode}.data"
    shutil.rmtree(q, ignore_errors=True)
    q_cmd = [sys.executable, "-m", "qtools.daemon.cli", "-v", "-d", str(q), "-t", str(seconds),
             "-c", str(rate), "-e", event, "--call-graph", mode]
    stacks = ["-g"] if mode == "fp" else ["--call-graph", "dwarf"]
    perf_cmd = ["perf", "record", "-q", "-a", *stacks, "-e", event, "-F", str(rate),
                "-o", str(data), "--", "sleep", str(seconds)]
    q_cpu, perf_cpu, q_err = run_together(q_cmd, perf_cmd)
    counts = re.findall(r"collected (\d+) samples \((\d+) lost\)", q_err)
    q_bytes = sum(p.stat().st_size for p in q.iterdir() if not p.name.startswith("."))
    samples, lost = perf_stats(data)
    ours = Result(q_cpu, sum(int(s) for s, _ in counts), sum(int(x) for _, x in counts),
                  q_bytes)
    theirs = Result(perf_cpu, samples, lost, data.stat().st_size)
    ours.view_cpu = cpu_of([sys.executable, "-m", "qtools.viewer.commands.view", str(q), "--comm", "p-fan",
                            "--no-cache"])
    theirs.view_cpu = cpu_of(["perf", "report", "-i", str(data), "--comm", "p-fan", "--stdio"])
    return ours, theirs


def highest_lossless_rate(work: Path, event: str, seconds: float, mode: str
                          ) -> tuple[int, int | None]:
    best, first_lossy = 0, None
    limit = int(Path("/proc/sys/kernel/perf_event_max_sample_rate").read_text())
    for rate in (997, 1999, 4999, 9973, 19997, 49999, 99991):
        if rate > limit:
            break
        q = work / f"rate{rate}"
        r = subprocess.run([sys.executable, "-m", "qtools.daemon.cli", "-v", "-d", str(q),
                            "-t", str(seconds), "-c", str(rate), "-e", event,
                            "--call-graph", mode], capture_output=True, text=True)
        lost = sum(int(x) for x in re.findall(r"\((\d+) lost\)", r.stderr))
        shutil.rmtree(q, ignore_errors=True)
        if r.returncode or lost:
            first_lossy = rate
            break
        best = rate
    return best, first_lossy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rate", type=int, default=997)
    ap.add_argument("--metric", default="cpu-clock")
    ap.add_argument("--call-graph", choices=("dwarf", "fp", "both"), default="both")
    ap.add_argument("--skip-rates", action="store_true", help="skip the lossless-rate search")
    args = ap.parse_args()
    work, pfan, ncpu = prepare("qtools-bench-")
    loads = [subprocess.Popen([str(pfan)]) for _ in range(ncpu)]
    modes = ("fp", "dwarf") if args.call_graph == "both" else (args.call_graph,)
    results = {}
    rates = {}
    try:
        for mode in modes:
            results[mode] = compare(work, args.seconds, args.rate, args.event, mode)
        if not args.skip_rates:
            for mode in modes:
                rates[mode] = highest_lossless_rate(work, args.event, 3.0, mode)
    finally:
        for load in loads:
            load.kill()
            load.wait()
    per_minute = 60.0 / args.seconds
    print(f"\n{args.seconds:g} s, {args.event} at {args.rate} Hz on {ncpu} busy CPUs (one p-fan "
          "each); both collectors sampling the same run at once; the viewers report p-fan:\n")
    print("| stacks | collector | CPU s | samples | lost | output/min | viewer CPU s | "
          "collect + view |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, (ours, theirs) in results.items():
        perf_name = "perf record -a -g" if mode == "fp" else "perf record --call-graph dwarf"
        for name, r, viewer in (("q-syscollect", ours, "q-view"), (perf_name, theirs,
                                                                   "perf report")):
            print(f"| {mode} | {name} | {r.cpu:.2f} | {r.samples} | {r.lost} | "
                  f"{r.bytes * per_minute / 1e6:.2f} MB | {viewer} {r.view_cpu:.2f} | "
                  f"{r.cpu + r.view_cpu:.2f} |")
    print()
    for mode, (ours, theirs) in results.items():
        print(f"- {mode}: q-syscollect uses {ours.cpu / theirs.cpu:.2f}x perf record's CPU, "
              f"{100 * ours.cpu / args.seconds / ncpu:.2f}% of a core per CPU (start-up included);"
              f" collect + view {(ours.cpu + ours.view_cpu) / (theirs.cpu + theirs.view_cpu):.2f}x")
    for mode, (best, lossy) in rates.items():
        print(f"- {mode}: highest rate without lost samples (3 s runs): {best} Hz"
              + (f" (first loss at {lossy} Hz)" if lossy else " (none lost up to the kernel's "
                 "limit)"))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
