"""Kernel sets say how much of their weight the idle task (pid 0) had:
with -k every pid's kernel samples share the set, and the overview still
shows idle apart."""

from __future__ import annotations

import io

from qtools.daemon.kernel import abi

from qtools.daemon.decode import synth
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.machine.host import StaticHost
from qtools.daemon.sets.objects import ObjectCopier
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Sample
from qtools.daemon.kernel.source import ReplaySource
from qtools.qformat import QDir, read_hist, read_info

LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                      | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD)
KIP = 0xFFFF_FFFF_8100_1000


def _sample(t: int, pid: int, period: int) -> bytes:
    return synth.encode_sample(LAYOUT, Sample(misc=abi.MISC_KERNEL, ip=KIP, pid=pid, tid=pid,
                                              time=t, period=period))


def _collect(qd, kernel_only: bool) -> None:
    records = [_sample(10 + i, 0, 1_000_000) for i in range(3)]
    records += [_sample(20 + i, 4242, 2_000_000) for i in range(2)]
    run = RunInfo(["q-syscollect", "-k"] if kernel_only else ["q-syscollect"], "cpu-clock",
                  "seconds", 1e-9, None)
    with QDir.open(qd, create=True) as qdir:
        c = CpuCollector(Options(cpu=0, kernel_only=kernel_only, stacks=False), run,
                         ReplaySource(LAYOUT, [records]), qdir, ObjectCopier(qdir, host=StaticHost(files=None)),
                         out=io.StringIO())
        while not c.source.exhausted:
            c.step()
        assert c.checkpoint(final=True)


def test_a_kernel_only_run_keeps_the_idle_weight_apart(tmp_path):
    qd = tmp_path / "q"
    _collect(qd, kernel_only=True)
    info = read_info(qd / "kernel-cpu0.info#0")
    assert info.task.samples == 5
    assert info.task.extra["q:idle-weight"] == 3_000_000  # pid 0's samples only
    assert sum(dict(read_hist(qd / info.histogram.file)).values()) == 7_000_000
    assert "(q:idle-weight . 3000000)" in (qd / "kernel-cpu0.info#0").read_text()


def test_without_k_the_kernel_set_is_all_idle(tmp_path):
    qd = tmp_path / "q"
    _collect(qd, kernel_only=False)
    info = read_info(qd / "kernel-cpu0.info#0")
    assert info.task.samples == 3 and info.task.extra["q:idle-weight"] == 3_000_000
