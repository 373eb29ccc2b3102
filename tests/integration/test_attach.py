"""q-syscollect -p: processes that already run, profiled where they are,
through the installed command on this machine's perf_events."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import OWN_SETS, q_syscollect, q_syscollect_popen, q_view
from tests.integration.test_collect import _runtime_for, check_complete, infos
from tests.integration.test_view_e2e import of_user_samples, view_shares
from tests.sampling import SIGMAS, false_failure_rate, share_disagreements, sigma_bound

THREADS = 3
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _threads_of(pid: int) -> set[int]:
    try:
        return {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    except FileNotFoundError:
        return set()


def _started(proc: subprocess.Popen, threads: int = 1) -> set[int]:
    """Wait until ``proc`` runs ``threads`` threads; their ids."""
    end = time.monotonic() + 60
    while len(_threads_of(proc.pid)) < threads:
        assert proc.poll() is None and time.monotonic() < end, proc.returncode
        time.sleep(0.02)
    return _threads_of(proc.pid)


def _said(proc: subprocess.Popen, words: str, timeout: float = 120) -> str:
    """Read ``proc``'s stderr until a line with ``words``; what it said."""
    said = ""
    end = time.monotonic() + timeout
    while words not in said:
        assert time.monotonic() < end and proc.poll() is None, said
        if select.select([proc.stderr], [], [], 1)[0]:
            said += proc.stderr.readline()
    return said


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _thread_seconds(q: Path) -> dict[str, float]:
    """q-view --by thread: each thread's seconds, by its frame name."""
    r = q_view(str(q), "--by", "thread", "--format", "json")
    assert r.returncode == 0, r.stderr
    return {f["name"]: f["inclusive"] for f in json.loads(r.stdout)["functions"]
            if f["object"] == "[thread]"}


def test_a_running_process_is_profiled_with_all_its_threads(perf, build, tmp_path):
    """t-fan runs p-fan's loop in three threads, started before the attach.
    Its sets (and only its: nothing else on the machine) hold samples of
    each thread, its functions are named, and each user function's share
    is the one an -i run of the same program gets.

    n1, n2 = q:samples of each run's sets (1,000-6,000 in 3 s on this
    2-CPU machine under load). sigma of the difference of a share p is
    sqrt(p(1-p)(1/n1 + 1/n2)): 2.6 pp for p = 30% (libm's tan) at 1,000
    each; tolerance 4.5 sigma, at least 1 pp. About 5 shares (libm's four
    functions at 17-31%, p_fan_main) are large enough for sigma to set the
    tolerance: a false failure about 5 x 6.8e-6 = 3e-5 per run. The two
    collections run at the same time: a machine loaded by other work shifts
    where a clock's samples land (more of them right after a preemption),
    and two runs seconds apart can meet different loads."""
    tfan = build("t-fan")
    q, q_i = tmp_path / "q", tmp_path / "q-i"
    load = subprocess.Popen([str(tfan), "0", str(THREADS)])
    launched = None
    try:
        tids = _started(load, THREADS)
        launched = q_syscollect_popen("-d", str(q_i), "-i", *OWN_SETS, "--", str(tfan), "3",
                                      str(THREADS))
        r = q_syscollect("-d", str(q), "-p", str(load.pid), "-t", "3", *OWN_SETS)
        assert r.returncode == 0, r.stderr
        assert f"sampling pid {load.pid} and its threads on " in r.stderr
        assert load.poll() is None  # q-syscollect let it be
        _out, err = launched.communicate(timeout=120)
        assert launched.returncode == 0, err
    finally:
        _stop(load)
        if launched is not None and launched.poll() is None:
            launched.kill()
    sets = infos(q)
    assert sets and {i.task.pid for i in sets.values()} == {load.pid}, sorted(sets)
    threads = _thread_seconds(q)
    assert {f"{tfan.name} [tid {tid}]" for tid in tids} <= set(threads), threads
    assert all(seconds > 0 for seconds in threads.values()), threads
    check_complete(q)

    ours, n_ours = of_user_samples(*view_shares(q, tfan.name, "self"))
    theirs, n_theirs = of_user_samples(*view_shares(q_i, tfan.name, "self"))
    assert {"p_fan_main", "f06", "f07", "f08", "f09"} <= set(ours), sorted(ours)
    names = set(ours) | set(theirs)
    bad = share_disagreements(ours, n_ours, theirs, n_theirs, names)
    m = sigma_bound([max(ours.get(k, 0), theirs.get(k, 0)) for k in names], n_ours, n_theirs)
    assert not bad, (f"{len(bad)} of {len(names)} user self shares of -p and -i disagree "
                     f"({m} compared at {SIGMAS} sigma, false-failure rate "
                     f"{m * false_failure_rate():.1e}):\n" + "\n".join(bad))


