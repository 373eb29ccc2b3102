"""How q-syscollect starts, talks and ends: its start and summary lines, the
exit status it passes on from the command or sets when data was lost, quiet
ends of closed pipes and clear option errors, and collectors that do not
outlive their supervisor."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import command, q_syscollect, q_syscollect_popen
from tests.integration.test_collect import _wait_for, check_complete, infos

EXIT_LOST = 3  # the status README documents for a run that lost data


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("q-syscollect: ")]


@pytest.mark.parametrize("script,status", [("exit 0", 0), ("exit 7", 7)])
def test_the_command_s_exit_status_is_passed_on(perf, tmp_path, script, status):
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--cpus", "0", "--", "sh", "-c", script)
    assert r.returncode == status, r.stderr
    start, *_, end = _lines(r.stderr)
    assert start.startswith("q-syscollect: sampling 1 CPU with ")
    assert str(q) in start and "until sh exits" in start
    # "wrote 1 set" or "wrote 0 sets": how many sets a very short command leaves varies
    assert re.fullmatch(r"q-syscollect: captured \d+ samples? \(\d+ lost\) in [\d.]+ s; "
                        r"wrote \d+ sets?, \.q now [\d.]+ [kMG]?B.*", end), end
    assert "Traceback" not in r.stderr


def test_a_command_killed_by_a_signal_kills_q_syscollect_the_same_way(perf, tmp_path):
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--cpus", "0", "--", "sh", "-c", "kill -TERM $$")
    assert r.returncode == -signal.SIGTERM, r.stderr  # it died of SIGTERM itself
    assert _lines(r.stderr)[-1].startswith("q-syscollect: captured ")
    # and a shell sees 128+N, as for the command alone
    shell = subprocess.run(["sh", "-c", '"$@"; echo "status $?"', "sh", command("q-syscollect"),
                            "-q", "-d", str(q), "--cpus", "0", "--", "sh", "-c", "kill -TERM $$"],
                           capture_output=True, text=True, timeout=120)
    assert shell.stdout.strip().endswith(f"status {128 + signal.SIGTERM}"), shell.stderr
    check_complete(q)


def test_start_and_summary_lines_and_minus_q(perf, tmp_path):
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "-k", "-t", "0.5")
    assert r.returncode == 0, r.stderr
    start, end = _lines(r.stderr)
    cpus = len(os.sched_getaffinity(0))
    assert f"sampling {cpus} CPU" in start and " Hz, kernel only" in start
    assert start.endswith(f"into {q}, for 0.5 s")
    sets = len([n for n in os.listdir(q) if ".info#" in n])
    assert f"; wrote {sets} set" in end and ".q now " in end
    quiet = q_syscollect("-q", "-d", str(q), "-k", "-t", "0.5")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_a_run_that_cannot_write_its_sets_says_so_last_and_exits_3(perf, tmp_path):
    """A disk that stays full: whatever the command did, the last line says
    what was lost and the status is EXIT_LOST."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        q = mnt / "q"
        assert q_syscollect("-q", "-d", str(q), "-k", "-t", "0.2", "--cpus", "0").returncode == 0
        subprocess.run(["dd", "if=/dev/zero", f"of={mnt / 'filler'}", "bs=4k"],
                       capture_output=True)  # fill what is left: it stops at ENOSPC
        r = q_syscollect("-d", str(q), "-k", "--cpus", "0", "--", "sleep", "0.5")
        assert r.returncode == EXIT_LOST, r.stderr
        last = r.stderr.splitlines()[-1]
        assert last.startswith("q-syscollect: lost data: ") and "could not be written" in last
        assert "Traceback" not in r.stderr
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def test_a_closed_pipe_ends_quietly():
    shell = subprocess.run(["sh", "-c", f'"{command("q-syscollect")}" -l | head -1'],
                           capture_output=True, text=True, timeout=60)
    assert shell.returncode == 0 and shell.stdout.strip() and shell.stderr == "", shell.stderr
    r, w = os.pipe()
    os.close(r)  # nobody will ever read: the first write fails
    try:
        for args in (["-l"], ["--version"]):
            done = subprocess.run([command("q-syscollect"), *args], stdout=w,
                                  stderr=subprocess.PIPE, text=True, timeout=60)
            assert done.returncode == 0 and done.stderr == "", done.stderr
    finally:
        os.close(w)


@pytest.mark.parametrize("args,named", [
    (["-t", "x"], "-t"), (["-t", "0"], "-t"), (["-t", "nan"], "-t"), (["-c", "fast"], "-c"),
    (["--stack-size", "7"], "--stack-size"), (["--rotate", "soon"], "--rotate"),
    (["--cpus", "x"], "--cpus"), (["-i"], "-i"), (["--mmap-pages", "3"], "--mmap-pages")])
