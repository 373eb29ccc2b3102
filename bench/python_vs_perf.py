#!/usr/bin/env python3
"""A Python program profiled by perf and by q-tools, side by side in one run.

The program (tests/workloads/pyshares.py: outer() calls f1, f2, f4 with work
1:2:4) runs under CPython 3.13 `-X perf_jit` and 3.12 `-X perf`, once alone
(its own CPU, the baseline) and once under each tool:

- perf: `perf record -k 1 --call-graph dwarf` (+ `perf inject --jit` for the
  jitdump) + `perf report`;
- q-tools: `q-syscollect -i` + `q-view`.

For each step: CPU seconds (from wait4; a collector's figure is its run
minus the program's baseline, i.e. what profiling cost), output bytes, and
the share of the program's user stacks that are complete (reach _start or
another root frame) and pass through Python frames (`py::` names).

    sudo .venv/bin/python bench/python_vs_perf.py [--rounds 250] [--rate 997]

Prints a Markdown table for README.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests/workloads/pyshares.py"
ROOTS = {"_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone",
         "clone3", "__clone", "__clone3"}
BIN = Path(sys.executable).parent


@dataclass
class Steps:
    tool: str
    python: str
    cpu: dict[str, float] = field(default_factory=dict)
    size: int = 0
    copies: int = 0  # q-tools: object copies (binaries, kallsyms, jitdump) inside `.q`
    complete: float = 0.0
    python_complete: float = 0.0
    f4_share: float = 0.0


def find_python(version: str) -> str | None:
    for path in sorted(glob.glob(f"/root/.pyenv/versions/{version}*/bin/python{version}"),
                       reverse=True) + [shutil.which(f"python{version}") or ""]:
        if path and os.access(path, os.X_OK) and open(path, "rb").read(4) == b"\x7fELF":
            return path
    return None


def cpu_of(cmd: list[str], **kw: object) -> float:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            **kw)  # type: ignore[call-overload]
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return usage.ru_utime + usage.ru_stime


def du(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        if p.is_dir():
            total += sum(f.stat().st_size for f in p.iterdir() if f.is_file())
        elif p.exists():
            total += p.stat().st_size
    return total


def perf_stacks(data: Path) -> tuple[float, float, float]:
    """(complete share, complete through Python share, f4's share of f1+f2+f4)."""
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym"],
                         capture_output=True, text=True).stdout
    total = complete = py = 0
    f = {"f1": 0, "f2": 0, "f4": 0}
    for block in out.split("\n\n"):
        syms = [line.split(None, 1)[1].strip() if len(line.split(None, 1)) > 1 else "?"
                for line in block.strip().splitlines()]
        if not syms:
            continue
        total += 1
        rooted = syms[-1] in ROOTS
        complete += rooted
        if rooted and any(s.startswith("py::") for s in syms):
            py += 1
        for name in f:
            if any(s.startswith(f"py::{name}:") for s in syms):
                f[name] += 1
                break
    work = sum(f.values()) or 1
    return complete / max(total, 1), py / max(total, 1), f["f4"] / work


def run_perf(work: Path, python: str, mode: str, rounds: str, rate: int,
             baseline: float) -> Steps:
    s = Steps("perf", os.path.basename(python))
    data = work / f"perf-{mode}.data"
    s.cpu["record"] = cpu_of(["perf", "record", "-q", "-k", "1", "--call-graph", "dwarf",
                              "-e", "cpu-clock", "-F", str(rate), "-o", str(data), "--",
                              python, "-X", mode, str(PROGRAM), rounds], cwd=work) - baseline
    final = data
    outputs = [data]
    if mode == "perf_jit":
        final = work / f"perf-{mode}.jit.data"
        s.cpu["inject"] = cpu_of(["perf", "inject", "--jit", "-i", str(data), "-o", str(final)],
                                 cwd=work)
        outputs += [final] + [Path(p) for p in glob.glob(str(work / "jitted-*.so"))]
        outputs += [Path(p) for p in glob.glob("/tmp/jitted-*.so")]
    s.cpu["report"] = cpu_of(["perf", "report", "-i", str(final), "--stdio", "--children"],
                             cwd=work)
    s.size = du(outputs)
    s.complete, s.python_complete, s.f4_share = perf_stacks(final)
    return s


def run_q(work: Path, python: str, mode: str, rounds: str, rate: int, baseline: float) -> Steps:
    s = Steps("q-tools", os.path.basename(python))
    q = work / f"q-{mode}"
    s.cpu["record"] = cpu_of([str(BIN / "q-syscollect"), "-d", str(q), "-c", str(rate), "-i",
                              "--", python, "-X", mode, str(PROGRAM), rounds]) - baseline
    comm = os.path.basename(python)[:15]
    s.cpu["report"] = cpu_of([str(BIN / "q-view"), str(q), "--comm", comm, "--no-cache"])
    s.size = du([q])
    s.copies = sum(f.stat().st_size for f in q.iterdir() if f.name.startswith("."))
    doc = json.loads(subprocess.run([str(BIN / "q-view"), str(q), "--comm", comm, "--no-cache",
                                     "--format", "json"], capture_output=True, text=True).stdout)
    sq = doc["stack_quality"]
    s.complete = sq["share"] or 0.0
    py = [p for p in sq.get("python", [])]
    s.python_complete = (sum(p["python_rooted"] for p in py) /
                         max(sum(p["user_stacks"] for p in py), 1e-12))
    incl = {m[1]: f["inclusive"] for f in doc["functions"]
            if (m := re.match(r"py::(f[124]):", f["name"]))}
    s.f4_share = incl.get("f4", 0.0) / max(sum(incl.values()), 1e-12)
    return s


def _copies(s: Steps) -> str:
    return f" ({s.copies / 1e6:.1f} MB copies)" if s.copies else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", default="250")
    ap.add_argument("--rate", type=int, default=997)
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed")
    work = Path(tempfile.mkdtemp(prefix="py-vs-perf-"))
    rows: list[Steps] = []
    for version, mode in (("3.13", "perf_jit"), ("3.12", "perf")):
        python = find_python(version)
        if python is None:
            print(f"(no CPython {version}: skipped)", file=sys.stderr)
            continue
        baseline = cpu_of([python, "-X", mode, str(PROGRAM), args.rounds], cwd=work)
        rows.append(run_perf(work, python, mode, args.rounds, args.rate, baseline))
        rows.append(run_q(work, python, mode, args.rounds, args.rate, baseline))
    print("| program | tool | record CPU s | inject CPU s | report CPU s | output | "
          "complete stacks | complete through Python | f4 of f1+f2+f4 (4/7 = 57.1%) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in rows:
        inject = f"{s.cpu['inject']:.2f}" if "inject" in s.cpu else "-"
        print(f"| {s.python} | {s.tool} | {s.cpu['record']:.2f} | {inject} | "
              f"{s.cpu['report']:.2f} | {s.size / 1e6:.1f} MB{_copies(s)} | {100 * s.complete:.1f}% | "
              f"{100 * s.python_complete:.1f}% | {100 * s.f4_share:.1f}% |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
