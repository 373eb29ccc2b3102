#!/usr/bin/env python3
"""One CPU's collector memory after an hour of churn, replayed in minutes.

Replays synthetic records (tests/churn.py) through daemon.collector.CpuCollector
as an hour of its loop would see them: a checkpoint every 10 s, 20
short-lived processes a second (72,000 in the hour, of 20 programs, each
drawing its stacks from a repertoire of 500), one process a checkpoint that
runs long enough for a set of its own with 500 stacks never seen before,
and a steady process that finds 50 new stacks a checkpoint (--steady-stacks;
its set holds them until its slice ends, up to --max-stacks). Frame-pointer
stacks (the replay has no user stacks to unwind).

Prints, every 5 replayed minutes, the process's RSS after a garbage
collection (retained) and its peak (VmHWM), and what the collector holds.
The interpreter and the modules are in the first line (before any record).

Usage:
    .venv/bin/python bench/collector_memory.py [--minutes 60] [--per-second 20]
                                               [--steady-stacks 50]

Nothing here asserts; the figures go into README by hand.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from churn import Churn, ChurnRun  # noqa: E402

CHECKPOINT_SECONDS = 10


def status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in KiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def report(label: str, run: ChurnRun) -> None:
    gc.collect()
    s = status()
    c = run.collector
    stacks = sum(len(a.data.tally.stacks) for a in c.book.aggregates.values())
    stacks += sum(len(t.data.tally.stacks) for t in c.book.by_process.values())
    print(f"{label:>8} {run.processes:7d} {run.distinct_new:8d} {run.samples:8d} "
          f"{s['VmRSS'] / 1024:8.1f} {s['VmHWM'] / 1024:8.1f} {len(c.table.procs):6d} "
          f"{len(c.book.by_process):5d} {stacks:7d} {time.process_time():7.1f}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=int, default=60)
    p.add_argument("--per-second", type=int, default=20)
    p.add_argument("--steady-stacks", type=int, default=50,
                   help="new stacks of the steady process a checkpoint (50)")
    args = p.parse_args()
    per_round = args.per_second * CHECKPOINT_SECONDS
    churn = Churn(procs=per_round, programs=20, repertoire=500, big_every=per_round,
                  big_samples=500, steady_stacks=args.steady_stacks)
    rounds = args.minutes * 60 // CHECKPOINT_SECONDS
    with tempfile.TemporaryDirectory(prefix="q-mem-") as tmp:
        run = ChurnRun(Path(tmp), churn)
        print(f"{'minutes':>8} {'procs':>7} {'new stk':>8} {'samples':>8} {'RSS MiB':>8} "
              f"{'peak MiB':>8} {'tasks':>6} {'sets':>5} {'stacks':>7} {'CPU s':>7}")
        report("0", run)
        for r in range(1, rounds + 1):
            run.round()
            if r % (300 // CHECKPOINT_SECONDS) == 0:
                report(f"{r * CHECKPOINT_SECONDS // 60}", run)
        run.close()
        if run.out.getvalue():
            print(f"the collector said: {run.out.getvalue().strip()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
