"""The collector loop on replayed records, no kernel needed: branch-stack
samples become `.edge` call arcs, LOST records become q:lost-samples, exec
and pid reuse start new versions, and every file comes out complete."""

from __future__ import annotations

import io
import os
import shutil
import struct

import pytest

from qtools.daemon.kernel import abi

from qtools.daemon.decode import synth
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.collector import CpuCollector, Flags, Options
from qtools.daemon.messages import parse_line
from qtools.daemon.machine.host import StaticHost
from qtools.daemon.sets.kallsymscopy import KallsymsCopy
from qtools.daemon.sets.objects import ObjectCopier, build_id
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Branch, Comm, Lost, Mmap, Sample, SampleId, Switch, Task
from qtools.daemon.kernel.source import ReplaySource
from qtools.qformat import QDir, read_edges, read_hist, read_info, read_stacks

LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                      | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN
                      | abi.SAMPLE_BRANCH_STACK, branch_sample_type=abi.BRANCH_ANY_CALL)
BASE = 0x5555_0000_0000
PID = 4242
CALL = abi.BR_TYPE_CALL << abi.BRANCH_TYPE_SHIFT
RET = 6 << abi.BRANCH_TYPE_SHIFT


@pytest.fixture
def binary(tmp_path):
    path = tmp_path / "app"
    shutil.copy(shutil.which("true"), path)
    return str(path)


def _mmap(binary: str, t: int) -> bytes:
    st = os.stat(binary)
    return synth.encode_mmap2(LAYOUT, Mmap(PID, PID, BASE, 0x10000, 0, binary,
                                           os.major(st.st_dev), os.minor(st.st_dev), st.st_ino,
                                           sid=SampleId(PID, PID, t)))


def _sample(t: int, ip: int, branches=()) -> bytes:
    return synth.encode_sample(LAYOUT, Sample(
        misc=abi.MISC_USER, ip=ip, pid=PID, tid=PID, time=t, period=1_000_000,
        callchain=(abi.CONTEXT_USER, ip, BASE + 0x900), branches=tuple(branches)))


def _collector(qdir, batches, min_samples=100, kallsyms=None):
    run = RunInfo(["q-syscollect", "-t", "1"], "cycles", "seconds", 1e-9, "fp")
    out = io.StringIO()
    c = CpuCollector(Options(cpu=0, min_samples=min_samples), run,
                     ReplaySource(LAYOUT, batches), qdir, ObjectCopier(qdir, host=StaticHost(files=None)), out=out,
                     kallsyms=kallsyms)
    while not c.source.exhausted:
        c.step()
    return c, out


def test_branch_stacks_become_call_arcs(tmp_path, binary):
    calls = [Branch(BASE + 0x100, BASE + 0x200, CALL), Branch(BASE + 0x210, BASE + 0x104, RET),
             Branch(BASE + 0x300, BASE + 0x400, CALL)]
    records = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
               _mmap(binary, 2)]
    records += [_sample(10 + i, BASE + 0x200 + 4 * (i % 3), calls) for i in range(150)]
    records.append(synth.encode_lost(LAYOUT, Lost(7, 1, SampleId(PID, PID, 500))))
    # two batches, the second out of order on purpose: the collector sorts by time
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c, _ = _collector(qdir, [records[:80], records[80:][::-1]])
        assert c.checkpoint(final=True)
        info = read_info(qd / "app-pid4242-cpu0.info#0")
        assert info.task.pid == PID and info.task.samples == 150
        assert info.task.lost_samples == 7
        assert info.call_stacks.unwinder == "fp"
        edges = {(a.caller, a.callee): a.calls for a in read_edges(qd / info.call_counts.file)}
        assert edges == {(BASE + 0x100, BASE + 0x200): 150, (BASE + 0x300, BASE + 0x400): 150}
        hist = dict(read_hist(qd / info.histogram.file))
        assert sum(hist.values()) == 150 * 1_000_000
        assert set(hist) == {BASE + 0x200, BASE + 0x204, BASE + 0x208}
        stacks = list(read_stacks(qd / info.call_stacks.file))
        assert sum(s.weight for s in stacks) == sum(hist.values())
        (obj,) = info.objects
        assert obj.path == binary and obj.maps[0].addr == BASE
        assert qdir.verify_copy(obj.file) is None
        fd = os.open(binary, os.O_RDONLY)
        assert obj.build_id == build_id(fd)
        os.close(fd)


