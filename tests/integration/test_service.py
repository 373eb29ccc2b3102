"""Running for weeks: slices, compression, sd_notify, kill -9, a stuck
collector, thousands of short-lived processes, and the systemd unit."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from qtools.qformat import read_hist
from tests.conftest import OWN_SETS, command, q_syscollect, q_syscollect_popen, q_view
from tests.integration.test_collect import _wait_for, check_complete, infos, sets_of

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "q-syscollect.service"


def test_rotation_cuts_closed_compressed_slices(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    load = subprocess.Popen([str(pfan), "12"], preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    try:
        r = q_syscollect("-d", str(q), "--rotate", "2", "--checkpoint", "1", "-t", "7",
                         "--cpus", "0", *OWN_SETS)
    finally:
        load.kill()
        load.wait()
    assert r.returncode == 0, r.stderr
    slices = sorted((i for _n, i in sets_of(q, pfan.name)), key=lambda i: i.task.start_time)
    assert len(slices) >= 3, [n for n, _ in sets_of(q, pfan.name)]
    for a, b in zip(slices, slices[1:]):
        assert a.task.end_time <= b.task.start_time  # one after another
    for info in slices:
        assert info.task.state == "closed"
        raw = (q / info.histogram.file).read_bytes()
        assert raw[:2] == b"\x1f\x8b"  # closed slices are gzip-compressed...
        assert sum(c for _a, c in read_hist(q / info.histogram.file)) > 0  # ...and read back
    versions = {n.split("#")[1] for n, _i in sets_of(q, pfan.name)}
    assert len(versions) == len(slices)  # each slice a new version
    check_complete(q)
    # q-view --since selects the later slices and merges them
    later = slices[1:]
    since = f"@{later[0].task.start_time + 0.01}"
    view = q_view(str(q), "--comm", pfan.name, "--since", since, "--format", "json")
    assert view.returncode == 0, view.stderr
    # every p-fan set of those slices: a slice in which p-fan got fewer than
    # --min-samples (a busy machine) has it folded into the pid-less p-fan-cpu0
    chosen = [i for i in infos(q).values()
              if i.task.comm == pfan.name and i.task.end_time >= later[0].task.start_time + 0.01]
    assert len(chosen) >= len(later)
    expected = sum(sum(c for _a, c in read_hist(q / i.histogram.file)) for i in chosen) * 1e-9
    assert abs(json.loads(view.stdout)["total"] - expected) < 1e-6


def _listener(tmp_path: Path) -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify.sock")
    sock.bind(path)
    sock.settimeout(30)
    return sock, path


def test_sd_notify_ready_watchdog_stopping(perf, tmp_path):
    sock, path = _listener(tmp_path)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="1000000")
    proc = q_syscollect_popen("-d", str(tmp_path / "q"), "-t", "4", env=env)
    messages = []
    try:
        while True:
            messages.append(sock.recv(4096).decode())
            if "STOPPING=1" in messages[-1]:
                break
    finally:
        proc.communicate(timeout=60)
        sock.close()
    assert proc.returncode == 0
    assert "READY=1" in messages[0] and f"MAINPID={proc.pid}" in messages[0]
    assert any(m == "WATCHDOG=1" for m in messages)
    status = [m for m in messages if m.startswith("STATUS=")] + [messages[0]]
    assert any("collecting on" in m for m in status)


def test_kill_9_leaves_nothing_that_trips_a_reader(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    load = subprocess.Popen([str(pfan), "20"])
    proc = q_syscollect_popen("-d", str(q), "--checkpoint", "1", start_new_session=True,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: sets_of(q, pfan.name), 30, proc)
        time.sleep(1.3)
        os.killpg(proc.pid, signal.SIGKILL)  # parent and collectors at once
        proc.wait()
        for info in infos(q).values():  # every .info parses and names files that parse
            if info.histogram:
                list(read_hist(q / info.histogram.file))
        assert sets_of(q, pfan.name)  # at most one checkpoint interval was lost
        r = q_syscollect("-d", str(q), "-t", "1")  # a new run starts cleanly on the remains
        assert r.returncode == 0, r.stderr
        assert not [n for n in os.listdir(q) if n.startswith(".tmp-")]
        check_complete(q)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        load.kill()
        load.wait()


def test_a_stuck_collector_is_killed_and_restarted_and_its_loss_said(perf, tmp_path):
    proc = q_syscollect_popen("-d", str(tmp_path / "q"), "--stuck-after", "2")
    try:
        _wait_for(lambda: len(_collectors(proc)) == len(os.sched_getaffinity(0)), 30, proc)
        time.sleep(1)
        victim = _collectors(proc)[0]
        victim.suspend()  # SIGSTOP: alive, but no longer reporting
        _wait_for(lambda: not victim.is_running() or victim.status() == psutil.STATUS_ZOMBIE,
                  30, proc)
        _wait_for(lambda: len(_collectors(proc)) == len(os.sched_getaffinity(0)), 30, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert f"(pid {victim.pid}) has not reported for 2 s; killing it" in err
    assert f"(pid {victim.pid}) died (signal 9); restarting it" in err
    assert proc.returncode == 3, err  # what it had not written is lost: EXIT_LOST
    assert "died (signal 9) and was restarted, losing what it had collected since its " \
        "last checkpoint" in err.splitlines()[-1], err


def _settled_rss(proc: subprocess.Popen) -> int:
    """The collectors' memory once they have caught up with a burst: on a
    loaded machine they may still hold a backlog of its processes (each
    one's task state until the next checkpoint folds it) seconds after it
    ended, and that is not memory the burst left behind. Caught up: a
    checkpoint interval (1 s) in which they used under 0.1 s of CPU each."""
    def cpu() -> float:
        return sum(sum(c.cpu_times()[:2]) for c in _collectors(proc))
    time.sleep(2.5)
    for _ in range(60):
        before = cpu()
        time.sleep(1.0)
        if cpu() - before < 0.1 * len(_collectors(proc)):
            break
    return sum(c.memory_info().rss for c in _collectors(proc))


def _collectors(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return [c for c in psutil.Process(proc.pid).children()
                if c.status() != psutil.STATUS_ZOMBIE and c.name() == "q-syscollect"]
    except psutil.NoSuchProcess:
        return []


def test_thousands_of_short_lived_processes_keep_memory_and_files_bounded(perf, tmp_path):
    # Only the bursts' process tree is collected (-i): system-wide, whatever
    # else runs on the machine meanwhile (builds, other tests) would grow
    # the collectors' memory with sets of its own, and the check would
    # measure the machine, not the churn.
    q = tmp_path / "q"
    # /bin/true runs for less than a sampling period: of 4,000, a few are
    # sampled, and now and then none; 20 of seq's 2 ms runs are sampled
    # about 20 times (none: a chance of e^-20).
    burst = ("i=0; while [ $i -lt 2000 ]; do /bin/true; i=$((i+1)); done; "
             "i=0; while [ $i -lt 20 ]; do seq 200000 >/dev/null; i=$((i+1)); done")
    mark = {name: tmp_path / name for name in ("one-done", "go-on", "two-done", "finish")}
    script = (f"{burst}; touch {mark['one-done']}; "
              f"while [ ! -e {mark['go-on']} ]; do sleep 0.1; done; "
              f"{burst}; touch {mark['two-done']}; "
              f"while [ ! -e {mark['finish']} ]; do sleep 0.1; done")
    proc = q_syscollect_popen("-d", str(q), "--checkpoint", "1", "-i", "--", "sh", "-c", script,
                              stderr=subprocess.DEVNULL)
    try:
        # The first burst warms up what any churn needs once (the aggregate
        # sets, the allocator's arenas, caches of the objects every process
        # maps); the second must then cost next to nothing more: memory that
        # grew per process would grow by as much again.
        _wait_for(lambda: mark["one-done"].exists(), 120, proc)
        rss_before = _settled_rss(proc)
        mark["go-on"].touch()
        _wait_for(lambda: mark["two-done"].exists(), 120, proc)
        rss_after = _settled_rss(proc)
        mark["finish"].touch()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    assert proc.returncode == 0
    assert rss_after - rss_before < 16 << 20, (rss_before, rss_after)
    # The bursts' 4,040 tasks left at most one set per CPU and program, none
    # of them a set of its own. (Followed with -i, each task's clock starts
    # at its birth, so only those that ran a whole period were sampled.)
    sets = infos(q)
    for comm in ("true", "seq"):
        short = [i for i in sets.values() if i.task.comm == comm]
        assert len(short) <= len(os.sched_getaffinity(0)), (comm, len(short))
        assert all(i.task.pid is None and i.task.pids for i in short)  # aggregates
    assert any(i.task.comm == "seq" for i in sets.values()), list(sets)
    check_complete(q)


def debian_tool(name: str, package: str) -> str:
    """The command ``name``, installed from Debian's ``package`` when missing
    (as root, where apt-get is); the test fails, saying so, without it."""
    tool = shutil.which(name)
    if tool is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", package], check=False,
                       capture_output=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        tool = shutil.which(name)
    if tool is None:
        pytest.fail(f"{name} is needed (Debian package {package}) and could not be installed")
    return tool


def _systemd_analyze() -> str:
    return debian_tool("systemd-analyze", "systemd")


def test_the_unit_verifies(tmp_path):
    tool = _systemd_analyze()
    text = UNIT.read_text()
    script = command("q-syscollect")
    unit = tmp_path / "q-syscollect.service"
    unit.write_text(text.replace("/usr/local/bin/q-syscollect", script))
    r = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.strip() == "", r.stderr  # warnings count as failure
    known = set(re.findall(r"^(cap_\w+)", subprocess.run(
        [tool, "capability"], capture_output=True, text=True).stdout, re.M))
    caps = re.search(r"^CapabilityBoundingSet=(.*)$", text, re.M)[1].split()
    assert {c.lower() for c in caps} <= known, caps
    assert set(caps) >= {"CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_SYSLOG", "CAP_DAC_READ_SEARCH"}
    for line in ("Type=notify", "StateDirectory=q-tools", "Restart=on-failure",
                 "ProtectSystem=strict", "ReadWritePaths=/var/lib/q-tools", "KillMode=mixed"):
        assert re.search(rf"^{re.escape(line)}$", text, re.M), line
    assert re.search(r"^WatchdogSec=\S+", text, re.M) and re.search(r"^TimeoutStopSec=", text, re.M)
    exec_start = re.search(r"^ExecStart=(.*)$", text, re.M)[1].split()
    rate = int(exec_start[exec_start.index("-c") + 1])
    assert 90 <= rate <= 110 and all(rate % d for d in range(2, rate))  # a prime near 100
    assert "/var/lib/q-tools" in exec_start
    # an hour's sets stop growing with rare stacks (README: Running for weeks)
    assert 0 < float(exec_start[exec_start.index("--min-stack-share") + 1]) <= 0.01


def _remove_while_written(path: Path) -> None:
    """``rm -r`` of a directory the collectors still write in: a file made
    between its listing and its removal leaves it not empty; again then."""
    deadline = time.monotonic() + 10
    while True:
        try:
            shutil.rmtree(path)
            return
        except OSError as e:
            if e.errno != errno.ENOTEMPTY or time.monotonic() > deadline:
                raise


def test_a_removed_output_directory_stops_the_run(perf, tmp_path):
    q = tmp_path / "q"
    proc = q_syscollect_popen("-d", str(q))
    try:
        _wait_for(lambda: len(_collectors(proc)) == len(os.sched_getaffinity(0)), 30, proc)
        _remove_while_written(q)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3  # data was lost: EXIT_LOST
    assert f"the output directory {q} was removed; stopping" in err
    last = err.splitlines()[-1]
    assert last.startswith("q-syscollect: lost data: ") and f"{q} was removed" in last
    assert "Traceback" not in err