def test_option_errors_name_the_option_and_exit_2(tmp_path, args, named):
    r = q_syscollect("-d", str(tmp_path / "q"), *args)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert named in last and "Traceback" not in r.stderr
    assert "_" not in last.replace(str(tmp_path), ""), last  # no internal names
    assert not (tmp_path / "q").exists()


def _collectors(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_collectors_stop_when_the_supervisor_is_killed(perf, build, tmp_path):
    """kill -9 of the supervisor while its collectors are busy -- a p-fan per
    CPU sampled at 4999 Hz with DWARF unwinding, each p-fan with a sparse
    8 TiB /tmp/perf-PID.map that a checkpoint sets out to copy: every
    collector ends, and every set they leave is complete."""
    pfan = build("p-fan")
    q = tmp_path / "q"
    cpus = len(os.sched_getaffinity(0))
    loads = [subprocess.Popen([str(pfan), "60"]) for _ in range(cpus)]
    maps = [Path(f"/tmp/perf-{load.pid}.map") for load in loads]
    collectors: list[psutil.Process] = []
    try:
        for path in maps:
            with open(path, "x") as f:
                f.truncate(8 << 40)
        proc = q_syscollect_popen("-d", str(q), "--checkpoint", "1", "-c", "4999",
                                  stderr=subprocess.DEVNULL)
        try:
            _wait_for(lambda: len(_collectors(proc.pid)) == cpus, 60, proc)
            collectors = _collectors(proc.pid)
            time.sleep(3)  # past the first checkpoints, into the copies, the rings full
            assert proc.poll() is None
        finally:
            proc.kill()
            proc.wait()
        # generous: stopping takes a moment, but not more than a few seconds
        end = time.monotonic() + 30
        while time.monotonic() < end and not all(_gone(c) for c in collectors):
            time.sleep(0.05)
        assert all(_gone(c) for c in collectors), [c.pid for c in collectors if not _gone(c)]
    finally:
        for c in collectors:
            if not _gone(c):
                c.kill()
        for load in loads:
            load.kill()
            load.wait()
        for path in maps:
            path.unlink(missing_ok=True)
    for info in infos(q).values():  # every .info parses and names data files that agree
        assert info.task.samples is not None
    check_complete(q)


def test_a_collector_that_died_for_good_makes_the_run_exit_3(perf, tmp_path):
    """Killed again and again, a collector is restarted a few times a minute
    and then given up: the run goes on, and ends with EXIT_LOST and a last
    line that names the CPU, however the command ended."""
    q = tmp_path / "q"
    # -v: each collector says "[PID] profiling on cpu 0" once it is ready;
    # -t: whatever happens, the run ends (and stderr with it)
    proc = q_syscollect_popen("-d", str(q), "-v", "-k", "--cpus", "0", "-t", "120", "--",
                              "sleep", "600")
    said = []
    try:
        kills = 0
        while kills < 6:  # RESTARTS_PER_MINUTE is 5: the sixth death is final
            line = proc.stderr.readline()
            assert line, "".join(said)
            said.append(line)
            ready = re.match(r"\[(\d+)\] profiling on cpu 0 ", line)
            if ready:
                time.sleep(0.5)  # past its "ok" to the parent
                os.kill(int(ready[1]), signal.SIGKILL)
                kills += 1
        while "not restarting it" not in said[-1]:
            said.append(proc.stderr.readline())
            assert said[-1], "".join(said)
        proc.send_signal(signal.SIGTERM)  # ends sleep too, and its end would be passed on...
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_LOST, err  # ...but the loss comes first
    last = err.splitlines()[-1]
    assert last == ("q-syscollect: lost data: the collector for cpu 0 died 5 times (signal 9) "
                    "and was restarted, losing what it had collected since its last checkpoint; "
                    "the collector for cpu 0 died and was not restarted")


def _listing(q: Path) -> dict[str, tuple[int, int]]:
    """Each entry of ``q`` by name: its inode and size."""
    return {p.name: (p.lstat().st_ino, p.lstat().st_size) for p in q.iterdir()}


@pytest.mark.parametrize("mode", [(), ("-i",)])
def test_a_command_that_is_not_there_leaves_nothing(perf, tmp_path, mode):
    """A typo in the command's name: one line, a shell's 127, and no .q."""
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), *mode, "--", "no-such-command-q7", "arg")
    assert r.returncode == 127, r.stderr
    assert r.stderr == "q-syscollect: cannot run no-such-command-q7: command not found\n"
    assert not q.exists()


