"""The idle task's samples are told from their fixed prefix and kept by
their pc alone (SamplePath.idle), every other sample as before: a
process's with its whole stack, with -k every pid's kernel stack, and a
scheduler tracepoint's of pid 0 (a switch away from idle) still reaches
its handler (--off-cpu)."""

from __future__ import annotations

import io
import struct

import pytest

from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.decode import synth
from qtools.daemon.decode.drain import decode_drain
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Comm, RecordError, Sample, SampleId
from qtools.daemon.decode.tracepoints import BY_NAME, EventRoute, Layouts
from qtools.daemon.kernel import abi
from qtools.daemon.kernel.source import ReplaySource
from qtools.daemon.machine.host import StaticHost
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.sets.objects import ObjectCopier
from qtools.qformat import QDir, read_hist, read_info, read_stacks

# The sampling event as q-syscollect opens it for DWARF stacks: the
# callchain, user registers and a user-stack copy follow the fixed prefix.
MAIN = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                    | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN
                    | abi.SAMPLE_REGS_USER | abi.SAMPLE_STACK_USER | abi.SAMPLE_CGROUP,
                    regs_user_mask=0b111)
# sched:sched_switch on this CPU, laid out as SourceSpec.switch_sample_type
SWITCH = SampleLayout(MAIN.sample_type & ~abi.SAMPLE_CGROUP | abi.SAMPLE_RAW,
                      regs_user_mask=0b111)
MAIN_ID, SWITCH_ID = 11, 12
PID = 4242
PERIOD = 10_309_278  # ns: 97 Hz
HALT, HALT2 = 0xFFFF_FFFF_8100_2000, 0xFFFF_FFFF_8100_2040  # where idle CPUs wait
IDLE_CHAIN = tuple(0xFFFF_FFFF_8100_3000 + 0x40 * i for i in range(11))  # callers of the wait
KA, KB = 0xFFFF_FFFF_8120_0000, 0xFFFF_FFFF_8120_0100  # a system call's kernel frames
UA, UB = 0x40_1000, 0x40_2000


def _idle(t: int, ip: int = HALT) -> bytes:
    return synth.encode_sample(MAIN, Sample(
        misc=abi.MISC_KERNEL, ip=ip, pid=0, tid=0, time=t, id=MAIN_ID, cpu=0, period=PERIOD,
        callchain=(abi.CONTEXT_KERNEL, ip) + IDLE_CHAIN))


def _busy(t: int) -> bytes:
    """A sample of PID in a system call, its kernel frames and its user ones."""
    return synth.encode_sample(MAIN, Sample(
        misc=abi.MISC_KERNEL, ip=KA, pid=PID, tid=PID, time=t, id=MAIN_ID, cpu=0,
        period=PERIOD, callchain=(abi.CONTEXT_KERNEL, KA, KB, abi.CONTEXT_USER, UA, UB)))


def _switch(t: int, pid: int, prev: int, state: int, next_: int) -> bytes:
    """sched_switch: ``prev`` leaves the CPU (``pid`` is the task current
    then: 0 when the CPU leaves its idle task), ``next_`` runs."""
    raw = bytearray(64)
    struct.pack_into("<i", raw, 24, prev)
    struct.pack_into("<q", raw, 32, state)
    raw[40:44] = b"app\0"
    struct.pack_into("<i", raw, 56, next_)
    return synth.encode_sample(SWITCH, Sample(
        misc=abi.MISC_KERNEL, ip=KA, pid=pid, tid=pid, time=t, id=SWITCH_ID, cpu=0, period=1,
        callchain=(abi.CONTEXT_KERNEL, KA), raw=bytes(raw)))


def _collector(qdir: QDir, records: list[bytes], **opts: object) -> CpuCollector:
    layouts = Layouts(MAIN)
    if opts.get("off_cpu"):
        layouts.add(SWITCH_ID, SWITCH, EventRoute(BY_NAME["sched:sched_switch"], True))
    run = RunInfo(["q-syscollect"], "cpu-clock", "seconds", 1e-9, "fp")
    host = StaticHost(files=None)
    return CpuCollector(Options(cpu=0, min_samples=1, cpu_stats=False, **opts), run,
                        ReplaySource(layouts, [records]), qdir,
                        ObjectCopier(qdir, host=host), out=io.StringIO(), host=host)


def _start() -> list[bytes]:
    return [synth.encode_comm(MAIN, Comm(PID, PID, "app", True,
                                         SampleId(PID, PID, 1, MAIN_ID, 0)))]


def _run(qd, records: list[bytes], **opts: object) -> CpuCollector:
    with QDir.open(qd, create=True) as qdir:
        c = _collector(qdir, records, **opts)
        while not c.source.exhausted:
            c.step()
        assert c.checkpoint(final=True)
    return c


def _files(qd, name: str) -> tuple[object, dict[int, int], dict[tuple[int, ...], int]]:
    info = read_info(qd / f"{name}.info#0")
    hist = dict(read_hist(qd / info.histogram.file))
    stacks = {s.frames: s.weight for s in read_stacks(qd / info.call_stacks.file)}
    return info, hist, stacks


