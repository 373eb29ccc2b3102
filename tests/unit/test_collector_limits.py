"""The collector's bounds on replayed records: distinct stacks capped into a
counted remainder (the `.stack` and `.hist` totals still equal), times that
a stepped wall clock cannot reverse, and no set written without samples but
the CPU-statistics sets."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from qtools.daemon.kernel import abi

from qtools.daemon.decode import synth
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.clock import Clock
from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.machine.host import StaticHost
from qtools.daemon.sets.objects import ObjectCopier
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Comm, Mmap, Sample, SampleId
from qtools.daemon.sets.sketch import DistinctCount
from qtools.daemon.kernel.source import ReplaySource
from qtools.qformat import QDir, Stack, read_hist, read_info, read_stacks, stack_lines
from qtools.qformat.errors import QFormatError

LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                      | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN)
BASE = 0x5555_0000_0000
PID = 4343
PERIOD = 1_000_000


class FakeClock(Clock):
    def __init__(self, wall: float) -> None:
        self.now_wall, self.now_mono = wall, 500.0
        super().__init__(lambda: self.now_wall, lambda: self.now_mono)


@pytest.fixture
def binary(tmp_path):
    path = tmp_path / "app"
    shutil.copy(shutil.which("true"), path)
    return str(path)


def _records(binary: str, callers: list[int]) -> list[bytes]:
    st = os.stat(binary)
    out = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
           synth.encode_mmap2(LAYOUT, Mmap(PID, PID, BASE, 0x10000, 0, binary,
                                           os.major(st.st_dev), os.minor(st.st_dev), st.st_ino,
                                           sid=SampleId(PID, PID, 2)))]
    for i, caller in enumerate(callers):
        ip = BASE + 0x100 + 4 * (i % 5)
        out.append(synth.encode_sample(LAYOUT, Sample(
            misc=abi.MISC_USER, ip=ip, pid=PID, tid=PID, time=10 + i, period=PERIOD,
            callchain=(abi.CONTEXT_USER, ip, caller))))
    return out


def _collector(qdir: QDir, records: list[bytes], clock: Clock | None = None,
               **opts) -> CpuCollector:
    run = RunInfo(["q-syscollect"], "cpu-clock", "seconds", 1e-9, "fp")
    c = CpuCollector(Options(cpu=0, min_samples=1, **opts), run, ReplaySource(LAYOUT, [records]),
                     qdir, ObjectCopier(qdir, host=StaticHost(files=None)), out=io.StringIO(),
                     **({"clock": clock} if clock else {}))
    while not c.source.exhausted:
        c.step()
    return c


def test_distinct_stacks_beyond_the_cap_fold_into_one_counted_remainder(tmp_path, binary):
    # 30 stacks seen twice each, then 500 seen once: a cap of 50 keeps the
    # first 50 distinct ones; the other 480 samples go to the remainder.
    callers = [BASE + 0x800 + 8 * (i % 30) for i in range(60)]
    callers += [BASE + 0x2000 + 8 * i for i in range(500)]
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c = _collector(qdir, _records(binary, callers), max_stacks=50)
        assert c.checkpoint(final=True)
    info = read_info(qd / "app-pid4343-cpu0.info#0")
    stacks = list(read_stacks(qd / info.call_stacks.file))
    hist = dict(read_hist(qd / info.histogram.file))
    kept = [s for s in stacks if s.frames]
    remainder = [s for s in stacks if not s.frames]
    assert len(kept) == 50 and len(remainder) == 1
    assert sum(s.weight for s in stacks) == sum(hist.values()) == 560 * PERIOD
    assert remainder[0].weight == 480 * PERIOD
    assert info.task.samples == 560
    assert info.task.samples_folded == 480
    assert abs(info.task.stacks_folded - 480) <= 48  # an estimate: 3% std error
    text = (qd / info.call_stacks.file).read_bytes().splitlines()
    assert text[-1] == b"%d -" % (480 * PERIOD)  # the remainder line, last


def test_remainder_line_reads_and_writes():
    lines = b"".join(stack_lines({(0x10, 0x20): 5}, remainder=7))
    assert lines == b"5 0x10 0x20\n7 -\n"
    assert list(read_stacks(io.BytesIO(lines))) == [Stack(5, (0x10, 0x20)), Stack(7, ())]
    for bad in (b"7 - 0x10\n", b"- 7\n", b"x -\n"):
        with pytest.raises(QFormatError):
            list(read_stacks(io.BytesIO(bad)))


def test_distinct_count_estimates_within_its_error():
    for n in (0, 1, 10, 1000, 100_000):
        d = DistinctCount()
        for i in range(n):
            d.add((0x7F00_0000_0000 + i, 0x400000))
            d.add((0x7F00_0000_0000 + i, 0x400000))  # repeats count once
        # standard error 3.25%; 5 sigma, and at least 1 for tiny counts
        assert abs(d.estimate() - n) <= max(1, 0.17 * n), n
    a, b = DistinctCount(), DistinctCount()
    for i in range(2000):
        (a if i % 2 else b).add(i)
    a.merge(b)
    assert abs(a.estimate() - 2000) <= 340


def test_a_wall_clock_step_is_noted_and_cannot_end_a_set_before_it_began(tmp_path, binary):
    clock = FakeClock(1_800_000_000.0)
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c = _collector(qdir, _records(binary, [BASE + 0x900] * 20), clock=clock)
        clock.now_mono += 30
        clock.now_wall += 30 - 3600  # the clock is set back an hour during the run
        assert c.checkpoint(final=True)
    info = read_info(qd / "app-pid4343-cpu0.info#0")
    assert info.task.start_time == 1_800_000_000.0
    assert info.task.end_time == 1_800_000_030.0  # start + monotonic time elapsed
    assert info.task.clock_step == -3600.0
    kernel = read_info(qd / "kernel-cpu0.info#0")  # begun after the step: none to note
    assert kernel.task.end_time >= kernel.task.start_time
    assert kernel.task.clock_step is None


def test_no_step_no_key(tmp_path, binary):
    clock = FakeClock(1_800_000_000.0)
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c = _collector(qdir, _records(binary, [BASE + 0x900] * 20), clock=clock)
        clock.now_mono += 30
        clock.now_wall += 31.5  # within the threshold: scheduling, a leap second
        assert c.checkpoint(final=True)
    assert read_info(qd / "app-pid4343-cpu0.info#0").task.clock_step is None


def test_only_cpu_statistics_sets_are_written_without_samples(tmp_path):
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c = _collector(qdir, [])
        assert c.checkpoint()
        assert c.checkpoint(final=True)
    names = sorted(os.listdir(qd))
    assert [n for n in names if ".info#" in n] == ["kernel-cpu0.info#0"]
    info = read_info(qd / "kernel-cpu0.info#0")
    assert info.task.samples == 0 and info.task.cpu_stats
    assert info.task.purpose == "cpu-stats"
    assert '(q:purpose . "cpu-stats")' in (qd / "kernel-cpu0.info#0").read_text()
    assert list(read_hist(qd / info.histogram.file)) == []
    # without CPU statistics (-i): nothing at all
    qd2 = tmp_path / "q2"
    with QDir.open(qd2, create=True) as qdir:
        c = _collector(qdir, [], cpu_stats=False)
        assert c.checkpoint(final=True)
    assert [n for n in os.listdir(qd2) if ".info#" in n] == []


def test_a_set_with_samples_has_no_purpose_key(tmp_path, binary):
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c = _collector(qdir, _records(binary, [BASE + 0x900] * 5))
        assert c.checkpoint(final=True)
    info = read_info(qd / "app-pid4343-cpu0.info#0")
    assert info.task.samples == 5 and info.task.purpose is None
    assert info.task.samples_folded is None
    text = (qd / "app-pid4343-cpu0.info#0").read_text()
    assert "q:purpose" not in text and "q:samples-folded" not in text


def test_sets_written_open_and_unchanged_since_are_closed_at_the_end(tmp_path, binary):
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c = _collector(qdir, _records(binary, [BASE + 0x900] * 5))
        assert c.checkpoint()  # written open; no samples after this
        assert read_info(qd / "app-pid4343-cpu0.info#0").task.state == "open"
        assert c.checkpoint(final=True)
    for name in os.listdir(qd):
        if ".info#" in name:
            assert read_info(qd / name).task.state == "closed", name
