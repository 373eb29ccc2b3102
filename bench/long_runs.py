#!/usr/bin/env python3
"""How q-syscollect's output and q-view's time grow with the length of a run,
next to perf record / perf report on the same runs.

For each duration (default 1, 5 and 10 minutes) one p-fan per CPU plus a
stream of short-lived processes (a shell starting `true` 20 times a second)
run while q-syscollect (997 Hz, DWARF stacks) and `perf record -a -g`
(997 Hz, frame-pointer stacks) sample them at the same time. Then: the size
of `.q` (sets, and object copies apart) against perf.data, and the CPU time
of q-view against perf report on the p-fan processes.

perf's own DWARF mode is left out here: it stores every sampled stack, about
1 GB per 10 s on two CPUs (bench/collect_vs_perf.py measures it on short
runs), which would take tens of GB for these durations.

    sudo .venv/bin/python bench/long_runs.py [--minutes 1 5 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_vs_perf import cpu_of, prepare, run_together  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ("p-fan", "sh", "true", "sleep", "kernel", "q-syscollect")
"""The programs of the load (and the collector itself, sampled like any other)."""


KINDS = ("info", "hist", "stack", "edge", "threads")


def set_sizes(q: Path) -> dict[str, int]:
    """Bytes of a .q's sets (not the object copies, the dot-files) by file
    kind (NAME.KIND#N), the rest under "other"."""
    sizes = dict.fromkeys((*KINDS, "other"), 0)
    for p in q.iterdir():
        if p.name.startswith("."):
            continue
        kind = p.name.split("#", 1)[0].rsplit(".", 1)[-1]
        sizes[kind if kind in sizes else "other"] += p.stat().st_size
    return sizes


def program_sizes(q: Path) -> dict[str, int]:
    """Bytes of a .q's sets by program (PROG of the set's name), largest first."""
    from qtools.qformat.errors import QFormatError
    from qtools.qformat.names import parse_name
    sizes: dict[str, int] = {}
    for p in q.iterdir():
        if p.name.startswith("."):
            continue
        try:
            prog = parse_name(p.name).set.prog
        except (QFormatError, ValueError):
            prog = "?"
        sizes[prog] = sizes.get(prog, 0) + p.stat().st_size
    return dict(sorted(sizes.items(), key=lambda kv: -kv[1]))


def long_run(work: Path, pfan: Path, ncpu: int, minutes: float, view: bool = True,
             extra: list[str] | None = None) -> dict[str, Any]:
    """One run of the load (one p-fan per CPU plus 20 short-lived processes
    a second) sampled by q-syscollect (with ``extra`` arguments) and perf
    record -a -g at once: CPU of each, .q sizes, perf.data size and (with
    ``view``) the viewers' CPU."""
    seconds = minutes * 60
    loads = [subprocess.Popen([str(pfan)]) for _ in range(ncpu)]
    churn = subprocess.Popen(["sh", "-c", "while :; do /bin/true; sleep 0.05; done"])
    q, data = work / f"q-{minutes:g}", work / f"perf-{minutes:g}.data"
    try:
        q_cpu, perf_cpu, _err = run_together(
            [sys.executable, "-m", "qtools.daemon.cli", "-v", "-d", str(q), "-t",
             str(seconds), *(extra or [])],
            ["perf", "record", "-q", "-a", "-g", "-F", "997", "-e", "cpu-clock", "-o",
             str(data), "--", "sleep", str(seconds)], seconds + 600)
    finally:
        for p in (*loads, churn):
            p.kill()
            p.wait()
    kinds = set_sizes(q)
    row: dict[str, Any] = {"minutes": minutes, "q_cpu": q_cpu, "perf_cpu": perf_cpu, "kinds": kinds,
           "programs": program_sizes(q),
           "sets": sum(kinds.values()),
           "copies": sum(p.stat().st_blocks * 512 for p in q.iterdir()
                         if p.name.startswith(".") and p.stat().st_nlink == 1),
           "n_sets": len([p for p in q.iterdir() if ".info#" in p.name]),
           "perf_data": data.stat().st_size}
    if view:
        row["view"] = cpu_of([sys.executable, "-m", "qtools.viewer.commands.view", str(q), "--comm",
                              "p-fan", "--no-cache"])
        row["overview"] = cpu_of([sys.executable, "-m", "qtools.viewer.commands.view", str(q)])
        row["report"] = cpu_of(["perf", "report", "-i", str(data), "--comm", "p-fan",
                                "--stdio"])
    shutil.rmtree(q, ignore_errors=True)
    data.unlink()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, nargs="+", default=[1, 5, 10])
    args = ap.parse_args()
    work, pfan, ncpu = prepare("qtools-longbench-")
    rows = []
    kinds: list[tuple[float, dict[str, int], tuple[float, float, float]]] = []
    mine: list[tuple[float, dict[str, int]]] = []
    for minutes in args.minutes:
        r = long_run(work, pfan, ncpu, minutes)
        rows.append((minutes, r["q_cpu"], r["perf_cpu"], r["sets"], r["copies"], r["n_sets"],
                     r["perf_data"], r["view"], r["overview"], r["report"]))
        kinds.append((minutes, r["kinds"], os.getloadavg()))
        mine.append((minutes, dict(r["programs"])))
        print(f"{minutes:g} min, sets by program: " + ", ".join(
            f"{name} {size / 1e3:.0f} kB" for name, size in list(r["programs"].items())[:10]),
            file=sys.stderr)
        print(f"done: {minutes:g} min", file=sys.stderr, flush=True)
    print(f"\nOne p-fan per CPU ({ncpu}) plus 20 short-lived processes a second, sampled at "
          "997 Hz by both tools at once:\n")
    print("| run | q-syscollect CPU s | perf record CPU s | .q sets (files) | .q own copies | "
          "perf.data | q-view p-fan CPU s | q-view overview CPU s | perf report p-fan CPU s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m, qc, pc, sets, copies, n, pdata, view, over, rep in rows:
        print(f"| {m:g} min | {qc:.1f} | {pc:.1f} | {sets / 1e6:.1f} MB ({n}) | "
              f"{copies / 1e6:.1f} MB | {pdata / 1e6:.0f} MB | {view:.2f} | {over:.2f} | "
              f"{rep:.2f} |")
    print("\nThe sets by file type (bytes), and the load average at the end of each run:\n")
    types = sorted({t for _m, by, _l in kinds for t in by})
    print("| run | " + " | ".join(f".{t}" for t in types) + " | all sets | load |")
    print("|---|" + "---|" * (len(types) + 2))
    for m, by, load in kinds:
        print(f"| {m:g} min | " + " | ".join(f"{by.get(t, 0) / 1e6:.2f} MB" for t in types)
              + f" | {sum(by.values()) / 1e6:.2f} MB | {load[0]:.1f} {load[1]:.1f} |")
    print("\nThe sets of the workload's own programs (on a shared machine the others' "
          "programs have sets too):\n")
    print("| run | " + " | ".join(WORKLOAD) + " | in all |")
    print("|---|" + "---|" * (len(WORKLOAD) + 1))
    for m, progs in mine:
        print(f"| {m:g} min | " + " | ".join(f"{progs.get(p, 0) / 1e3:.0f} kB" for p in WORKLOAD)
              + f" | {sum(progs.get(p, 0) for p in WORKLOAD) / 1e6:.2f} MB |")
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        own = [sum(progs.get(p, 0) for p in WORKLOAD) for _m, progs in mine]
        print(f"\n.q sets, {last[0]:g} min against {first[0]:g} min: "
              f"{last[3] / max(first[3], 1):.2f}x; the workload's {own[-1] / max(own[0], 1):.2f}x "
              f"(object copies {last[4] / max(first[4], 1):.2f}x)")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
