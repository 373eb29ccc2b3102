#!/usr/bin/env python3
"""q-syscollect's start-up and its cost on an idle machine, next to perf record.

Two measurements, each taking both tools in the same run (alternated
rounds, or side by side), so that the load of a shared machine weighs on
both alike:

``measure_startup(runs)``: how soon each tool samples, and what its start
costs. A tiny C program (MARKER) prints CLOCK_MONOTONIC as its ``main``
begins; the time from spawning the tool to that moment is the latency to the
first sample, because both tools hold the command until their events are
open, and enable them on its exec:

  - ``q-syscollect -i -- MARKER``: the supervisor forks MARKER held before
    exec, starts a collector per CPU, and releases MARKER only after every
    collector said "ok", which each says after perf_event_open (the events
    are enable_on_exec, inherited), so MARKER's first instruction can be
    sampled;
  - ``perf record --call-graph dwarf,16384 -F 997 -- MARKER``: perf forks
    the workload held before exec the same way (evlist__prepare_workload)
    and starts it after opening its events, enable_on_exec.

The same with the tools system-wide (``q-syscollect -- MARKER``, ``perf
record -a ... -- MARKER``) measures the time until the service's
collectors sample every CPU: again both release the command only once
every CPU's events are open and enabled.

Start-up CPU is user+sys of the tool and its children (``os.wait4``) for a
short system-wide run on an idle machine: ``q-syscollect -t 1`` against
``perf record -a --call-graph dwarf,16384 -F 997 -- sleep 1``; on a busy
machine that includes the cost of the other users' samples, so the -i runs'
CPU (which sample only MARKER) is reported too.

``measure_idle(seconds)``: both tools as the service runs, side by side:
q-syscollect with the systemd unit's ExecStart arguments (97 Hz, DWARF,
hourly slices), ``perf record -a -g -F 97``; after 10 s of start-up, the CPU
of all their processes over the window from ``/proc/PID/task/TID/schedstat``
(its first field, ns on the CPU), as % of one CPU, and their wake-ups
(voluntary context switches) per second, which load does not distort.

    sudo .venv/bin/python bench/startup_idle.py [--runs 3] [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from service_overhead import service_args  # noqa: E402

MARKER_C = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    printf("%ld.%09ld\n", (long)ts.tv_sec, ts.tv_nsec);
    return 0;
}
"""

SETTLE = 10.0
PERF_DWARF = ["--call-graph", "dwarf,16384", "-F", "997"]


def q_command() -> str:
    """The installed q-syscollect beside this Python (a venv's), else on PATH."""
    beside = Path(sys.executable).parent / "q-syscollect"
    found = str(beside) if beside.exists() else shutil.which("q-syscollect")
    if found is None:
        raise SystemExit("q-syscollect is not installed (make install)")
    return found


def build_marker(work: Path) -> Path:
    source = work / "marker.c"
    source.write_text(MARKER_C)
    marker = work / "marker"
    subprocess.run(["cc", "-O2", "-o", str(marker), str(source)], check=True)
    return marker


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str]) -> tuple[float, float]:
    """(seconds from spawning ``argv`` until MARKER's main, CPU seconds of
    ``argv`` and its children); MARKER's line is the first on stdout."""
    began = time.clock_gettime(time.CLOCK_MONOTONIC)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} failed: {err.decode(errors='replace')}")
    return float(out.split()[0]) - began, _cpu(usage)


def cpu_of(argv: list[str]) -> float:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[0]} failed: {err.decode(errors='replace')}")
    return _cpu(usage)


def ready_after(argv: list[str], work: Path) -> float:
    """Seconds from spawning q-syscollect until its sd_notify READY=1, which
    it sends once every collector has enabled its events."""
    path = str(work / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(60)
        began = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "NOTIFY_SOCKET": path})
        try:
            while b"READY=1" not in sock.recv(4096):
                pass
            return time.monotonic() - began
        finally:
            proc.wait()
            os.unlink(path)