def test_a_command_that_may_not_run_is_126_and_leaves_nothing(perf, tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("not a program\n")
    q = tmp_path / "q"
    for target in (plain, tmp_path):  # a file without x, a directory
        r = q_syscollect("-d", str(q), "-i", "--", str(target))
        assert r.returncode == 126, r.stderr
        assert r.stderr == f"q-syscollect: cannot run {target}: Permission denied\n"
        assert not q.exists()


@pytest.mark.parametrize("mode", [(), ("-i",)])
def test_a_command_whose_exec_fails_leaves_an_earlier_q_as_it_was(perf, build, tmp_path, mode):
    """A script whose interpreter is missing is found and executable, so
    only its exec fails, after the run has started: system-wide (where the
    collectors already sample, and copy, the machine's programs) and with
    -i, what the run made goes again and the earlier run's sets and copies
    stay; a .q the failed run made itself is not left either."""
    script = tmp_path / "script"
    script.write_text("#!/no/such/interpreter\n")
    script.chmod(0o755)
    q = tmp_path / "q"
    earlier = q_syscollect("-q", "-d", str(q), "-i", "--min-samples", "1", "--",
                           str(build("p-fan")), "0.3")
    assert earlier.returncode == 0, earlier.stderr
    before = _listing(q)
    assert any(".info#" in name for name in before), before
    # a busy machine meanwhile: system-wide, its programs are what gets copied
    load = subprocess.Popen([str(build("p-fan")), "30"])
    try:
        for _ in range(3):
            r = q_syscollect("-d", str(q), *mode, "--", str(script))
            assert r.returncode == 127, r.stderr
            assert _lines(r.stderr)[-1] == (
                f"q-syscollect: cannot run {script}: a file it needs to start "
                "(its #! interpreter or ELF loader) is missing")
            assert "Traceback" not in r.stderr
            assert _listing(q) == before
        fresh = tmp_path / "fresh"
        r = q_syscollect("-d", str(fresh), *mode, "--", str(script))
        assert r.returncode == 127, r.stderr
        assert not fresh.exists()
    finally:
        load.kill()
        load.wait()


def _wait_file(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until ``path`` exists; fail (with what the run said) if ``proc`` ends first."""
    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            pytest.fail(f"{path.name} never appeared: {proc.communicate()}")
        time.sleep(0.05)


CTRL_C_PROGRAM = """\
import pathlib, sys
try:
    pathlib.Path(sys.argv[1]).touch()
    while True:
        pass
except KeyboardInterrupt:
    pathlib.Path(sys.argv[2]).touch()
    raise
"""


@pytest.mark.parametrize("mode", [(), ("-i",)])
def test_ctrl_c_lets_the_command_handle_it_and_exits_130(perf, tmp_path, mode):
    """Ctrl-C as a terminal sends it, to the whole foreground process group
    (here a shell running q-syscollect running Python): Python handles its
    KeyboardInterrupt, q-syscollect ends as interrupted (130, and the shell
    says nothing: no "Terminated"), and the sets are written."""
    q, ready, handled = tmp_path / "q", tmp_path / "ready", tmp_path / "handled"
    shell = subprocess.Popen(
        ["bash", "-c", '"$@"; echo "status $?"', "bash", command("q-syscollect"), "-d", str(q),
         *mode, "--min-samples", "1", "--", sys.executable, "-c", CTRL_C_PROGRAM, str(ready),
         str(handled)],
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_file(ready, shell)
        time.sleep(0.5)  # some samples of the loop
        os.killpg(shell.pid, signal.SIGINT)
        out, err = shell.communicate(timeout=120)
    finally:
        if shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    # bash, interrupted itself, ends as its command did: dies of SIGINT too,
    # or says the status it saw
    status = out.strip() or f"died of signal {-shell.returncode}"
    assert status in ("status 130", f"died of signal {signal.SIGINT}"), (status, err)
    assert "Terminated" not in err and "Traceback (most recent call last)" in err, err
    assert handled.exists()  # its own KeyboardInterrupt handler ran
    assert _lines(err)[-1].startswith("q-syscollect: captured "), err
    program = Path(sys.executable).name[:15]  # its comm
    assert any(i.task.comm == program and i.task.pid for i in infos(q).values()), infos(q)
    check_complete(q)


def test_a_command_that_ignores_ctrl_c_is_waited_for_and_a_second_one_ends_it(perf, tmp_path):
    """A command that ignores SIGINT keeps running after Ctrl-C: q-syscollect
    says it waits, and a second Ctrl-C sends it SIGTERM; the run still ends
    as interrupted."""
    q, ready = tmp_path / "q", tmp_path / "ready"
    proc = q_syscollect_popen("-d", str(q), "-i", "--", "sh", "-c",
                              f'trap "" INT; touch "{ready}"; exec sleep 120',
                              start_new_session=True)
    said = ""
    try:
        _wait_file(ready, proc)
        os.killpg(proc.pid, signal.SIGINT)
        end = time.monotonic() + 60
        while "to end after Ctrl-C" not in said and time.monotonic() < end:
            if select.select([proc.stderr], [], [], 1)[0]:
                said += proc.stderr.readline()
        assert "waiting for sh to end after Ctrl-C; it is sent SIGTERM in " in said, said
        assert proc.poll() is None
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGINT, said + err
    assert _lines(err)[-1].startswith("q-syscollect: captured "), err
