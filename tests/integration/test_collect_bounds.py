"""Real runs and what they must not write or delete: no set without samples
(but the CPU-statistics sets), and a wall clock that moves, before the run
or during it, deletes nothing and reverses no set's times."""

from __future__ import annotations

import os
import re
import time

from qtools.qformat import (Histogram, Info, QDir, QFormatError, SetName, TaskInfo, dump_info,
                            hist_lines, read_info)
from tests.conftest import q_syscollect, q_syscollect_popen
from tests.integration.test_collect import check_complete, infos

def _check_sets(q) -> dict:
    found = infos(q)
    assert found, os.listdir(q)
    for name, info in found.items():
        t = info.task
        if not t.samples:
            # only a kernel-cpuN set carrying its CPU's statistics is written without samples
            assert t.purpose == "cpu-stats" and name.startswith("kernel-cpu"), name
            assert t.cpu_stats, name
        else:
            assert t.purpose is None, name
        assert t.end_time >= t.start_time, name
    check_complete(q)  # and every .stack adds up to its .hist
    return found


def test_a_real_run_writes_no_set_without_samples(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--checkpoint", "1", "--", str(pfan), "2")
    assert r.returncode == 0, r.stderr
    found = _check_sets(q)
    assert any(i.task.comm == pfan.name and i.task.samples for i in found.values())


def _old_set(q: QDir, prog: str, end: float) -> str:
    name = SetName(prog, 0, 1)
    info = Info(task=TaskInfo(comm=prog, pid=1, cpu=0, start_time=end - 60, end_time=end,
                              samples=3, state="closed"))
    info.histogram = Histogram(name.file("hist", 0))
    q.atomic_write(info.histogram.file, hist_lines({0x1000: 3}))
    q.atomic_write(name.file("info", 0), dump_info(info).encode())
    return name.file("info", 0)


def test_an_earlier_runs_sets_age_by_their_record_and_the_future_is_kept(perf, tmp_path):
    q = tmp_path / "q"
    now = time.time()
    with QDir.open(q, create=True) as qdir:
        past = _old_set(qdir, "past", now - 30 * 86400)
        future = _old_set(qdir, "future", now + 30 * 86400)  # a clock that was ahead
    r = q_syscollect("-d", str(q), "--checkpoint", "1", "--max-age", "1d", "-t", "7",
                     "--cpus", "0")
    assert r.returncode == 0, r.stderr
    names = set(os.listdir(q))
    assert past not in names  # a month old by its record: gone at the first round
    assert future in names
    _check_sets(q)


def _wait_for(q, test, timeout: float = 60.0) -> set[str]:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        names = {n for n in os.listdir(q) if ".info#" in n} if q.is_dir() else set()
        if test(names):
            return names
        time.sleep(0.2)
    return set()


def _closed(path) -> bool:
    try:
        return read_info(path).task.state == "closed"
    except QFormatError:
        return False


def test_a_wall_clock_stepped_during_the_run_deletes_nothing(perf, build, tmp_path):
    """The issue's run: the clock stepped forward, and retention deleted the
    sets, start times came after end times and sets were left open. The
    wall clock moves here for q-syscollect alone, through a preloaded
    library (tests/workloads/clockshift.c), as clock_settime would move it
    for the whole machine."""
    shim = build("clockshift", "-shared", "-fPIC")
    pfan = build("p-fan")
    q = tmp_path / "q"
    shift = tmp_path / "shift"
    shift.write_text("0\n")
    env = dict(os.environ, LD_PRELOAD=str(shim), CLOCKSHIFT_FILE=str(shift))
    # A short task whose set is closed before the step and never written
    # again, then a long one through the step. No --rotate: the long task's
    # set is open at the step, and must not look abandoned (stale) after it.
    script = f"{pfan} 1; {pfan} 12"
    run = q_syscollect_popen("-d", str(q), "--checkpoint", "1", "--max-age", "1h",
                             "--min-samples", "1", "--compress", "-i", "--",
                             "sh", "-c", script, env=env)
    try:
        def ready(names: set[str]) -> bool:
            """Every set of the short task closed (it may have one per CPU:
            their final writes land apart), one set of the long task open."""
            states: dict[str, set[bool]] = {}
            for n in names:
                pid = re.search(r"-pid(\d+)-", n)
                if n.startswith(pfan.name) and pid:
                    states.setdefault(pid.group(1), set()).add(_closed(q / n))
            return {True} in states.values() and any(False in s for s in states.values())
        before = _wait_for(q, ready)
        assert before, run.stderr
        mine = [n for n in before if n.startswith(pfan.name)]
        closed = [n for n in mine if _closed(q / n)]
        shift.write_text(f"{30 * 86400}\n")  # a month forward
        time.sleep(7)  # upkeep runs every 5 s: at least one round after the step
        during = {n for n in os.listdir(q) if ".info#" in n}
        _out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    assert before <= during  # nothing the run wrote before the step was deleted
    assert before <= set(os.listdir(q))
    found = _check_sets(q)
    assert all(found[n].task.clock_step is None for n in closed)  # ended before the step
    short = {found[n].task.pid for n in closed}
    through = [found[n] for n in mine if found[n].task.pid not in short]  # the long task
    assert through
    for info in through:
        assert info.task.clock_step is not None, info.task
        assert abs(info.task.clock_step - 30 * 86400) < 60  # noted where it happened
        assert info.task.end_time >= info.task.start_time
    assert all(i.task.state == "closed" for i in found.values())  # none left open
