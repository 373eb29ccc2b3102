"""Samples counted alike against samples counted one by one, over records
the kernel really delivered.

A drain counts a sample whose walk the unwinder remembers by what its set
keeps of it, and hands such samples to their sets before the next record
of any other kind (Router.step). Two processes run on one CPU under
the event source ``q-syscollect -i`` opens: p-fan, and offcpu's two
computing threads. Their records are replayed through two collectors, one
that recalls walks in the drain and one whose every sample goes through the
sample handler: the sets they write must be the same, and most samples must
have been recalled (else this test would show nothing).
"""

from __future__ import annotations

import io
import os
import re
import time
from pathlib import Path

import pytest

from qtools.daemon import command
from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.config import Config
from qtools.daemon.frames.dwarf import DwarfFrames
from qtools.daemon.kernel.source import PerfSource, ReplaySource
from qtools.daemon.machine import procfs
from qtools.daemon.machine.host import StaticHost
from qtools.daemon.plan import plan
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.sets.objects import ObjectCopier
from qtools.qformat import QDir, read_info

SECONDS = 2
TIMES = ("q:start-time", "q:end-time", "q:run-start", "q:clock-step")


class Recalling(DwarfFrames):
    """The collector's frames, counting the samples recalled in the drain."""

    recalled = 0

    def recall(self, proc, sample):
        frames = super().recall(proc, sample)
        if frames is not None:
            Recalling.recalled += 1
        return frames


class OneByOne(DwarfFrames):
    """Frames that never recall: every sample goes through ``SamplePath.sample``."""

    def recall(self, proc, sample):
        return None


def capture(cmd: list[str], cpu: int):
    """The records of ``cmd`` and its children on ``cpu``, drain by drain."""
    cfg = Config(directory="/nonexistent", cpus=procfs.online_cpus(), command=cmd,
                 inherit_only=True)
    spec = plan(cfg, lambda text: None)
    pid, release_fd, err_fd = command.spawn(cfg.command)
    os.sched_setaffinity(pid, {cpu})  # inherited by the children
    source = PerfSource(spec._replace(target_pid=pid, cpu=cpu))
    batches: list[list[bytes]] = []
    try:
        assert not command.release(release_fd, err_fd)
        deadline = time.monotonic() + SECONDS + 30
        while time.monotonic() < deadline:
            source.wait(0.5)
            batches.append([bytes(rec) for rec in source.read()])
            source.release()
            if os.waitpid(pid, os.WNOHANG)[0]:
                break
        batches.append([bytes(rec) for rec in source.read()])
        source.release()
    finally:
        source.close()
    return source.layout, [b for b in batches if b]


def ring_views(batches: list[list[bytes]]) -> list[list[memoryview]]:
    """Each batch as the ring hands records over: views into one buffer."""
    out = []
    for batch in batches:
        buf, off, views = memoryview(bytearray(b"".join(batch))), 0, []
        for rec in batch:
            views.append(buf[off:off + len(rec)])
            off += len(rec)
        out.append(views)
    return out


def replay(qpath: Path, layout, batches, cpu: int, frames_class) -> dict[str, str]:
    """Each set's files the collector writes from ``batches``, the .info
    without times, and the sets' weights by cgroup."""
    out = io.StringIO()
    with QDir.open(qpath, create=True) as qdir:
        host = StaticHost(files=None)
        copier = ObjectCopier(qdir, host=host)
        frames = frames_class(qdir, copier, procfs.own_vdso()[1], set(), -1)
        run = RunInfo(["q-syscollect", "-i"], "cpu-clock", "seconds", 1e-9, "dwarf",
                      run_id="replay", run_start=0.0)
        c = CpuCollector(Options(cpu, cpu_stats=False), run, ReplaySource(layout, ring_views(batches)),
                         qdir, copier, user_frames=frames, out=out, host=host)
        while not c.source.exhausted:
            c.step()
            copier.work()
        # each set's weight by cgroup, which names its cgroup (none in a replay)
        weights = {str(ts.data.name): ts.stats.cgroup_weights for ts in c.book.open_sets()}
        assert c.checkpoint(final=True)
        copier.close()
    assert not out.getvalue()
    files = {"cgroup weights": repr(sorted(weights.items()))}
    for name in sorted(os.listdir(qpath)):
        if ".info#" not in name:
            continue
        text = (qpath / name).read_text()
        for key in TIMES:
            text = re.sub(rf"\({re.escape(key)}\s[^()]*\)", f"({key} ...)", text)
        files[name] = text
        info = read_info(qpath / name)
        for ref in (info.histogram, info.call_stacks, info.call_counts, info.threads):
            if ref is not None and getattr(ref, "file", None):
                # the order of lines is the writer's business, not the set's
                lines = (qpath / ref.file).read_text().splitlines()
                files[ref.file] = "\n".join(sorted(lines))
    return files


@pytest.mark.skipif(os.uname().machine != "x86_64" or procfs.own_vdso() is None,
                    reason="replays x86-64 DWARF stacks with this machine's vdso")
def test_samples_recalled_in_the_drain_are_counted_as_one_by_one(tmp_path, build, perf):
    pfan, offcpu = build("p-fan"), build("offcpu")
    cpu = min(os.sched_getaffinity(0))
    # offcpu's threads pin themselves to CPU 0: all three compete there
    cpu = 0 if 0 in os.sched_getaffinity(0) else cpu
    layout, batches = capture(["/bin/sh", "-c", f"{pfan} {SECONDS} & {offcpu} pinned {SECONDS}; "
                               "wait"], cpu)
    samples = sum(1 for batch in batches for rec in batch if rec[:4] == b"\x09\x00\x00\x00")
    assert samples > 500, "too few samples to compare"

    Recalling.recalled = 0
    quick = replay(tmp_path / "quick.q", layout, batches, cpu, Recalling)
    slow = replay(tmp_path / "slow.q", layout, batches, cpu, OneByOne)

    assert Recalling.recalled > samples // 2
    assert any(name.startswith("p-fan") for name in quick)
    assert any(name.startswith("offcpu") for name in quick)
    assert quick == slow
