#!/usr/bin/env python3
"""q-view --annotate and --by line against perf annotate --stdio and perf
report --sort srcline, on the same program (root; perf installed).

Two workloads, each recorded once by `perf record -e cpu-clock` and once by
`q-syscollect` (the views are what is compared, not the recordings):
  c       tests/data/src/hotline.c built with -g -O2, spin() annotated;
  python  a Python loop on an interpreter whose libpython has DWARF
          (PYTHON, default: the running one), _PyEval_EvalFrameDefault
          annotated.
Each view is timed cold (an empty q-tools cache: q-view parses the DWARF
of the sampled units) and warm (cached), as CPU seconds of the command
(user + system, children included) and wall seconds.

usage: bench/annotate_vs_perf.py [--python PYTHON] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = "import sys\ndef work(n):\n    t = 0\n    for i in range(n):\n        t += i % 7\n" \
       "    return t\nprint(work(int(sys.argv[1])))\n"


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of ``cmd``, output thrown away."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                   check=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime), wall


def q_tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).parent / name)


def bench(label: str, argv: list[str], function: str, work: Path) -> None:
    data, q = work / f"{label}.perf.data", work / f"{label}.q"
    shutil.rmtree(q, ignore_errors=True)
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", str(data), "--", *argv],
                   stdout=subprocess.DEVNULL, check=True)
    subprocess.run([q_tool("q-syscollect"), "-d", str(q), "--", *argv],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    comm = Path(argv[0]).name[:15]
    cache = work / f"{label}.cache"
    env = {**os.environ, "Q_CACHE_DIR": str(cache)}
    views = {
        "annotate": ([q_tool("q-view"), str(q), "--comm", comm, "--annotate", function],
                     ["perf", "annotate", "--stdio", "-i", str(data), function]),
        "by line": ([q_tool("q-view"), str(q), "--comm", comm, "--by", "line", "--flat"],
                    ["perf", "report", "--stdio", "-i", str(data), "--sort", "srcline"]),
    }
    for view, (ours, theirs) in views.items():
        shutil.rmtree(cache, ignore_errors=True)
        cold = timed(ours, env)
        warm = timed(ours, env)
        perf = timed(theirs)
        print(f"{label:7} {view:9} q-view cold {cold[0]:6.2f} s CPU ({cold[1]:6.2f} wall)  "
              f"warm {warm[0]:5.2f} s ({warm[1]:5.2f})  perf {perf[0]:6.2f} s "
              f"({perf[1]:6.2f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--work", type=Path)
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="annotate-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    exe = work / "hotline"
    subprocess.run(["cc", "-g", "-O2", "-fPIE", "-pie", "-o", str(exe),
                    str(ROOT / "tests" / "data" / "src" / "hotline.c")], check=True)
    bench("c", [str(exe), "400000000"], "spin", work)
    loop = work / "loop.py"
    loop.write_text(LOOP)
    python = os.path.realpath(args.python)
    bench("python", [python, str(loop), "30000000"], "_PyEval_EvalFrameDefault", work)
    print(f"(work files in {work})")


if __name__ == "__main__":
    main()
