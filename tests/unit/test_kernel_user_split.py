"""Kernel and user addresses told apart as perf does: by the sample's cpumode
and the callchain's PERF_CONTEXT_* markers, never by an address constant.

Replayed streams whose kernel frames sit where no single constant expects
them: x86-64 with 5-level paging (the kernel half from 0xff00000000000000)
and an arm64 kernel before 5.4 (image and modules at 0xffff0000...). The old
constant 0xffff800000000000 took both for user addresses. The collector
writes its decision as q:kernel-from; kernel frames are never looked up in a
process's maps nor moved when an aggregate rebases its processes."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from qtools.daemon.kernel import abi

from qtools.daemon.decode import synth
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.sets.objects import ObjectCopier
from qtools.daemon.sets.tally import NO_KERNEL, SampleTally
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Comm, Mmap, Sample, SampleId
from qtools.daemon.kernel.source import ReplaySource
from qtools.qformat import QDir, read_hist, read_info, read_stacks

LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                      | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN)
# Above pid_max's hard limit (4194304): no such process on any host.
PID, PID2 = 5_000_001, 5_000_002
BASE, BASE2 = 0x5555_0000_0000, 0x5566_0000_0000
OLD_KERNEL_START = 0xFFFF_8000_0000_0000

FIVE_LEVEL = (0xFF00_0000_0040_1000, 0xFF00_0000_0040_2040, 0xFF00_0000_0040_3080)
ARM64_PRE_54 = (0xFFFF_0000_0808_1234, 0xFFFF_0000_0808_5678, 0xFFFF_0000_0100_0100)


@pytest.fixture
def binary(tmp_path):
    path = tmp_path / "app"
    shutil.copy(shutil.which("true"), path)
    return str(path)


def _mmap(pid: int, binary: str, base: int, t: int, size: int = 0x10000) -> bytes:
    st = os.stat(binary)
    return synth.encode_mmap2(LAYOUT, Mmap(pid, pid, base, size, 0, binary,
                                           os.major(st.st_dev), os.minor(st.st_dev),
                                           st.st_ino, sid=SampleId(pid, pid, t)))


def _start(pid: int, binary: str, base: int, t: int) -> list[bytes]:
    return [synth.encode_comm(LAYOUT, Comm(pid, pid, "app", True, SampleId(pid, pid, t))),
            _mmap(pid, binary, base, t + 1)]


def _kernel_sample(pid: int, t: int, kernel: tuple[int, ...], user: tuple[int, ...]) -> bytes:
    chain = (abi.CONTEXT_KERNEL, *kernel) + ((abi.CONTEXT_USER, *user) if user else ())
    return synth.encode_sample(LAYOUT, Sample(misc=abi.MISC_KERNEL, ip=kernel[0], pid=pid,
                                              tid=pid, time=t, period=1000, callchain=chain))


def _user_sample(pid: int, t: int, user: tuple[int, ...]) -> bytes:
    return synth.encode_sample(LAYOUT, Sample(misc=abi.MISC_USER, ip=user[0], pid=pid, tid=pid,
                                              time=t, period=1000,
                                              callchain=(abi.CONTEXT_USER, *user)))


def _collect(qd, records: list[bytes], min_samples: int = 1) -> None:
    run = RunInfo(["q-syscollect"], "cpu-clock", "seconds", 1e-9, "fp")
    with QDir.open(qd, create=True) as qdir:
        c = CpuCollector(Options(cpu=0, min_samples=min_samples), run,
                         ReplaySource(LAYOUT, [records]), qdir, ObjectCopier(qdir),
                         out=io.StringIO())
        while not c.source.exhausted:
            c.step()
        assert c.checkpoint(final=True)


def _addresses(qd, info) -> tuple[set[int], list[tuple[int, ...]]]:
    hist = set(dict(read_hist(qd / info.histogram.file)))
    stacks = [s.frames for s in read_stacks(qd / info.call_stacks.file)]
    return hist, stacks


@pytest.mark.parametrize("kernel", [FIVE_LEVEL, ARM64_PRE_54], ids=["x86-5-level", "arm64-4.x"])
def test_kernel_frames_are_told_by_cpumode_and_markers(tmp_path, binary, kernel):
    assert all(k < OLD_KERNEL_START for k in kernel)  # where the old constant failed
    user = (BASE + 0x100, BASE + 0x900)
    records = _start(PID, binary, BASE, 1)
    records += [_kernel_sample(PID, 10 + i, kernel, user) for i in range(3)]
    records += [_user_sample(PID, 20 + i, (BASE + 0x200, BASE + 0x900)) for i in range(2)]
    qd = tmp_path / "q"
    _collect(qd, records)
    name = f"app-pid{PID}-cpu0.info#0"
    info = read_info(qd / name)
    low = min(kernel)
    assert info.task.kernel_from == low
    assert f"(q:kernel-from . #x{low:x})" in (qd / name).read_text()
    hist, stacks = _addresses(qd, info)
    assert {a for a in hist if a >= low} == {kernel[0]}
    assert {a for a in hist if a < low} == {BASE + 0x200}
    assert sorted(stacks) == sorted([kernel + user, (BASE + 0x200, BASE + 0x900)])
    for stack in stacks:  # kernel frames first, all at or above; user frames below
        split = sum(a >= low for a in stack)
        assert all(a >= low for a in stack[:split]) and all(a < low for a in stack[split:])
    # only user addresses were looked up in the maps: the program, no kernel "object"
    assert [o.path for o in info.objects] == [binary]


def test_a_set_without_kernel_samples_has_no_kernel_from(tmp_path, binary):
    records = _start(PID, binary, BASE, 1)
    records += [_user_sample(PID, 10 + i, (BASE + 0x200, BASE + 0x900)) for i in range(3)]
    qd = tmp_path / "q"
    _collect(qd, records)
    name = f"app-pid{PID}-cpu0.info#0"
    assert read_info(qd / name).task.kernel_from is None
    assert "q:kernel-from" not in (qd / name).read_text()


def test_the_kernel_set_records_the_lowest_kernel_mode_address(tmp_path):
    records = [_kernel_sample(0, 10, ARM64_PRE_54[:2], ()),
               _kernel_sample(0, 11, ARM64_PRE_54[2:], ())]
    qd = tmp_path / "q"
    _collect(qd, records)
    info = read_info(qd / "kernel-cpu0.info#0")
    assert info.task.kernel_from == min(ARM64_PRE_54)
    hist, _stacks = _addresses(qd, info)
    assert all(a >= info.task.kernel_from for a in hist)


def test_a_kernel_frame_is_never_rebased_when_an_aggregate_folds(tmp_path, binary):
    # The second process maps the program (hostile, or a replay gone wrong)
    # over the addresses its kernel frames have: folding rebases its user
    # addresses onto the first process's layout, and its kernel ones not.
    kbase = FIVE_LEVEL[0] & ~0xFFFF
    records = _start(PID, binary, BASE, 1) + _start(PID2, binary, BASE2, 3)
    records.append(_mmap(PID2, binary, kbase, 5, size=0x100000))
    records += [_kernel_sample(PID, 10, ARM64_PRE_54, (BASE + 0x100, BASE + 0x900))]
    records += [_kernel_sample(PID2, 11, FIVE_LEVEL, (BASE2 + 0x100,))]
    records += [_user_sample(PID2, 20, (BASE2 + 0x200, BASE2 + 0x900))]
    qd = tmp_path / "q"
    _collect(qd, records, min_samples=100)  # too few: both fold into app-cpu0
    info = read_info(qd / "app-cpu0.info#0")
    assert sorted(info.task.pids) == [PID, PID2]
    low = min(ARM64_PRE_54 + FIVE_LEVEL)
    assert info.task.kernel_from == low
    hist, stacks = _addresses(qd, info)
    assert {a for a in hist if a >= low} == {ARM64_PRE_54[0], FIVE_LEVEL[0]}
    kernel_frames = {a for s in stacks for a in s if a >= low}
    assert kernel_frames == set(ARM64_PRE_54 + FIVE_LEVEL)
    # user addresses: rebased onto where the first process had the program
    assert {a for a in hist if a < low} == {BASE + 0x200}


def test_a_tally_keeps_its_lowest_kernel_address_however_it_is_told():
    """q:kernel-from is the lowest kernel address of every sample, wait
    and folded tally: the tally keeps it, whichever way it is told."""
    high, mid, low = FIVE_LEVEL[2], FIVE_LEVEL[1], FIVE_LEVEL[0]
    t = SampleTally()
    t.add(BASE + 0x1000, 1, (BASE + 0x1000,), (), PID)  # a user sample: no kernel address
    t.note_kernel(NO_KERNEL)
    assert t.kernel_from == NO_KERNEL
    t.add(high, 1, (high,), (), PID, high)
    assert t.kernel_from == high
    t.add_same(mid, 3, 2, (mid,), PID, mid)
    assert t.kernel_from == mid
    t.note_kernel(high)  # a higher one changes nothing
    t.add(high, 1, (high,), (), PID, high)
    assert t.kernel_from == mid
    other = SampleTally()
    other.note_kernel(low)
    t.merge(other)
    assert t.kernel_from == low
