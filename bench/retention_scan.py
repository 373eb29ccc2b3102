#!/usr/bin/env python3
"""CPU per retention round at 10,000 and 100,000 sets.

Fills a directory with N synthetic closed sets (an `.info` naming ten
objects, as a real program's does, a `.hist` and a `.stack`) and a few
object copies, then times (time.process_time) the service's upkeep round
(``Index.maintain`` with --max-age 14d, --max-size 100G and --compress, the
data files already compressed as a service leaves them: nothing to do but
look):

- first:      the index's first pass, which parses every `.info` (what
              each round cost before the index), spread over rounds of at
              most retention.PARSE_SECONDS;
- live:       a round after a checkpoint rewrote 0.1% of the sets (open ones):
              what a running service's rounds cost;
- unchanged:  a round in which nothing changed in the directory;
- churn:      a round after 1% of the sets were rewritten and as many added
              (listing, one lstat per `.info`, parsing the changed ones).

Usage: .venv/bin/python bench/retention_scan.py [--sets 10000 100000] [--dir DIR]
Nothing here asserts on time; figures go into README.md by hand.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import tempfile
import time
from pathlib import Path

from qtools.daemon.sets import retention
from qtools.qformat import (CallStacks, Histogram, Info, MapRange, ObjectRef, QDir, SetName,
                            TaskInfo, dump_info)

OBJECTS = ["libc.so.6", "ld-linux-x86-64.so.2", "libm.so.6", "libstdc++.so.6", "libz.so.1",
           "libssl.so.3", "libcrypto.so.3", "libpthread.so.0", "libgcc_s.so.1", "app"]


def info_text(name: SetName, end: float, state: str) -> bytes:
    task = TaskInfo(syscollect_cmdline=["q-syscollect", "--rotate", "1h"],
                    cmdline=[name.prog, "--serve"], comm=name.prog, exe=f"/usr/bin/{name.prog}",
                    pid=name.pid, cpu=name.cpu, hostname="bench", start_time=end - 3600,
                    end_time=end, samples=5000, lost_samples=0, state=state,
                    task_stats={"q:user-seconds": 12.5, "q:system-seconds": 1.25,
                                "q:voluntary-switches": 1000, "q:involuntary-switches": 50})
    info = Info(task=task)
    info.histogram = Histogram(name.file("hist", 0), event_name="cpu-clock",
                               x_unit_label="address", y_unit_label="seconds",
                               y_unit_conversion_factor=1e-9, y_granularity=1e-3)
    info.call_stacks = CallStacks(name.file("stack", 0), unwinder="dwarf")
    info.objects = [ObjectRef(o, path=f"/usr/lib/{o}", file=f".{o}.crc32.{i:08x}",
                              maps=[MapRange(0x7F00_0000_0000 + i * 0x100000, 0x80000, 0)])
                    for i, o in enumerate(OBJECTS)]
    return dump_info(info).encode()


def write(directory: Path, name: str, data: bytes) -> None:
    tmp = directory / f"tmp.{name}"  # replaced by rename, as every q writer does
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(tmp, directory / name)


HIST = gzip.compress(b"0x401000 100\n0x401010 200\n", mtime=0)
STACK = gzip.compress(b"300 0x401000 0x401500\n", mtime=0)


def round_(index: retention.Index, q: QDir) -> retention.Report:
    return index.maintain(q, stale_after=600, grace=600, max_size=100 << 30,
                          max_age=14 * 86400, compress=True)


def make_set(directory: Path, i: int, end: float, tag: str = "", state: str = "closed") -> None:
    name = SetName(f"prog{i % 500}{tag}", i % 2, 1000 + i)
    write(directory, name.file("hist", 0), HIST)
    write(directory, name.file("stack", 0), STACK)
    write(directory, name.file("info", 0), info_text(name, end, state))


def cpu(fn: object) -> float:
    start = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - start


def bench(n: int, root: Path) -> None:
    directory = root / f"q{n}"
    directory.mkdir()
    try:
        now = time.time()
        for i, o in enumerate(OBJECTS):
            write(directory, f".{o}.crc32.{i:08x}", b"\x7fELF" + b"\0" * 4096)
        churn_n = max(1, n // 100)
        for i in range(n):  # the last 1% still open: their collectors rewrite them
            make_set(directory, i, now - 86400 + i, state="open" if i >= n - churn_n else "closed")
        with QDir.open(directory) as q:
            index = retention.Index()
            first_rounds = 0

            def first_pass() -> None:
                nonlocal first_rounds
                while first_rounds == 0 or not index.first_pass_done:
                    round_(index, q)
                    first_rounds += 1
            first = cpu(first_pass)
            time.sleep(retention.QUIET_SECONDS + 0.2)
            round_(index, q)  # notes that the directory is quiet
            rounds = 20
            unchanged = cpu(lambda: [round_(index, q) for _ in range(rounds)])
            for i in range(churn_n):  # open sets rewritten (a new inode), and new ones
                make_set(directory, n - 1 - i, now, state="open")
                make_set(directory, n + i, now, "x", state="open")
            live_n = max(1, n // 1000)
            for i in range(live_n):  # a checkpoint rewrote a few open sets
                make_set(directory, n - 1 - i, now, state="open")
            live = cpu(lambda: round_(index, q))
            parses = index.parses
            churn_rounds = 0

            def churn_pass() -> None:
                nonlocal churn_rounds
                while churn_rounds == 0 or index.pending:
                    round_(index, q)
                    churn_rounds += 1
            churn = cpu(churn_pass)
            churn_parsed = index.parses - parses
        print(f"{n:>7} sets: first pass {first:6.2f} CPU-s ({first_rounds} rounds); "
              f"live round ({live_n} open sets rewritten) {live * 1000:7.1f} ms; "
              f"unchanged round {unchanged / rounds * 1000:7.3f} ms; "
              f"churn ({churn_n} rewritten + {churn_n} new) {churn:6.3f} CPU-s "
              f"({churn_rounds} rounds, {churn_parsed} parsed)", flush=True)
    finally:
        shutil.rmtree(directory)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--dir", help="where to make the directories (default: a temporary one)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="qtools-retention-", dir=args.dir))
    try:
        for n in args.sets:
            bench(n, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
