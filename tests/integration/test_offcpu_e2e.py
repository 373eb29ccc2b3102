"""q-syscollect --off-cpu and q-view --metric and --by thread on workloads with
known answers (tests/workloads/offcpu.c), through the installed commands.

Off-CPU and wait times are measured from the scheduler's time stamps, not
sampled: their only error is what the workload itself does around its
sleeps (a few microseconds of timer slack per sleep). CPU time is sampled
(997 Hz of cpu-clock): its error is about one period per square root of
the samples, and each bound below adds 4 sigma of it to a floor of 3% of
the thread's elapsed time (start-up, and the microseconds between a
thread's start and its first time stamp).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import command, q_syscollect, q_syscollect_popen, q_view

PERIOD = 1 / 997  # seconds of CPU per cpu-clock sample
SECS = 3


def _threads_of(stdout: str) -> dict[str, tuple[int, float]]:
    """name -> (tid, elapsed seconds), as the workload printed them."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "thread":
            out[parts[2]] = (int(parts[1]), float(parts[3]))
    return out


def per_thread(q: Path, comm: str, event: str, *more: str) -> dict[int, float]:
    """tid -> seconds of ``event``, from q-view's collapsed stacks by thread."""
    r = q_view("-d", str(q), "--comm", comm, "--metric", event, "--by", "thread",
               "--format", "collapsed", *more)
    assert r.returncode == 0, r.stderr
    out: dict[int, float] = {}
    for line in r.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        thread = stack.split(";")[1]  # PROCESS;NAME [tid N];frames...
        tid = int(thread.rpartition("[tid ")[2].rstrip("]"))
        out[tid] = out.get(tid, 0.0) + int(count) * 1e-9
    return out


def by_function(q: Path, comm: str, event: str, function: str) -> float:
    """Seconds of ``event`` whose stacks pass through ``function``."""
    r = q_view("-d", str(q), "--comm", comm, "--metric", event, "--format", "collapsed")
    assert r.returncode == 0, r.stderr
    return sum(int(line.rpartition(" ")[2]) * 1e-9 for line in r.stdout.splitlines()
               if function in line.rpartition(" ")[0].split(";"))


def metrics(q: Path, comm: str) -> dict[str, dict[int, float]]:
    return {e: per_thread(q, comm, e) for e in ("cpu", "off-cpu", "cpu-wait", "wall")}


def bound(elapsed: float, cpu: float) -> float:
    """What a thread's seconds may miss its elapsed time by (module docstring)."""
    return 0.03 * elapsed + 4 * math.sqrt(max(cpu, PERIOD) / PERIOD) * PERIOD


def check_adds_up(m: dict[str, dict[int, float]], tid: int, elapsed: float) -> None:
    cpu, off, wait = (m[e].get(tid, 0.0) for e in ("cpu", "off-cpu", "cpu-wait"))
    assert math.isclose(m["wall"].get(tid, 0.0), cpu + off + wait, rel_tol=1e-6, abs_tol=1e-6)
    assert abs(cpu + off + wait - elapsed) <= bound(elapsed, cpu), (cpu, off, wait, elapsed)


def collect(build, tmp_path: Path, mode: str, *options: str) -> tuple[Path, str, dict]:
    exe = build("offcpu", "-fno-optimize-sibling-calls")
    q = tmp_path / "q"
    r = q_syscollect("-q", "--off-cpu", "-d", str(q), *options, "--", str(exe), mode,
                     str(SECS), timeout=120)
    assert r.returncode == 0, r.stderr
    return q, exe.name, _threads_of(r.stdout)