def measure_startup(runs: int = 3) -> dict[str, float]:
    """Medians over ``runs`` alternated rounds of both tools: seconds from
    spawn to the first sample (-i / inherit and system-wide), and start-up
    CPU seconds (system-wide 1 s runs, and the -i MARKER runs)."""
    q = q_command()
    work = Path(tempfile.mkdtemp(prefix="qtools-startup-"))
    got: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        got.setdefault(key, []).append(value)
    try:
        marker = str(build_marker(work))
        qdir, data = str(work / "q"), str(work / "perf.data")
        for _ in range(runs):
            shutil.rmtree(qdir, ignore_errors=True)
            first, cpu = timed([q, "-q", "-i", "-d", qdir, "--", marker])
            add("q_first_sample_s", first)
            add("q_inherit_cpu_s", cpu)
            first, cpu = timed(["perf", "record", "-q", *PERF_DWARF, "-o", data, "--", marker])
            add("perf_first_sample_s", first)
            add("perf_inherit_cpu_s", cpu)
            shutil.rmtree(qdir, ignore_errors=True)
            first, _cpu_s = timed([q, "-q", "-d", qdir, "--", marker])
            add("q_system_first_sample_s", first)
            first, _cpu_s = timed(["perf", "record", "-q", "-a", *PERF_DWARF, "-o", data, "--",
                                   marker])
            add("perf_system_first_sample_s", first)
            shutil.rmtree(qdir, ignore_errors=True)
            add("q_system_ready_s", ready_after([q, "-q", "-t", "1", "-d", qdir], work))
            shutil.rmtree(qdir, ignore_errors=True)
            add("q_startup_cpu_s", cpu_of([q, "-q", "-t", "1", "-d", qdir]))
            add("perf_startup_cpu_s", cpu_of(["perf", "record", "-q", "-a", *PERF_DWARF,
                                              "-o", data, "--", "sleep", "1"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {key: statistics.median(values) for key, values in got.items()}


# ---------------------------------------------------------------- idle


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                pass
    return out


def tree_counters(pid: int) -> tuple[int, int]:
    """(ns on the CPU, voluntary context switches) of every thread of
    ``pid`` and its descendants: schedstat's first field, and status's."""
    ns = switches = 0
    for p in _tree(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat") as f:
                    ns += int(f.read().split()[0])
                with open(f"/proc/{p}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            switches += int(line.split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return ns, switches


def measure_idle(seconds: float = 60, perf_seconds: float | None = None) -> dict[str, float]:
    """Each tool as the service runs it, alone, one after the other: % of
    one CPU over ``seconds`` (perf record: ``perf_seconds``, else the same)
    after SETTLE seconds of start-up (schedstat), and wake-ups per second
    (voluntary context switches). Alone, because side by side each samples
    the other's wake-ups: perf record's drains kept q-syscollect's
    collectors from ever finding their CPU idle."""
    q = q_command()
    work = Path(tempfile.mkdtemp(prefix="qtools-idle-"))
    args = service_args(work / "q")
    rate = args[args.index("-c") + 1] if "-c" in args else "997"
    commands = {"q": [q, "-q", *args],
                "perf": ["perf", "record", "-q", "-a", "-g", "-F", rate, "-o",
                         str(work / "perf.data")]}
    out: dict[str, float] = {}
    try:
        for name, command in commands.items():
            p = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                time.sleep(SETTLE)
                before = tree_counters(p.pid)
                t0 = time.monotonic()
                time.sleep(perf_seconds if name == "perf" and perf_seconds else seconds)
                after = tree_counters(p.pid)
                window = time.monotonic() - t0
            finally:
                p.send_signal(signal.SIGINT if name == "perf" else signal.SIGTERM)
                p.wait()
            out[f"{name}_pct_one_cpu"] = 100 * (after[0] - before[0]) / 1e9 / window
            out[f"{name}_wakeups_per_s"] = (after[1] - before[1]) / window
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="start-up rounds (medians)")
    ap.add_argument("--seconds", type=float, default=60.0, help="idle window")
    ap.add_argument("--skip-idle", action="store_true")
    ap.add_argument("--skip-startup", action="store_true")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed (Debian: linux-perf)")
    print(f"load average {os.getloadavg()[0]:.2f}")
    if not args.skip_startup:
        for key, value in measure_startup(args.runs).items():
            print(f"{key} {value:.3f}", flush=True)
    if not args.skip_idle:
        for key, value in measure_idle(args.seconds).items():
            print(f"{key} {value:.3f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
