"""The host seam: processes come to the collector as records synthesized
from a host, and a replayed stream with a made-up host sees nothing of the
machine the test runs on."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from qtools.daemon.kernel import abi

from qtools.daemon.decode import synth

from qtools.daemon.machine import synthesize
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.machine.host import LIVE, HostProcess, StaticHost
from qtools.daemon.sets.objects import ObjectCopier
from qtools.daemon.machine.procfs import MapsLine
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Comm, Mmap, Sample, SampleId, Task
from qtools.daemon.kernel.source import ReplaySource
from qtools.daemon.machine.tasks import TaskTable
from qtools.qformat import QDir, read_info

LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                      | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN)
BASE = 0x5555_0000_0000
LIB = 0x7f00_0000_0000
COUNTERS = {"user-seconds": 1.0, "system-seconds": 0.5, "voluntary-switches": 10,
            "involuntary-switches": 2, "minor-faults": 100, "major-faults": 0}


def _sample(pid: int, t: int, ip: int) -> bytes:
    return synth.encode_sample(LAYOUT, Sample(misc=abi.MISC_USER, ip=ip, pid=pid, tid=pid,
                                              time=t, period=1_000_000,
                                              callchain=(abi.CONTEXT_USER, ip)))


def _mmap(pid: int, path: str, start: int, t: int) -> bytes:
    st = os.stat(path)
    return synth.encode_mmap2(LAYOUT, Mmap(pid, pid, start, 0x10000, 0, path,
                                           os.major(st.st_dev), os.minor(st.st_dev), st.st_ino,
                                           sid=SampleId(pid, pid, t)))


@pytest.mark.parametrize("seeded", [True, False], ids=["seeded", "first-seen-in-a-sample"])
def test_a_replay_of_pids_that_exist_here_sees_only_the_stream_and_the_fake_host(tmp_path,
                                                                                  seeded):
    me = os.getpid()  # exists on this machine, with other comm, maps, cmdline and counters
    app, lib = str(tmp_path / "app"), str(tmp_path / "lib.so")
    shutil.copy(shutil.which("true"), app)
    shutil.copy(shutil.which("true"), lib)
    host = StaticHost({me: HostProcess("fake", thread_names={7: "worker"},
                                       cmdline=("fake", "--flag"), exe="/fake/exe", uid=12345,
                                       counters=COUNTERS)},
                      files={app})  # of the files, only app may be opened
    # pid 1 exists here too; the fake host does not know it: the stream tells
    records = [synth.encode_comm(LAYOUT, Comm(1, 1, "streamed", True, SampleId(1, 1, 1))),
               _mmap(1, app, BASE, 2), _mmap(1, lib, LIB, 3)]
    records += [_sample(1, 10 + i, (BASE if i % 2 else LIB) + 0x100) for i in range(4)]
    records += [_sample(me, 20 + i, BASE + 0x200) for i in range(3)]
    run = RunInfo(["q-syscollect"], "cpu-clock", "seconds", 1e-9, "fp", host.machine())
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c = CpuCollector(Options(cpu=0, min_samples=1), run, ReplaySource(LAYOUT, [records]),
                         qdir, ObjectCopier(qdir, host=host), out=io.StringIO())
        assert c.host is host
        if seeded:
            c.seed()
            assert set(c.table.procs) == {me}  # the host's pids, not /proc's
        while not c.source.exhausted:
            c.step()
        proc = c.table.get(me)
        assert proc.comm == "fake" and len(proc.maps) == 0  # /proc would show python's maps
        assert {t: th.name for t, th in proc.threads.items()} == {me: "fake", 7: "worker"}
        assert proc.uid == 12345 and c.table.get(1).uid is None  # pid 1 is root's here
        assert c.checkpoint()  # promotes the set: its counters are looked at again
        host.procs[me] = HostProcess("fake", counters={**COUNTERS, "user-seconds": 3.5})
        assert c.checkpoint(final=True)
    mine = read_info(qd / f"fake-pid{me}-cpu0.info#0")
    assert mine.task.cmdline == ["fake", "--flag"] and mine.task.exe == "/fake/exe"
    assert mine.task.samples == 3 and mine.objects == []
    assert mine.task.task_stats["q:user-seconds"] == 2.5
    assert mine.task.hostname == "static"
    init = read_info(qd / "streamed-pid1-cpu0.info#0")
    assert init.task.cmdline is None and init.task.exe is None  # nobody told
    assert init.task.task_stats is None  # no counters from the fake host
    copies = {os.path.basename(o.path): o.file for o in init.objects}
    assert copies["lib.so"] is None  # mapped by the stream, not offered by the host
    assert copies["app"] is not None


@pytest.mark.parametrize("min_samples", [1, 100], ids=["own-set", "aggregate"])
def test_counters_looked_at_once_are_unknown_not_zero(tmp_path, min_samples):
    """A process whose counters were read at its first sample and never
    again (it ended and was reaped before a second look) has no
    q:task-stats: they were not measured, which zeros would deny."""
    pid = 4000
    host = StaticHost({pid: HostProcess("brief", counters=COUNTERS)})
    exit_ = synth.encode_task(LAYOUT, Task(False, pid, 1, pid, 1, 50, SampleId(pid, pid, 50)))
    run = RunInfo(["q-syscollect"], "cpu-clock", "seconds", 1e-9, "fp", host.machine())
    qd = tmp_path / "q"
    with QDir.open(qd, create=True) as qdir:
        c = CpuCollector(Options(cpu=0, min_samples=min_samples), run,
                         ReplaySource(LAYOUT, [[_sample(pid, 10 + i, BASE) for i in range(3)],
                                               [exit_]]),
                         qdir, ObjectCopier(qdir, host=host), out=io.StringIO())
        c.step()
        del host.procs[pid]  # reaped: its final counters cannot be read
        c.step()
        assert c.checkpoint(final=True)
    name = f"brief-pid{pid}-cpu0.info#0" if min_samples == 1 else "brief-cpu0.info#0"
    info = read_info(qd / name)
    assert info.task.samples == 3
    assert info.task.task_stats is None
    assert "q:task-stats" not in (qd / name).read_text()


def test_a_process_is_synthesized_as_comm_fork_and_mmap2_records():
    host = StaticHost({50: HostProcess(
        "daemon", (MapsLine(0x400000, 0x401000, "r-xp", 0, 254, 0, 22, "/usr/bin/app", False),
                   MapsLine(0x401000, 0x402000, "rw-p", 0x1000, 254, 0, 22, "/usr/bin/app",
                            False),
                   MapsLine(0x7f0000, 0x7f1000, "r-xs", 0, 0, 5, 9, "/x (gone)", True),
                   MapsLine(0x9f0000, 0x9f1000, "rwxp", 0, 0, 0, 0, "", False)),
        thread_names={51: "worker", 52: "io"})})
    records = synthesize.process(host, 50, 1000)
    comm, *rest = records
    # made up, not read from a ring: the program began at some time before 1000
    assert comm == Comm(50, 50, "daemon", True, SampleId(50, 50, 1000), seen=False)
    threads = [r for r in rest if isinstance(r, Task)]
    names = [r for r in rest if isinstance(r, Comm)]
    assert [(t.fork, t.pid, t.ppid, t.tid) for t in threads] == [(True, 50, 50, 51),
                                                                 (True, 50, 50, 52)]
    assert [(n.tid, n.comm, n.exec) for n in names] == [(51, "worker", False), (52, "io", False)]
    mmaps = [r for r in rest if isinstance(r, Mmap)]
    assert [(m.addr, m.len, m.filename, m.prot, m.flags, m.ino) for m in mmaps] == [
        (0x400000, 0x1000, "/usr/bin/app", 5, 2, 22), (0x7f0000, 0x1000, "/x (gone)", 5, 1, 9),
        (0x9f0000, 0x1000, "//anon", 7, 2, 0)]
    assert all(r.sid.time == 1000 for r in records)
    table = TaskTable()
    for rec in records:
        table.apply(rec)
    proc = table.get(50)
    assert proc.exec_seen and proc.since == 1000 and len(proc.maps) == 3
    assert {t: th.name for t, th in proc.threads.items()} == {50: "daemon", 51: "worker",
                                                              52: "io"}
    assert synthesize.process(host, 60, 1000) == []  # gone: nothing


def test_the_live_host_reads_this_process():
    me = os.getpid()
    assert me in LIVE.pids() and me in LIVE.threads(me)
    assert LIVE.comm(me) == LIVE.comm(me, me)
    records = synthesize.process(LIVE, me, 1)
    assert records[0].comm == LIVE.comm(me)
    exe = os.path.realpath(LIVE.exe(me))
    assert any(isinstance(r, Mmap) and os.path.realpath(r.filename) == exe for r in records)
    import psutil
    before = psutil.Process().cpu_times().user
    counters = LIVE.task_counters(me)
    after = psutil.Process().cpu_times().user
    assert counters is not None and before <= counters["user-seconds"] <= after  # its own


def test_events_are_listed_and_resolved_from_the_host():
    from qtools.daemon.kernel import events

    class Traced(StaticHost):
        def tracefs_root(self) -> str | None:
            return "/sys/kernel/tracing"

        def tracepoints(self) -> list[str]:
            return ["sched:sched_switch"]

        def tracepoint_id(self, name: str) -> int | None:
            return 314 if name == "sched:sched_switch" else None

    lines = events.listing(Traced())
    assert lines[-1] == f"  sched:{'sched_switch':<27} [tracepoint]"
    assert events.resolve("sched:sched_switch", Traced()).config == 314
    assert "tracefs is not mounted" in events.listing(StaticHost())[-1]
    with pytest.raises(events.EventError, match="tracefs is not mounted"):
        events.resolve("sched:sched_switch", StaticHost())