def test_the_run_ends_when_the_process_exits(perf, build, tmp_path):
    """No -t: the run ends by itself once the process it attached to has
    exited (the subprocess timeout only guards against a hang), with its
    sets written."""
    tfan = build("t-fan")
    q = tmp_path / "q"
    load = subprocess.Popen([str(tfan), "0", "2"])
    proc = None
    try:
        _started(load, 2)
        proc = q_syscollect_popen("-d", str(q), "-p", str(load.pid), *OWN_SETS)
        _said(proc, "until it exits")
        time.sleep(1)  # some samples
        load.kill()  # not reaped yet: a zombie has ended too
        out, err = proc.communicate(timeout=120)
    finally:
        _stop(load)
        if proc is not None:
            _stop(proc)
    assert proc.returncode == 0, err
    assert err.splitlines()[-1].startswith("q-syscollect: captured "), err
    assert {i.task.pid for i in infos(q).values()} == {load.pid}
    check_complete(q)


@pytest.mark.parametrize("children", [False, True])
def test_children_started_after_the_attach_are_followed_with_children(perf, build, tmp_path,
                                                                       children):
    """A shell, attached to, starts t-fan only once q-syscollect has said it
    samples: with --children t-fan's sets are there, without them they are
    not (its threads are followed, the processes it starts are not)."""
    tfan = build("t-fan")
    q, go = tmp_path / "q", tmp_path / "go"
    shell = subprocess.Popen(["sh", "-c", f'while [ ! -e "{go}" ]; do sleep 0.05; done; '
                                          f'"{tfan}" 1 2; echo done'], stdout=subprocess.PIPE)
    proc = None
    try:
        _started(shell)
        proc = q_syscollect_popen("-d", str(q), "-p", str(shell.pid), *OWN_SETS,
                                  *(["--children"] if children else []))
        _said(proc, "until it exits")
        go.touch()
        out, err = proc.communicate(timeout=120)
        assert shell.communicate(timeout=60)[0] == b"done\n"  # t-fan ran its second
    finally:
        _stop(shell)
        if proc is not None:
            _stop(proc)
    assert proc.returncode == 0, err
    tfan_sets = [i for i in infos(q).values() if i.task.comm == tfan.name]
    if children:
        assert tfan_sets and all(i.task.pid not in (0, shell.pid) for i in tfan_sets)
        assert sum(i.task.samples for i in tfan_sets) > 0
    else:
        assert not tfan_sets, [i.task.comm for i in infos(q).values()]
        assert {i.task.pid for i in infos(q).values()} <= {shell.pid}


def test_a_process_that_is_not_there_is_one_line_and_no_q(perf, tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names nothing (unless reused at once)
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "-p", str(gone.pid), "-t", "1")
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"q-syscollect: -p {gone.pid}: no such process\n"
    assert not q.exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to act as another user")
def test_an_unprivileged_user_attaches_to_its_own_process_only(perf, build, request):
    """As nobody: its own t-fan is profiled (user space only where
    kernel.perf_event_paranoid is 2); root's process is refused in one
    line that says why, and nothing is written."""
    paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    work = Path(tempfile.mkdtemp(prefix="qtools-nobody-"))  # pytest's tmp is root-only
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    tfan = work / "t-fan"
    tfan.write_bytes(build("t-fan").read_bytes())
    tfan.chmod(0o755)
    os.chown(work, 65534, 65534)
    os.chmod(work, 0o755)
    env = dict(os.environ, HOME=str(work), PYTHONPATH=str(_runtime_for(work / "lib")))
    base = [*AS_NOBODY, os.path.realpath(sys.executable), "-m", "qtools.daemon.cli"]
    theirs = subprocess.Popen([*AS_NOBODY, str(tfan), "0", "2"])
    roots = subprocess.Popen(["sleep", "120"])
    try:
        _started(theirs, 2)
        _started(roots)
        r = subprocess.run([*base, "-d", str(work / "q"), "-p", str(theirs.pid), "-t", "2",
                            *OWN_SETS], cwd=work, capture_output=True, text=True, env=env,
                           timeout=120)
        refused = subprocess.run([*base, "-d", str(work / "q-root"), "-p", str(roots.pid),
                                  "-t", "2"], cwd=work, capture_output=True, text=True, env=env,
                                 timeout=120)
    finally:
        _stop(theirs)
        _stop(roots)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith(f"q-syscollect: cannot profile process {roots.pid} "
                                     "(sleep): it runs as uid 0, not as you (uid 65534)")
    assert not (work / "q-root").exists()
    if paranoid > 2:  # no unprivileged perf_events at all here: said so
        assert r.returncode == 1 and "perf_event_paranoid" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    sets = infos(work / "q")
    assert sets and {i.task.pid for i in sets.values()} == {theirs.pid}
    assert sum(i.task.samples for i in sets.values()) > 0
    check_complete(work / "q")