def test_each_set_says_which_of_its_cpus_losses_it_saw(tmp_path, binary):
    """A LOST record counts in every set open on the CPU; each set says
    which of the slice's losses were its (q:lost-from), so that the union
    is the CPU's loss, and a new slice counts its own from 0."""
    other = PID + 1

    def samples(pid: int, t0: int) -> list[bytes]:
        return [synth.encode_sample(LAYOUT, Sample(
            misc=abi.MISC_USER, ip=BASE + 0x200, pid=pid, tid=pid, time=t0 + i,
            period=1_000_000)) for i in range(3)]

    def lost(n: int, t: int) -> bytes:
        return synth.encode_lost(LAYOUT, Lost(n, 1, SampleId(PID, PID, t)))
    exit_ = synth.encode_task(LAYOUT, Task(False, PID, 1, PID, 1, 50, SampleId(PID, PID, 50)))
    first = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
             synth.encode_comm(LAYOUT, Comm(other, other, "tool", True,
                                            SampleId(other, other, 2))),
             _mmap(binary, 3)] + samples(PID, 10) + [lost(5, 20)] + samples(other, 30) \
        + [lost(3, 40), exit_, lost(2, 60)] + samples(other, 70)
    second = samples(other, 110) + [lost(4, 120)] + samples(other, 130)
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c, _ = _collector(qdir, [first], min_samples=1)
        assert c.rotate()
        c.source.batches.append(second)
        c.step()
        assert c.checkpoint(final=True)
    app, tool = (read_info(qd / f"{n}-pid{p}-cpu0.info#0").task
                 for n, p in (("app", PID), ("tool", other)))
    # app: losses 0..7 of the slice; tool, from its first sample: 5..9
    assert (app.lost_samples, app.lost_from, tool.lost_samples, tool.lost_from) == (8, 0, 5, 5)
    assert app.slice_start == tool.slice_start
    later = read_info(qd / f"tool-pid{other}-cpu0.info#1").task
    kernel = read_info(qd / "kernel-cpu0.info#1").task  # open all through the slice
    # the next slice counts anew
    assert (later.lost_samples, later.lost_from, kernel.lost_samples, kernel.lost_from) == \
        (4, 0, 4, 0)
    assert later.slice_start == kernel.slice_start
    assert c.lost == 14


def test_exec_and_pid_reuse_start_new_versions(tmp_path, binary):
    def burst(t0, comm):
        return [synth.encode_comm(LAYOUT, Comm(PID, PID, comm, True, SampleId(PID, PID, t0))),
                _mmap(binary, t0 + 1)] + [_sample(t0 + 2 + i, BASE + 0x10) for i in range(5)]
    exit_ = synth.encode_task(LAYOUT, Task(False, PID, 1, PID, 1, 3000,
                                           SampleId(PID, PID, 3000)))
    fork = synth.encode_task(LAYOUT, Task(True, PID, 1, PID, 1, 4000, SampleId(1, 1, 4000)))
    records = burst(1000, "app") + burst(2000, "tool") + [exit_, fork] + burst(5000, "app")
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c, _ = _collector(qdir, [records], min_samples=3)
        assert c.checkpoint(final=True)
    names = sorted(n for n in os.listdir(qd) if ".info#" in n and not n.startswith("kernel"))
    assert names == ["app-pid4242-cpu0.info#0", "app-pid4242-cpu0.info#1",
                     "tool-pid4242-cpu0.info#0"]
    for n in names:
        assert read_info(qd / n).task.samples == 5


