#!/usr/bin/env python3
"""q-view against `perf report` on data of the same workload from the same run.

One run of a busy workload (one p-fan per CPU) is recorded twice at once:
`perf record -a -g` runs as the command q-syscollect waits for. Then each
viewer reports the p-fan processes: q-view with a cold symbol cache and
again warm, perf report twice likewise. CPU seconds (user + system of the
viewer process) are compared; output goes to /dev/null.

    sudo .venv/bin/python bench/view_vs_perf.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collect_vs_perf import cpu_of, prepare  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    work, pfan, ncpu = prepare("qtools-viewbench-")
    q, data = work / "q", work / "perf.data"
    loads = " ".join(f"{pfan} {args.seconds} &" for _ in range(ncpu))
    subprocess.run([sys.executable, "-m", "qtools.daemon.cli", "-d", str(q), "--",
                    "perf", "record", "-q", "-a", "-g", "-F", "997", "-e", "cpu-clock",
                    "-o", str(data), "--", "sh", "-c", f"{loads} wait"],
                   check=True, capture_output=True)
    env = dict(os.environ, Q_CACHE_DIR=str(work / "cache"))
    q_view = [sys.executable, "-m", "qtools.viewer.cli", str(q), "--comm", "p-fan"]
    perf_report = ["perf", "report", "-i", str(data), "--comm", "p-fan", "--stdio"]
    rows = [("q-view, cold symbol cache", cpu_of(q_view, env)),
            ("q-view, warm symbol cache", cpu_of(q_view, env)),
            ("perf report, first", cpu_of(perf_report)),
            ("perf report, again", cpu_of(perf_report))]
    q_bytes = sum(p.stat().st_size for p in q.iterdir() if not p.name.startswith("."))
    print(f"\np-fan on {ncpu} CPUs for {args.seconds:g} s, cpu-clock at 997 Hz with stacks; "
          f"the p-fan processes reported (flat profile and call graph):\n")
    print("| viewer | CPU seconds |")
    print("|---|---|")
    for name, cpu in rows:
        print(f"| {name} | {cpu:.2f} |")
    print(f"\nq-view warm / perf report again: {rows[1][1] / rows[3][1]:.2f}x; "
          f"data read: .q sets {q_bytes / 1e6:.2f} MB, perf.data {data.stat().st_size / 1e6:.2f} MB")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