def test_sleeps_split_by_function(perf, build, tmp_path):
    """nap_long sleeps 30 ms where nap_short sleeps 10: three quarters of
    the off-CPU time is under nap_long (the timer slack of both, some 50 us
    a sleep, moves the share by less than 0.001); the 3% bound is far above
    that and far below the next wrong answer (a half)."""
    q, comm, threads = collect(build, tmp_path, "sleeps")
    tid, elapsed = threads["sleeps"]
    long_, short = (by_function(q, comm, "off-cpu", f) for f in ("nap_long", "nap_short"))
    m = metrics(q, comm)
    check_adds_up(m, tid, elapsed)
    # every blocked moment is in a nap (the time spent waiting for a CPU
    # after each, which grows with the machine's load, is cpu-wait, not this)
    assert long_ + short > 0.99 * m["off-cpu"][tid] > 0.5 * elapsed, (long_, short, m)
    assert abs(long_ / (long_ + short) - 0.75) < 0.03, (long_, short)
    # the call graph of several metrics: the same 1:3 along the calls into
    # the two naps, and each nap's time passed on to what it calls (the sleep)
    r = q_view("-d", str(q), "--comm", comm, "--metric", "off-cpu,cpu", "-g",
               "--format", "json")
    assert r.returncode == 0, r.stderr
    arcs = json.loads(r.stdout)["arcs"]

    def along(end: str, function: str) -> float:
        return sum(a["off-cpu"]["inclusive"] for a in arcs
                   if a[end] == function and "off-cpu" in a)
    into_long, into_short = along("callee", "nap_long"), along("callee", "nap_short")
    assert abs(into_long / (into_long + into_short) - 0.75) < 0.03, (into_long, into_short)
    assert math.isclose(into_long, long_, rel_tol=1e-6)
    assert math.isclose(along("caller", "nap_long"), long_, rel_tol=1e-6)
    # the overview's JSON: the process's off-CPU seconds as the collector
    # counted them (q:off-cpu-seconds, rounded to the microsecond per set)
    r = q_view(str(q), "--overview", "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = [s["stats"] for s in json.loads(r.stdout)["sets"] if s["command"] == comm]
    for key, event in (("off-cpu-seconds", "off-cpu"), ("cpu-wait-seconds", "cpu-wait")):
        shown = sum(stats[key] for stats in rows)  # the process, and any aggregate of comm
        assert abs(shown - sum(m[event].values())) < 1e-5 * (len(rows) + 1) * 4, (key, rows)


def test_reader_blocked_on_a_pipe(perf, build, tmp_path):
    """The reader is blocked in read_loop all the time but the microseconds
    it takes a byte; the writer sleeps 20 ms in write_loop between bytes."""
    q, comm, threads = collect(build, tmp_path, "pipe")
    m = metrics(q, comm)
    reader, r_elapsed = threads["reader"]
    writer, w_elapsed = threads["writer"]
    # blocked all the time but the moments each waits for a CPU once woken
    # (more of them on a loaded machine): those are cpu-wait
    wait = m["cpu-wait"]
    assert m["off-cpu"][reader] + wait.get(reader, 0.0) > 0.95 * r_elapsed
    assert m["off-cpu"][writer] + wait.get(writer, 0.0) > 0.9 * w_elapsed
    assert m["off-cpu"][reader] > 0.5 * r_elapsed and m["off-cpu"][writer] > 0.5 * w_elapsed
    assert by_function(q, comm, "off-cpu", "read_loop") > 0.99 * m["off-cpu"][reader]
    check_adds_up(m, reader, r_elapsed)
    check_adds_up(m, writer, w_elapsed)
    names = q_view("-d", str(q), "--comm", comm, "--metric", "off-cpu", "--by", "thread",
                   "--format", "json")
    assert names.returncode == 0, names.stderr
    assert f'"reader [tid {reader}]"' in names.stdout
    assert f'"writer [tid {writer}]"' in names.stdout
    side = q_view("-d", str(q), "--comm", comm, "--metric", "off-cpu,cpu,cpu-wait,wall",
                  "--format", "json")
    assert side.returncode == 0, side.stderr
    data = json.loads(side.stdout)
    totals = {m["event"]: m["total"] for m in data["metrics"]}
    assert math.isclose(totals["wall"], totals["cpu"] + totals["off-cpu"] + totals["cpu-wait"],
                        rel_tol=1e-6)
    read = next(f for f in data["functions"] if f["name"] == "read_loop")
    assert read["off-cpu"]["inclusive"] > 0.99 * m["off-cpu"][reader]
    assert read["wall"]["inclusive"] >= read["off-cpu"]["inclusive"]


def test_two_threads_pinned_to_one_cpu_wait_half_the_time(perf, build, tmp_path):
    """Both spinners are pinned to CPU 0 and never block: whenever one runs
    the other waits for the CPU, so each waits at least about half of its
    time (more where other tasks, this run's own collector among them, take
    CPU 0 too: each then gets a third or less), is never off-CPU, and the
    two get the same share. Bounds: 0.1 of the elapsed time below a half
    for the wait; for the difference between the two CPU times, 4 sigma of
    their sampled sum with a floor of 3%."""
    q, comm, threads = collect(build, tmp_path, "pinned")
    m = metrics(q, comm)
    cpus = []
    for name in ("spin-a", "spin-b"):
        tid, elapsed = threads[name]
        assert m["cpu-wait"][tid] > 0.4 * elapsed, (name, m["cpu-wait"][tid])
        assert m["off-cpu"].get(tid, 0.0) < 0.02 * elapsed
        check_adds_up(m, tid, elapsed)
        cpus.append(m["cpu"][tid])
    assert abs(cpus[0] - cpus[1]) <= bound(elapsed, sum(cpus)), cpus
    r = q_view("-d", str(q), "--comm", comm, "--metric", "cpu-wait", "--format", "json")
    assert '"event": "cpu-wait"' in r.stdout and '"unit": "seconds"' in r.stdout


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs")
def test_sleeps_on_one_cpu_and_wakes_on_another(perf, build, tmp_path):
    """The hopper's affinity flips between CPUs 0 and 1 every 7 ms while it
    sleeps 20 ms at a time: it leaves one CPU and comes back on the other,
    and its sleeps are still whole."""
    q, comm, threads = collect(build, tmp_path, "hop")
    tid, elapsed = threads["hopper"]
    m = metrics(q, comm)
    assert m["off-cpu"][tid] > 0.85 * elapsed
    check_adds_up(m, tid, elapsed)
    on = [per_thread(q, comm, "off-cpu", "--cpu", str(c)).get(tid, 0.0) for c in (0, 1)]
    assert min(on) > 0.1 * elapsed, on  # it switched out on both CPUs


def test_checkpoint_while_off_cpu(perf, build, tmp_path):
    """A thread asleep in one nanosleep across checkpoints: each checkpoint
    counts it up to there (the open set shows it while it still sleeps),
    and the whole sleep is counted once."""
    exe = build("offcpu", "-fno-optimize-sibling-calls")
    q = tmp_path / "q"
    p = q_syscollect_popen("-q", "--off-cpu", "--checkpoint", "1", "-d", str(q), "--",
                           str(exe), "long", "5")
    try:
        seen = 0.0
        deadline = time.monotonic() + 30
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if any(q.glob(f"{exe.name}*.threads#*")):
                seen = max(seen, max(per_thread(q, exe.name, "off-cpu").values(), default=0.0))
                if seen > 1.5:
                    break
        assert p.poll() is None and seen > 1.5, "the open set did not show the sleep so far"
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    tid, elapsed = _threads_of(out)["dozer"]
    m = metrics(q, exe.name)
    assert abs(m["off-cpu"][tid] - elapsed) < 0.03 * elapsed
    check_adds_up(m, tid, elapsed)


def _profiling(p: subprocess.Popen, log: Path) -> None:
    """Wait until every collector of a -v run writing to ``log`` says it
    is profiling (its events are enabled)."""
    cpus = len(os.sched_getaffinity(0))
    deadline = time.monotonic() + 60
    while log.read_text().count("profiling on cpu") < cpus:
        assert p.poll() is None, "q-syscollect ended early:\n" + log.read_text()
        assert time.monotonic() < deadline, "q-syscollect did not start:\n" + log.read_text()
        time.sleep(0.05)


def test_killed_while_off_cpu(perf, build, tmp_path):
    """A process killed while its thread sleeps: the sleep counts up to the
    kill, nothing after, and the run ends as usual."""
    exe = build("offcpu", "-fno-optimize-sibling-calls")
    q = tmp_path / "q"
    log = tmp_path / "collector.log"
    with open(log, "w") as said:
        p = q_syscollect_popen("-v", "--off-cpu", "--checkpoint", "1", "-d", str(q), "-t", "8",
                               stderr=said)
    try:
        _profiling(p, log)  # the switch of a thread that sleeps at once is seen
        w = subprocess.Popen([str(exe), "long", "60"], stdout=subprocess.PIPE)
        started = time.monotonic()
        time.sleep(2)
        w.send_signal(signal.SIGKILL)
        w.wait()
        lived = time.monotonic() - started
        p.communicate(timeout=60)
    finally:
        for proc in (p,):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert p.returncode == 0, log.read_text()
    off = per_thread(q, exe.name, "off-cpu", "--pid", str(w.pid))
    dozer = [s for t, s in off.items() if t != w.pid]
    assert len(dozer) == 1, off
    assert 1.5 < dozer[0] <= lived + 0.05, (dozer, lived)


def test_unprivileged_i_run_says_what_it_cannot_split(perf, build, request):
    """As nobody, -i --off-cpu cannot read the scheduler's tracepoints: it
    says so in one line and records the CPU profile, by thread."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become nobody")
    if int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) > 2:
        pytest.skip("perf_event_paranoid > 2: no unprivileged sampling at all")
    work = Path(tempfile.mkdtemp(prefix="qtools-offcpu-nobody-"))
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    exe = work / "offcpu"
    exe.write_bytes(build("offcpu", "-fno-optimize-sibling-calls").read_bytes())
    exe.chmod(0o755)
    os.chown(work, 65534, 65534)
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        command("q-syscollect"), "-i", "--off-cpu", "-d", str(work / "q"),
                        "--", str(exe), "pinned", "1"],
                       cwd=work, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert "--off-cpu:" in r.stderr and "the CPU profile by thread only" in r.stderr
    threads = _threads_of(r.stdout)
    cpu = per_thread(work / "q", exe.name, "cpu")
    assert threads["spin-a"][0] in cpu and threads["spin-b"][0] in cpu
