"""Samples that come after their task's EXIT record: kernels since 6.x
write EXIT before a task's last work (the unmapping of its memory), whose
samples follow it. They belong to the task, not to an "unknown" stub."""

from __future__ import annotations

from pathlib import Path

from churn import LAYOUT, Churn, ChurnRun

from qtools.daemon import processes as processes_module
from qtools.daemon.decode import synth
from qtools.daemon.decode.records import SampleId, Task
from qtools.qformat import read_info


def _exit(run: ChurnRun, pid: int) -> bytes:
    t = run._tick()
    return synth.encode_task(LAYOUT, Task(False, pid, 1, pid, 1, t, SampleId(pid, pid, t)))


def _sets(run: ChurnRun) -> dict[str, int]:
    """comm -> samples of the newest version of each set."""
    out: dict[str, int] = {}
    for p in Path(run.qdir.path).glob("*.info#*"):
        info = read_info(p)
        out[info.task.comm] = out.get(info.task.comm, 0) + (info.task.samples or 0)
    return out


def test_samples_after_exit_stay_with_their_process(tmp_path):
    run = ChurnRun(tmp_path, Churn(procs=0))
    batch = []
    for pid in (2000, 2001):
        batch += run._begin(pid, "short")
        if pid == 2001:  # one sample before its end too
            batch.append(run._sample(pid, pid, (0x5555_0000_1000,)))
        batch.append(_exit(run, pid))
        batch += [run._sample(pid, pid, (0x5555_0000_1004,)) for _ in range(3)]
    run.round(batch)
    run.close()
    sets = _sets(run)
    assert sets.get("short") == 7 and "unknown" not in sets, sets


def test_ended_processes_are_forgotten_within_two_checkpoints_and_a_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(processes_module, "MAX_LINGERING", 50)
    run = ChurnRun(tmp_path, Churn(procs=0))
    table = run.collector.table
    before = len(table.procs)
    batch = []
    for pid in range(3000, 3200):  # ended, never sampled
        batch += run._begin(pid, "quick")
        batch.append(_exit(run, pid))
    run.feed.push(batch)
    while not run.feed.exhausted:
        run.collector.step()
    assert len(table.procs) <= before + 50  # the bound, before any checkpoint
    run.collector.checkpoint()
    assert len(table.procs) <= before + 50  # they lingered through one checkpoint
    run.collector.checkpoint()
    assert len(table.procs) == before  # and are gone at the next
    run.close()


def test_samples_of_a_released_pid_are_the_exiting_process(tmp_path):
    """The kernel samples a task whose pid was released already with pid -1
    (4294967295 in the record): a process named for it, not "unknown"."""
    run = ChurnRun(tmp_path, Churn(procs=0))
    run.round([run._sample(0xFFFFFFFF, 0xFFFFFFFF, (0x5555_0000_1000,)) for _ in range(5)])
    run.close()
    sets = _sets(run)
    assert sets.get("exiting") == 5 and "unknown" not in sets, sets