def test_kallsyms_is_copied_again_when_a_module_is_loaded(tmp_path, binary):
    """A module loaded mid-run has its symbols in the sets written after it;
    a change of use counts alone copies nothing."""
    kallsyms, modules = tmp_path / "kallsyms", tmp_path / "modules"
    kallsyms.write_text("ffffffff81000000 T _stext\n")
    modules.write_text("ext4 1007616 1 - Live 0xffffffffc0000000\n")
    records = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
               _mmap(binary, 2)]
    more = [_sample(100 + i, BASE + 0x10) for i in range(5)]
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c, _ = _collector(qdir, [records + more[:2]], min_samples=1,
                          kallsyms=KallsymsCopy(str(kallsyms), str(modules)))
        later = [more[2:3], more[3:]]
        assert c.checkpoint()
        first = read_info(qd / "app-pid4242-cpu0.info#0").kallsyms
        assert (qd / first).read_text() == "ffffffff81000000 T _stext\n"
        # use counts change all the time; the symbols do not
        modules.write_text("ext4 1007616 3 - Live 0xffffffffc0000000\n")
        kallsyms.write_text("ffffffff81000000 T _stext\n# not copied\n")
        c.source.batches = [later.pop(0)]
        c.step()
        assert c.checkpoint()
        assert read_info(qd / "app-pid4242-cpu0.info#0").kallsyms == first
        modules.write_text(modules.read_text() + "evil 16384 0 - Live 0xffffffffc0100000\n")
        kallsyms.write_text("ffffffff81000000 T _stext\nffffffffc0100000 t evil_init\t[evil]\n")
        c.source.batches = [later.pop(0)]
        c.step()
        assert c.checkpoint(final=True)
        second = read_info(qd / "app-pid4242-cpu0.info#0").kallsyms
        assert second != first and "evil_init" in (qd / second).read_text()
        assert qdir.verify_copy(second) is None


def test_short_records_are_counted_as_damaged_and_reported(tmp_path, binary):
    """Records shorter than their header says, or than their fields need,
    between good ones: skipped and counted, the good ones kept; the count
    reaches the collector's report to its parent."""
    good = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
            _mmap(binary, 2)] + [_sample(10 + i, BASE + 0x200) for i in range(3)]
    whole = _sample(20, BASE + 0x204)
    damaged = [whole[:len(whole) - 8],  # the header claims 8 bytes more
               whole[:4],  # not even a header
               whole[:6] + struct.pack("<H", 24) + whole[8:24],  # fields run past the size
               _mmap(binary, 3)[:30]]
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c, _ = _collector(qdir, [good[:3] + damaged[:2], damaged[2:] + good[3:]], min_samples=1)
        assert c.checkpoint(final=True)
        assert read_info(qd / "app-pid4242-cpu0.info#0").task.samples == 3
        tally = c.tally()
        infos = [n for n in os.listdir(qd) if ".info#" in n]  # the app's and kernel-cpu0
        assert (tally.samples, tally.damaged, tally.given_up) == (3, 4, 0)
        assert tally.sets == len(infos) == 2
        kind, said = parse_line(tally.line("end"))
        assert kind == "end" and said == tally


def test_switch_records_are_decoded_and_reach_their_handler(tmp_path, binary):
    """A record type added by one route, one decoder and one handler: SWITCH
    and SWITCH_CPU_WIDE records between samples are counted, nothing else
    changes (the samples' set is written as before)."""
    records = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
               _mmap(binary, 2)]
    for i in range(5):
        records.append(_sample(10 + 2 * i, BASE + 0x200))
        records.append(synth.encode_switch(LAYOUT, Switch(
            True, i % 2 == 0, 0, 0, SampleId(PID, PID, 11 + 2 * i))))
    records.append(synth.encode_switch(LAYOUT, Switch(False, False, sid=SampleId(PID, PID, 30)),
                                       cpu_wide=False))
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c, _ = _collector(qdir, [records], min_samples=1)
        assert c.switches == 6 and c.samples == 5 and c.damaged == 0
        assert c.checkpoint(final=True)
        assert read_info(qd / "app-pid4242-cpu0.info#0").task.samples == 5