def test_idle_samples_are_kept_by_their_pc_and_others_whole(tmp_path):
    records = _start() + [_idle(10 + i) for i in range(5)] + [_busy(20), _busy(21)] + \
        [_idle(30, HALT2), _idle(31)]
    c = _run(tmp_path / "q", records)
    assert c.samples == 9 and c.damaged == 0
    info, hist, stacks = _files(tmp_path / "q", "kernel-cpu0")
    assert info.task.samples == 7
    assert info.task.extra["q:idle-weight"] == 7 * PERIOD
    assert hist == {HALT: 6 * PERIOD, HALT2: PERIOD}
    assert stacks == {(HALT,): 6 * PERIOD, (HALT2,): PERIOD}  # the pc only: .stack sums to .hist
    assert info.task.kernel_from == HALT
    info, hist, stacks = _files(tmp_path / "q", "app-pid4242-cpu0")
    assert info.task.samples == 2
    assert hist == {KA: 2 * PERIOD}
    assert stacks == {(KA, KB, UA, UB): 2 * PERIOD}


def test_with_k_only_the_idle_task_is_kept_by_its_pc(tmp_path):
    records = [_idle(10), _busy(20), _idle(30), _busy(40)]
    _run(tmp_path / "q", records, kernel_only=True)
    info, hist, stacks = _files(tmp_path / "q", "kernel-cpu0")
    assert info.task.samples == 4
    assert info.task.extra["q:idle-weight"] == 2 * PERIOD
    assert hist == {HALT: 2 * PERIOD, KA: 2 * PERIOD}
    assert stacks == {(HALT,): 2 * PERIOD, (KA, KB): 2 * PERIOD}


@pytest.mark.parametrize("stacks", [True, False])
def test_idle_samples_without_stacks(tmp_path, stacks):
    _run(tmp_path / "q", [_idle(10), _idle(11)], stacks=stacks)
    info, hist, _ = _files(tmp_path / "q", "kernel-cpu0") if stacks else \
        (read_info(tmp_path / "q" / "kernel-cpu0.info#0"), None, None)
    assert info.task.extra["q:idle-weight"] == 2 * PERIOD
    assert (info.call_stacks is not None) == stacks


def test_a_switch_from_the_idle_task_still_ends_a_wait(tmp_path):
    """--off-cpu: PID sleeps at 100 and is switched in at 600 by the idle
    task (a sched_switch sample of pid 0, in kernel mode like an idle
    sample): the wait is 500 ns, ended by that sample; the idle samples
    around it still count as idle."""
    records = _start() + [_busy(50), _switch(100, PID, PID, 1, 0), _idle(200), _idle(300),
                          _switch(600, 0, 0, 0, PID), _busy(700)]
    with QDir.open(tmp_path / "q", create=True) as qdir:
        c = _collector(qdir, records, off_cpu=True)
        while not c.source.exhausted:
            c.step()
        sets = {ts.data.process.pid: ts for ts in c.book.by_process.values()}
        assert sets[PID].data.tally.waits == 500
        assert c.book.kernel_set().stats.idle_weight == 2 * PERIOD
        assert c.checkpoint(final=True)
    info, hist, stacks = _files(tmp_path / "q", "kernel-cpu0")
    assert stacks == {(HALT,): 2 * PERIOD}


def test_records_that_only_look_idle_are_decoded_whole(tmp_path):
    """A pid-0 sample in user mode (none is; but the kernel's word is the
    cpumode, never a guess) and one cut short take the decoder's path: the
    first is counted whole, the second as damaged."""
    user = synth.encode_sample(MAIN, Sample(
        misc=abi.MISC_USER, ip=UA, pid=0, tid=0, time=5, id=MAIN_ID, period=PERIOD,
        callchain=(abi.CONTEXT_USER, UA, UB)))
    short = _idle(6)
    short = struct.pack("<IHH", abi.RECORD_SAMPLE, abi.MISC_KERNEL, 40) + short[8:40]
    c = _run(tmp_path / "q", [user, short])
    assert c.damaged == 1 and c.samples == 1
    _, hist, stacks = _files(tmp_path / "q", "kernel-cpu0")
    assert hist == {UA: PERIOD} and stacks == {(UA,): PERIOD}


def test_the_probe_reads_what_the_decoder_reads():
    rec = _idle(10, HALT2)
    s = MAIN.decode(rec)
    assert MAIN.idle_sample(rec) == (s.ip, s.tid, s.period) == (HALT2, 0, PERIOD)
    assert MAIN.idle_sample(rec, {MAIN_ID}) is None  # another event's
    assert MAIN.idle_sample(_busy(10)) is None
    assert SampleLayout(abi.SAMPLE_TID | abi.SAMPLE_TIME).idle_sample(rec) is None  # no ip


