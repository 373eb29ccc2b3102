"""Synthetic churn for one CPU's collector: rounds of short-lived processes
(fork, exec, two objects mapped, a second thread, samples, exit) replayed
through CpuCollector with a checkpoint after each round, as its loop would
every --checkpoint seconds.

Most processes sample stacks from their program's small repertoire (the
code a program has: folded into the program's aggregate set); every
``big_every``-th process runs long enough for a set of its own and samples
stacks never seen before (tens of thousands over a run: written and then
forgotten with their process). A steady process (one that never ends)
optionally adds new stacks of its own at each round.

Used by tests/unit/test_collector_memory.py and bench/collector_memory.py.
"""

from __future__ import annotations

import io
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from qtools.daemon.clock import SYSTEM, Clock
from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.decode import synth
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Comm, Mmap, Sample, SampleId, Task
from qtools.daemon.kernel import abi
from qtools.daemon.kernel.source import ReplaySource
from qtools.daemon.machine.host import StaticHost
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.sets.objects import ObjectCopier
from qtools.qformat import QDir

LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                      | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN
                      | abi.SAMPLE_CGROUP, sample_id_all=True)
BASE, LIB, SIZE = 0x5555_0000_0000, 0x7f00_0000_0000, 0x10000
LIB_NAME = "libchurn.so"
STEADY_PID = 999


@dataclass
class Churn:
    procs: int = 64  # short-lived processes a round
    programs: int = 4  # distinct program names (and binaries)
    repertoire: int = 100  # distinct stacks each program's short runs take theirs from
    small: tuple[int, int] = (3, 12)  # samples of a short-lived process
    big_every: int = 32  # every so many processes: one with a set of its own
    big_samples: int = 500  # ... and that many samples, each a stack never seen before
    steady_stacks: int = 0  # new stacks of the steady process each round (0: no steady one)
    steady_repertoire: int = 0  # ... or samples a round from a fixed repertoire of 500 stacks
    cgroups: int = 7  # distinct cgroup ids the samples carry