def _thread_sample(t: int, pid: int, tid: int, period: int) -> bytes:
    return synth.encode_sample(LAYOUT, Sample(
        misc=abi.MISC_USER, ip=BASE + 0x200, pid=pid, tid=tid, time=t, period=period,
        callchain=(abi.CONTEXT_USER, BASE + 0x200)))


def test_samples_keep_their_thread_and_folding_merges_threads(tmp_path, binary):
    """Each set counts samples and weight per thread (tid); a short-lived
    task folded into its program's set brings its threads along."""
    child = PID + 8
    records = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
               _mmap(binary, 2)]
    records += [_thread_sample(10 + i, PID, PID + i % 2, 1000 * (1 + i % 2)) for i in range(6)]
    records.append(synth.encode_task(LAYOUT, Task(True, child, PID, child, PID, 20,
                                                  SampleId(child, child, 20))))
    records += [_thread_sample(30 + i, child, child + i % 3, 500) for i in range(3)]
    records.append(synth.encode_task(LAYOUT, Task(False, child, PID, child, child, 40,
                                                  SampleId(child, child, 40))))
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c, _ = _collector(qdir, [records])
        (ts,) = [s for p, s in c.book.by_process.items() if p.pid == PID]
        assert ts.data.tally.threads == {PID: [3, 3000], PID + 1: [3, 6000]}
        assert c.checkpoint(final=False)  # the child ended with few samples: folded
        agg = c.book.aggregates["app"].data.tally
        assert agg.threads == {child: [1, 500], child + 1: [1, 500], child + 2: [1, 500]}
        assert c.checkpoint(final=True)  # the parent, never promoted, folds at the end
        assert agg.threads == {PID: [3, 3000], PID + 1: [3, 6000], child: [1, 500],
                               child + 1: [1, 500], child + 2: [1, 500]}
        assert agg.samples == 9 and agg.other_threads == [0, 0]


def test_collectors_take_the_kallsyms_copy_their_supervisor_made_after_forking_them(
        tmp_path, binary):
    """The supervisor copies kallsyms once its collectors sample; a
    collector forked before names that copy in its sets, without copying
    kallsyms itself, and copies it again only when a module is loaded."""
    kallsyms, modules = tmp_path / "kallsyms", tmp_path / "modules"
    kallsyms.write_text("ffffffff81000000 T _stext\n")
    modules.write_text("ext4 1007616 1 - Live 0xffffffffc0000000\n")
    qd = tmp_path / "q"
    host = StaticHost(files=None)
    shared = KallsymsCopy(str(kallsyms), str(modules))
    shared.expect(host)
    go_r, go_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the collector
        code = 1
        try:
            os.read(go_r, 1)
            with QDir.open(qd) as qdir:
                copier = ObjectCopier(qdir, host=host)
                first = shared.current(copier) or ""
                modules.write_text(modules.read_text() + "evil 16384 0 - Live 0xffffffffc01\n")
                second = shared.current(copier) or ""
            os.write(out_w, f"{first} {second}".encode())
            code = 0
        finally:
            os._exit(code)
    with QDir.open(qd, create=True) as qdir:
        shared.current(ObjectCopier(qdir, host=host), report=True)
        made = shared.name
        shared.publish()
        # what the collector would copy itself differs from the supervisor's copy
        kallsyms.write_text("ffffffff81000000 T _stext\nffffffffc0100000 t evil_init\t[evil]\n")
        os.write(go_w, b"x")
        _pid, status = os.waitpid(pid, 0)
        first, second = os.read(out_r, 4096).decode().split()
    assert os.waitstatus_to_exitcode(status) == 0
    assert made is not None and first == made
    assert second != made and "evil_init" in (qd / second).read_text()


class _Waits(ReplaySource):
    """A replay that notes each wait of the loop and lets the time pass."""

    def __init__(self, batches, now):
        super().__init__(LAYOUT, batches)
        self.now, self.waits = now, []

    def wait(self, timeout: float) -> None:
        self.waits.append(round(timeout, 3))
        self.now[0] += timeout