def _kernel_info(qd) -> tuple[int, int]:
    """(q:idle-weight, mtime in ns) of kernel-cpu0's .info as now on disk."""
    path = qd / "kernel-cpu0.info#0"
    return read_info(path).task.extra["q:idle-weight"], path.stat().st_mtime_ns


def test_an_idle_cpu_rewrites_its_kernel_set_every_third_checkpoint(tmp_path):
    """Periodic checkpoints of a CPU where only the idle task ran leave the
    kernel set as last written, two times in three; a checkpoint asked for
    (SIGHUP), any other kernel sample, and the end of the run write it."""
    from qtools.daemon.sets.aggregate import IDLE_CHECKPOINTS
    qd = tmp_path / "q"
    batches = [[_idle(10 * n + i) for i in range(3)] for n in range(IDLE_CHECKPOINTS + 3)]
    with QDir.open(qd, create=True) as qdir:
        c = _collector(qdir, [])
        c.source.batches = list(batches)  # fed to the same source, drain by drain

        def drain_and_checkpoint(**kw: bool) -> int:
            c.step()
            assert c.checkpoint(**kw)
            return _kernel_info(qd)[0]

        assert drain_and_checkpoint() == 3 * PERIOD  # a new set: written at once
        weights = [drain_and_checkpoint() for _ in range(IDLE_CHECKPOINTS)]
        assert weights == [3 * PERIOD] * (IDLE_CHECKPOINTS - 1) + [3 * PERIOD * (IDLE_CHECKPOINTS + 1)]
        assert drain_and_checkpoint() == 3 * PERIOD * (IDLE_CHECKPOINTS + 1)  # skipped again
        assert drain_and_checkpoint(complete=True) == 3 * PERIOD * (IDLE_CHECKPOINTS + 3)
        # pid 0's samples that take the decoder's path (here: in user mode)
        # are not told idle from their prefix: the set changed, it is written
        c.source.batches = [[synth.encode_sample(MAIN, Sample(
            misc=abi.MISC_USER, ip=UA, pid=0, tid=0, time=900, id=MAIN_ID, cpu=0,
            period=PERIOD, callchain=(abi.CONTEXT_USER, UA)))], [_idle(901)]]
        c.step()
        assert c.checkpoint()
        assert dict(read_hist(qd / read_info(qd / "kernel-cpu0.info#0").histogram.file)).get(UA)
        before = _kernel_info(qd)
        c.step()  # one more idle sample, and the run ends
        assert c.checkpoint(final=True)
        after = _kernel_info(qd)
        assert after[0] == before[0] + PERIOD and read_info(qd / "kernel-cpu0.info#0").task.state \
            == "closed"


def _one_by_one(raw, layouts: Layouts):
    """What decode_drain gives, the plain way: each record tested as idle
    (SampleLayout.idle_sample), else decoded, else counted as damaged."""
    records, seen, damaged = [], {}, 0
    for rec in raw:
        hit = layouts.idle_sample(rec)
        if hit is not None:
            counts = seen.setdefault(hit[:2], [0, 0])
            counts[0] += 1
            counts[1] += hit[2]
            continue
        try:
            records.append(layouts.decode(rec))
        except RecordError:
            damaged += 1
    return records, seen, damaged


@pytest.mark.parametrize("off_cpu", [False, True])
def test_a_drain_decodes_what_record_by_record_decoding_does(off_cpu):
    """Idle samples, a process's, a pid-0 sample in user mode, a side-band
    record, records cut short or lying about their size, and with --off-cpu
    another event's sample of pid 0, in one drain: decode_drain's records, idle
    counts and damage are those of testing and decoding each alone."""
    layouts = Layouts(MAIN)
    if off_cpu:
        layouts.add(SWITCH_ID, SWITCH, EventRoute(BY_NAME["sched:sched_switch"], True))
    user0 = synth.encode_sample(MAIN, Sample(
        misc=abi.MISC_USER, ip=UA, pid=0, tid=0, time=5, id=MAIN_ID, period=PERIOD,
        callchain=(abi.CONTEXT_USER, UA, UB)))
    idle = _idle(6)
    cut = struct.pack("<IHH", abi.RECORD_SAMPLE, abi.MISC_KERNEL, 40) + idle[8:40]
    busy = _busy(8)
    lying = busy[:6] + struct.pack("<H", len(busy) + 8) + busy[8:]  # size past its end
    raw = _start() + [idle, _idle(7, HALT2), busy, user0, cut, lying, busy[:12], busy[:4],
                      _idle(10), _busy(11)]
    if off_cpu:  # a switch from the idle task: pid 0, kernel mode, another event's id
        raw.insert(4, _switch(9, 0, 0, 0, PID))
    views = [memoryview(bytearray(rec)) for rec in raw]  # as the ring hands them over
    drained = decode_drain(views, layouts)
    records, seen, damaged = _one_by_one(raw, layouts)
    assert (drained.records, drained.idle, drained.damaged) == (records, seen, damaged)
    assert seen == {(HALT, 0): [2, 2 * PERIOD], (HALT2, 0): [1, PERIOD]}
    assert damaged == 4 and len(records) == 4 + off_cpu
