"""Remembered walks against fresh ones, over samples the kernel really took.

p-fan (a loop calling ten functions, some into libm, and clock_gettime in
the vdso) runs under the event source q-syscollect -i opens: DWARF
registers and 16 KiB of stack per sample at 997 Hz. Every sample of it is
then unwound by the collector's unwinder, which remembers walks, and by one
that remembers nothing and by the generic walker: the answers must be the
same, sample for sample, and most of them must have been recalled (else
this test would show nothing about the memo).
"""

from __future__ import annotations

import os
import time

import pytest

from qtools.daemon import command
from qtools.daemon.config import Config
from qtools.daemon.decode.records import Sample
from qtools.daemon.kernel.source import PerfSource
from qtools.daemon.machine import procfs
from qtools.daemon.plan import plan
from qtools.daemon.unwind import Mappings, ObjectCFI, Unwinder

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64",
                                reason="the spaces below are read from x86-64 /proc maps")

SECONDS = 3


def capture(binary: str) -> tuple[list[Sample], Mappings]:
    """p-fan's samples, and its executable mappings as /proc shows them."""
    cfg = Config(directory="/nonexistent", cpus=procfs.online_cpus(),
                 command=[binary, str(SECONDS)], inherit_only=True)
    spec = plan(cfg, lambda text: None)
    pid, release_fd, err_fd = command.spawn(cfg.command)
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(pid, {cpu})
    source = PerfSource(spec._replace(target_pid=pid, cpu=cpu))
    samples: list[Sample] = []
    space = Mappings()
    try:
        assert not command.release(release_fd, err_fd)
        deadline = time.monotonic() + SECONDS + 30
        mapped = False
        while time.monotonic() < deadline:
            source.wait(0.5)
            for rec in source.read():
                got = source.layout.decode(rec)
                if isinstance(got, Sample) and got.pid == pid and got.regs:
                    samples.append(got._replace(stack=bytes(got.stack), regs=tuple(got.regs)))
            rec = got = None  # views into the ring: none may outlive the drain
            source.release()
            if not mapped and samples:  # exec'd and running: its maps are final
                mapped = map_into(space, pid)
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
    finally:
        source.close()
    return samples, space


def map_into(space: Mappings, pid: int) -> bool:
    try:
        lines = open(f"/proc/{pid}/maps").read().splitlines()
    except OSError:
        return False
    vdso = procfs.own_vdso()
    for line in lines:
        parts = line.split(None, 5)
        if "x" not in parts[1]:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        path = parts[5] if len(parts) > 5 else ""
        if path.startswith("/"):
            cfi = ObjectCFI.from_path(path)
        elif path == "[vdso]" and vdso:
            cfi = ObjectCFI.from_bytes(vdso[1])
        else:
            cfi = None
        space.add(lo, hi, int(parts[2], 16), cfi)
    return True


def test_recalled_walks_are_the_walks(perf, build):
    samples, space = capture(str(build("p-fan")))
    assert len(samples) > 500, "p-fan was hardly sampled"
    remembering, fresh, generic = Unwinder(), Unwinder(memo=False), Unwinder(fast=False)
    complete = 0
    for s in samples:
        got = remembering.unwind(space, s.regs, s.stack)
        assert got == fresh.unwind(space, s.regs, s.stack), s
        assert got == generic.unwind(space, s.regs, s.stack), s
        complete += got.complete
    # the walks were real ones (to _start), and the memo was used for most
    assert complete > 0.9 * len(samples)
    assert remembering.memo.hits > 0.5 * len(samples), (remembering.memo.hits, len(samples))