def _waits_collector(qdir: QDir, source: _Waits, opts: Options) -> CpuCollector:
    run = RunInfo(["q-syscollect"], "cpu-clock", "seconds", 1e-9, "fp")
    return CpuCollector(opts, run, source, qdir, ObjectCopier(qdir, host=StaticHost(files=None)),
                        out=io.StringIO())


def _run_waits(tmp_path, source: _Waits, now: list[float], waits: int,
               quiet_interval: float) -> None:
    """A collector's loop over ``source`` on the clock ``now``, stopped
    after ``waits`` waits."""
    flags = Flags()
    with QDir.open(tmp_path / "q", create=True) as qdir:
        c = _waits_collector(qdir, source, Options(cpu=0, checkpoint_interval=1000.0))

        def heartbeat() -> None:
            if len(source.waits) == waits:
                flags.stop = True
        assert c.run(flags, clock=lambda: now[0], heartbeat=heartbeat,
                     quiet_interval=quiet_interval)


@pytest.mark.parametrize("stop_at, written", [(1010.3, [1005.0]),
                                                (1013.0, [1005.0, 1011.0])])
def test_a_timed_run_leaves_the_checkpoint_due_at_its_end_to_the_final_one(tmp_path, stop_at,
                                                                          written):
    """-t 10 with checkpoints every 5 s: the one due at 10 s would write
    the sets a moment before the final checkpoint writes them again, so
    it waits for the stop; a stop later than a second past the end does
    not hold it back longer."""
    now = [1000.0]
    source = _Waits([], now)
    flags = Flags()
    with QDir.open(tmp_path / "q", create=True) as qdir:
        c = _waits_collector(qdir, source,
                             Options(cpu=0, checkpoint_interval=5.0, run_seconds=10.0))
        checkpoints: list[float] = []
        checkpoint = c.checkpoint

        def noted(final: bool = False, complete: bool = False) -> bool:
            checkpoints.append(now[0])
            return checkpoint(final, complete)
        c.checkpoint = noted  # type: ignore[method-assign]

        def heartbeat() -> None:
            flags.stop = now[0] >= stop_at
        assert c.run(flags, clock=lambda: now[0], heartbeat=heartbeat)
    assert checkpoints[:-1] == written  # then the final one, at the stop
    assert checkpoints[-1] == pytest.approx(stop_at, abs=0.5)


def test_an_idle_collector_drains_less_often_and_activity_brings_it_back(tmp_path, binary):
    """Drains with nothing but a stray record each let the next wait twice
    as long, up to quiet_interval; a busy drain goes back to 0.5 s."""
    now = [1000.0]
    busy = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
            _mmap(binary, 2)] + [_sample(100 + i, BASE + 0x10) for i in range(8)]
    source = _Waits([[]] * 6 + [busy] + [[]] * 2, now)
    _run_waits(tmp_path, source, now, waits=9, quiet_interval=5.0)
    assert source.waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 0.5, 1.0]


class _BellWaits(_Waits):
    """A source with a doorbell: notes each switch."""

    def __init__(self, batches, now, has_bell: bool):
        super().__init__(batches, now)
        self.has_bell, self.bells = has_bell, []

    def doorbell(self, on: bool) -> bool:
        self.bells.append(on)
        return on and self.has_bell


@pytest.mark.parametrize("has_bell", [True, False])
def test_an_idle_collector_waits_longer_only_with_a_doorbell(tmp_path, binary, has_bell):
    """With the doorbell on (a task starting wakes it) the quiet wait grows to
    quiet_interval; without one it stops at 5 s. Activity turns it off."""
    now = [1000.0]
    busy = [synth.encode_comm(LAYOUT, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
            _mmap(binary, 2)]
    source = _BellWaits([[]] * 8 + [busy] + [[]], now, has_bell)
    _run_waits(tmp_path, source, now, waits=11, quiet_interval=30.0)
    if has_bell:
        assert source.waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 0.5, 1.0]
        assert source.bells == [True] * 8 + [False, True, True]
    else:
        assert source.waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 0.5, 1.0]
        assert False not in source.bells  # never on, never turned off