class Ticking(Clock):
    """A clock its test moves on by hand (``now``, in seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0
        super().__init__(wall=lambda: 1.8e9 + self.now, mono=lambda: self.now)


class Feed(ReplaySource):
    """A replay that is handed its batches one round at a time."""

    def __init__(self) -> None:
        super().__init__(LAYOUT, [])

    def push(self, batch: list[bytes]) -> None:
        self.batches.append(batch)


class ChurnRun:
    """A collector fed rounds of churn; files under ``tmp``."""

    def __init__(self, tmp: Path, churn: Churn, seed: int = 1,
                 options: Options | None = None, clock: Clock = SYSTEM) -> None:
        self.churn = churn
        self.rng = random.Random(seed)
        names = [f"prog{i}" for i in range(churn.programs)] + [LIB_NAME]
        self.files = {}
        for name in names:  # real files: the copier copies what the samples touch
            path = tmp / name
            shutil.copy(shutil.which("true") or "/bin/true", path)
            self.files[name] = str(path)
        self.stat = {name: os.stat(path) for name, path in self.files.items()}
        self.repertoire = [[self._stack() for _ in range(churn.repertoire)]
                           for _ in range(churn.programs)]
        host = StaticHost(files=set(self.files.values()))
        run = RunInfo(["q-syscollect"], "cpu-clock", "seconds", 1e-9, "fp", host.machine())
        self.qdir = QDir.open(tmp / "churn.q", create=True)
        self.out = io.StringIO()
        self.feed = Feed()
        self.collector = CpuCollector(options or Options(cpu=0), run, self.feed, self.qdir,
                                      ObjectCopier(self.qdir, host=host), out=self.out,
                                      clock=clock, host=host)
        self.pid = 1000
        self.time = 1
        self.processes = 0
        self.samples = 0
        self.distinct_new = 0  # stacks never repeated: the big processes' and the steady one's
        self.steady = [self._stack() for _ in range(500 if churn.steady_repertoire else 0)]
        if churn.steady_stacks or churn.steady_repertoire:
            self.feed.push([*self._begin(STEADY_PID, "steady")])

    def _stack(self) -> tuple[int, ...]:
        r = self.rng
        return tuple(r.randrange(BASE, BASE + SIZE) if i % 2 else r.randrange(LIB, LIB + SIZE)
                     for i in range(r.randrange(3, 12)))

    def _tick(self) -> int:
        self.time += 1
        return self.time

    def _mmap(self, pid: int, name: str, addr: int) -> bytes:
        st = self.stat[name]
        return synth.encode_mmap2(LAYOUT, Mmap(pid, pid, addr, SIZE, 0, self.files[name],
                                               os.major(st.st_dev), os.minor(st.st_dev),
                                               st.st_ino, sid=SampleId(pid, pid, self._tick())))

    def _begin(self, pid: int, prog: str) -> Iterator[bytes]:
        t = self._tick()
        yield synth.encode_task(LAYOUT, Task(True, pid, 1, pid, 1, t, SampleId(pid, pid, t)))
        t = self._tick()
        yield synth.encode_comm(LAYOUT, Comm(pid, pid, prog, True, SampleId(pid, pid, t)))
        yield self._mmap(pid, prog if prog in self.files else "prog0", BASE)
        yield self._mmap(pid, LIB_NAME, LIB)

    def _sample(self, pid: int, tid: int, stack: tuple[int, ...]) -> bytes:
        self.samples += 1
        return synth.encode_sample(LAYOUT, Sample(
            misc=abi.MISC_USER, ip=stack[0], pid=pid, tid=tid, time=self._tick(),
            period=1_000_000, cpu=0, cgroup=1 + pid % self.churn.cgroups,
            callchain=(abi.CONTEXT_USER, *stack)))

    def _process(self, big: bool) -> Iterator[bytes]:
        c = self.churn
        self.pid += 1
        self.processes += 1
        pid, tid = self.pid, self.pid + 1_000_000  # a second thread
        program = pid % c.programs
        yield from self._begin(pid, f"prog{program}")
        t = self._tick()
        yield synth.encode_task(LAYOUT, Task(True, pid, pid, tid, pid, t, SampleId(pid, tid, t)))
        n = c.big_samples if big else self.rng.randrange(*c.small)
        for k in range(n):
            if big:
                stack = self._stack()
                self.distinct_new += 1
            else:
                stack = self.rng.choice(self.repertoire[program])
            yield self._sample(pid, tid if k % 3 == 0 else pid, stack)
        t = self._tick()
        yield synth.encode_task(LAYOUT, Task(False, pid, pid, tid, pid, t, SampleId(pid, tid, t)))
        yield synth.encode_task(LAYOUT, Task(False, pid, 1, pid, 1, t, SampleId(pid, pid, t)))

    def records(self) -> list[bytes]:
        """The records of one round of churn."""
        c = self.churn
        batch: list[bytes] = []
        for i in range(c.procs):
            batch += self._process(big=(self.processes + 1) % c.big_every == 0)
        for _ in range(c.steady_stacks):
            batch.append(self._sample(STEADY_PID, STEADY_PID, self._stack()))
            self.distinct_new += 1
        for _ in range(c.steady_repertoire):
            batch.append(self._sample(STEADY_PID, STEADY_PID, self.rng.choice(self.steady)))
        return batch

    def round(self, batch: list[bytes] | None = None) -> None:
        """One round of churn (``records()``, unless made beforehand), then
        a checkpoint."""
        self.feed.push(self.records() if batch is None else batch)
        while not self.feed.exhausted:
            self.collector.step()
        self.collector.checkpoint()

    def close(self) -> None:
        self.collector.checkpoint(final=True)
        self.qdir.close()
