#!/usr/bin/env python3
"""Unwinding throughput of qtools.daemon.unwind on captured real stacks.

Builds tests/workloads/unwind_capture.c with plain `cc -O2`, captures sets of
perf-like samples (registers + 16 KiB of stack) from it, then unwinds each
set with the package's Unwinder and reports CPU time (time.process_time):

- cold:        new ObjectCFI for every object (mmap, .eh_frame_hdr table, FDE
               decodes) and empty caches: what the first samples of a run cost;
- new process: objects already known (shared per content), empty per-process
               rule cache: what a freshly exec'd process costs;
- warm:        all caches filled: the steady state of a long run;
- generic:     warm, forcing the generic walker (the fast walker's fallback).

Usage: .venv/bin/python bench/unwind_throughput.py [--samples N] [--seconds S] [--dir DIR]
Nothing here asserts on time; figures go into README.md by hand.
"""

from __future__ import annotations

import argparse
import collections
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "workloads"))
import unwind_harness as H  # noqa: E402

from qtools.daemon.unwind import ObjectCFI, Unwinder  # noqa: E402

#: (label, harness mode, depth): each set is N captures of the p-fan-like loop
SETS = [
    ("p-fan, leaf anywhere", "samples", 0),
    ("p-fan 20 calls deeper", "samples", 20),
    ("in a SIGPROF handler", "handler", 2),
]


def per_sample(seconds: float, n: int) -> float:
    return seconds / n * 1e6


def run_passes(unwinder: Unwinder, space, caps, min_seconds: float) -> tuple[float, int]:
    """Unwind all captures repeatedly for at least min_seconds of CPU: (seconds, samples)."""
    n = 0
    t0 = time.process_time()
    while True:
        for c in caps:
            unwinder.unwind(space, c.regs, c.stack)
        n += len(caps)
        dt = time.process_time() - t0
        if dt >= min_seconds:
            return dt, n


@dataclass(frozen=True)
class SetResult:
    set: str
    samples: int
    frames: float
    complete: float
    reasons: dict[str, int]
    cold: float
    new_process: float
    warm: float
    rate: float
    generic: float
    fdes: int
    rules: int


def bench_set(label: str, outdir: Path, caps: list[H.Capture], seconds: float) -> SetResult:
    unwinder = Unwinder()
    # cold: everything from scratch, including opening and mapping the objects
    t0 = time.process_time()
    objects = H.ObjectCache()
    space = H.address_space(outdir, objects)
    results = [unwinder.unwind(space, c.regs, c.stack) for c in caps]
    cold = time.process_time() - t0
    # a new process mapping the same objects: only its rule cache is empty
    t0 = time.process_time()
    space2 = H.address_space(outdir, objects)
    for c in caps:
        unwinder.unwind(space2, c.regs, c.stack)
    new_process = time.process_time() - t0
    warm_s, warm_n = run_passes(unwinder, space, caps, seconds)
    gen_s, gen_n = run_passes(Unwinder(fast=False), space, caps, seconds / 2)
    reasons = collections.Counter(r.reason for r in results)
    return SetResult(
        set=label,
        samples=len(caps),
        frames=sum(len(r.frames) for r in results) / len(results),
        complete=sum(r.complete for r in results) / len(results),
        reasons=dict(reasons),
        cold=per_sample(cold, len(caps)),
        new_process=per_sample(new_process, len(caps)),
        warm=per_sample(warm_s, warm_n),
        rate=warm_n / warm_s,
        generic=per_sample(gen_s, gen_n),
        fdes=sum(o.fdes_decoded for o in objects.by_path.values()),
        rules=len(space.rule_cache),
    )


def object_costs(outdir: Path) -> list[tuple[str, float, int]]:
    """Cold cost of opening each mapped object and unpacking its .eh_frame_hdr table."""
    out = []
    for m in H.read_maps(outdir):
        if "x" in m.perms and m.path.startswith("/") and not m.path.endswith("unwind_capture-plain"):
            t0 = time.perf_counter()
            cfi = ObjectCFI.from_path(m.path)
            n = cfi.fde_count
            out.append((Path(m.path).name, (time.perf_counter() - t0) * 1e3, n))
    return out


def first_rule_cost(path: str, count: int = 300) -> tuple[float, float]:
    """(µs per first rule inside a new FDE, µs per further pc of an already decoded FDE).

    The first costs parsing the FDE and its CIE, running its CFA program to a
    row table and compiling one rule; a further pc costs a bisect and a compile.
    """
    starts = _fde_starts(ObjectCFI.from_path(path))
    starts = starts[:: max(1, len(starts) // count)][:count]
    cfi = ObjectCFI.from_path(path)
    cfi.fde_count  # the search table is loaded outside the timing
    t0 = time.perf_counter()
    for v in starts:
        cfi.rule_at(v + 1, False)
    first = (time.perf_counter() - t0) / len(starts) * 1e6
    t0 = time.perf_counter()
    for v in starts:
        cfi.rule_at(v + 2, False)
    again = (time.perf_counter() - t0) / len(starts) * 1e6
    return first, again


def _fde_starts(cfi: ObjectCFI) -> list[int]:
    """Link-time start of every FDE of the search table (through the private table)."""
    cfi.fde_count  # loads the table
    return sorted({cfi._base + loc for loc in cfi._locs})  # noqa: SLF001 - a benchmark may peek


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1000, help="captures per set (default 1000)")
    ap.add_argument("--seconds", type=float, default=2.0, help="CPU seconds per warm measurement")
    ap.add_argument("--dir", type=Path, help="keep the build and captures here")
    args = ap.parse_args(argv)
    if not H.supported():
        print("needs x86_64 and a C compiler", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        exe = H.build(root, "plain")
        rows = []
        for label, mode, depth in SETS:
            outdir = root / f"{mode}-d{depth}"
            caps = H.run(exe, mode, outdir, args.samples, depth)
            rows.append(bench_set(label, outdir, caps, args.seconds))
        costs = object_costs(root / "samples-d0")
        libc = next(m.path for m in H.read_maps(root / "samples-d0") if m.path.endswith("/libc.so.6"))
        first, again = first_rule_cost(libc)

    print(f"# unwind throughput, {time.strftime('%Y-%m-%d')}, {platform.node()} "
          f"({platform.machine()}, Python {platform.python_version()})")
    print()
    print("| stacks | samples | frames/stack | complete | cold µs/sample | new process µs/sample "
          "| warm µs/sample | warm samples/CPU-s | generic walker µs/sample |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.set} | {r.samples} | {r.frames:.1f} | {100 * r.complete:.1f}% "
              f"| {r.cold:.1f} | {r.new_process:.1f} | {r.warm:.2f} | {r.rate:,.0f} "
              f"| {r.generic:.1f} |")
    print()
    for r in rows:
        print(f"- {r.set}: stop reasons {r.reasons}, {r.fdes} FDEs decoded, "
              f"{r.rules} rules cached for the process")
    print(f"- libc.so.6, first rule inside a new FDE (parse + decode + compile): {first:.1f} µs; "
          f"another pc of a decoded FDE: {again:.1f} µs")
    for name, ms, n in costs:
        print(f"- {name}: open + .eh_frame_hdr table ({n} FDEs): {ms:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
