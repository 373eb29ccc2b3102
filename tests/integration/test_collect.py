"""q-syscollect end to end, on the real perf_events of this machine."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import psutil
import pytest

from qtools.qformat import QDir, read_hist, read_info, read_stacks, resolve_info
from tests.conftest import OWN_SETS, command, q_syscollect, q_syscollect_popen, q_view

KERNEL_START = 0xFFFF_8000_0000_0000


def infos(q: Path) -> dict[str, object]:
    if not q.is_dir():
        return {}
    return {n: read_info(q / n) for n in os.listdir(q) if ".info#" in n}


def sets_of(q: Path, comm: str):
    return [(n, i) for n, i in infos(q).items() if i.task.comm == comm and i.task.pid]


def check_complete(q: Path) -> None:
    """Every .info parses, names data files that exist and parse, and its
    stack weights add up to its histogram."""
    for name, info in infos(q).items():
        hist = dict(read_hist(q / info.histogram.file)) if info.histogram else {}
        if info.call_stacks:
            stacks = list(read_stacks(q / info.call_stacks.file))
            assert sum(s.weight for s in stacks) == sum(hist.values()), name
        assert info.task.samples is not None


def test_collects_a_workload_with_symbols_and_copies(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), *OWN_SETS, "--", str(pfan), "2")
    assert r.returncode == 0, r.stderr
    sets = [i for _n, i in sets_of(q, pfan.name)]
    assert sets, os.listdir(q)
    info = max(sets, key=lambda i: i.task.samples or 0)  # the CPU p-fan ran on most
    assert info.task.exe == str(pfan) and info.task.cmdline == [str(pfan), "2"]
    assert info.histogram.event_name in ("cpu-clock", "cycles")
    total = in_code = n = 0
    for one in sets:  # each CPU's set: its histogram and its own maps
        hist = dict(read_hist(q / one.histogram.file))
        maps = [(o, m) for o in one.objects for m in o.maps]
        inside = sum(c for a, c in hist.items()
                     if a >= KERNEL_START or any(m.contains(a) for _o, m in maps))
        assert inside == sum(hist.values())  # every address: a mapping or the kernel
        total += inside
        in_code += sum(c for a, c in hist.items() for o, m in maps
                       if m.contains(a) and o.name in (pfan.name, "libm.so.6"))
        n += one.task.samples
    # p-fan burns its time in its own code and libm: 99% of its n samples
    # (perf agrees; the rest is exec, kernel entry and vdso). 80% is more than
    # 20 sigma (sigma = sqrt(p(1-p)/n)) below for the n >= 100 samples even a
    # loaded machine gives p-fan in 2 s; one comparison. Summed over all of
    # p-fan's sets: the set of a CPU it only started on may hold a few
    # samples, most of them exec's.
    assert in_code > 0.8 * total, (in_code, total, n)
    objects = {o.path: o for o in info.objects}
    exe_copy = objects[str(pfan)]
    assert exe_copy.file == f".{pfan.name}.crc32.{zlib.crc32(pfan.read_bytes()):08x}"
    with QDir.open(q) as qdir:
        assert qdir.verify_copy(exe_copy.file) is None
        assert info.kallsyms and qdir.verify_copy(info.kallsyms) is None
        assert info.vdso and qdir.verify_copy(info.vdso) is None
    assert os.path.isfile(q / info.kallsyms) and not os.path.islink(q / info.kallsyms)
    # real kernel addresses, which /proc/kallsyms shows only to privileged
    # readers: the copy is for the collector's user alone
    assert (q / info.kallsyms).stat().st_mode & 0o077 == 0
    assert exe_copy.build_id and len(exe_copy.build_id) == 40
    check_complete(q)


def test_inherit_only_collects_the_command_and_its_children(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "-i", "--min-samples", "1", "--", "sh", "-c",
                     f"{pfan} 1 & {pfan} 1; wait")
    assert r.returncode == 0, r.stderr
    comms = {i.task.comm for i in infos(q).values()}
    assert comms <= {"sh", pfan.name}, comms
    pids = {i.task.pid for i in infos(q).values() if i.task.comm == pfan.name}
    assert len(pids) == 2  # both children, on whatever CPUs they ran
    check_complete(q)


def test_kernel_only_writes_kernel_sets(perf, tmp_path):
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "-k", "-t", "1")
    assert r.returncode == 0, r.stderr
    names = sorted(n for n in os.listdir(q) if ".info#" in n)
    assert names and all(n.startswith("kernel-cpu") for n in names), names
    for info in infos(q).values():
        assert all(a >= KERNEL_START for a in dict(read_hist(q / info.histogram.file)))
    check_complete(q)


def test_sigterm_in_the_middle_leaves_complete_files(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    load = subprocess.Popen([str(pfan), "20"])
    try:
        proc = q_syscollect_popen("-d", str(q), "-v", *OWN_SETS)
        _wait_for(lambda: proc.stderr and _profiling_lines(proc) >= 2, 30, proc)
        time.sleep(1.5)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        load.kill()
        load.wait()
    assert proc.returncode == 0, err
    assert "termination-request received; shutting down" in err
    assert sets_of(q, pfan.name)
    check_complete(q)


def _profiling_lines(proc: subprocess.Popen) -> int:
    line = proc.stderr.readline()
    _profiling_lines.seen = getattr(_profiling_lines, "seen", 0) + ("profiling on cpu" in line)
    return _profiling_lines.seen


def _wait_for(cond, timeout: float, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"q-syscollect exited early: {proc.stderr.read()}")
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_burst_of_short_lived_processes_stays_bounded(perf, tmp_path):
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--", "sh", "-c",
                     "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done")
    assert r.returncode == 0, r.stderr
    names = [n for n in os.listdir(q) if ".info#" in n]
    assert len(names) < 40, sorted(names)
    folded = [i for i in infos(q).values() if i.task.pids and i.task.comm == "true"]
    assert folded and sum(len(i.task.pids) for i in folded) >= 1
    assert not [n for n in names if n.startswith("true-pid")]
    check_complete(q)


def test_sighup_writes_a_checkpoint_at_once(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    load = subprocess.Popen([str(pfan), "30"])
    proc = q_syscollect_popen("-d", str(q), "--checkpoint", "3600", *OWN_SETS,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(2.5)
        assert not sets_of(q, pfan.name)  # no checkpoint yet
        proc.send_signal(signal.SIGHUP)
        _wait_for(lambda: sets_of(q, pfan.name), 20, proc)
        check_complete(q)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        load.kill()
        load.wait()
    assert proc.returncode == 0


def test_a_dead_collector_is_restarted_and_its_loss_said(perf, build, tmp_path):
    """Killed, a collector is restarted and the run goes on; what it had
    collected since its last checkpoint died with it, and the run says so:
    exit status 3 and a last line naming the CPU and the signal."""
    pfan = build("p-fan")
    q = tmp_path / "q"
    proc = q_syscollect_popen("-d", str(q), "--", str(pfan), "4")
    try:
        _wait_for(lambda: len(psutil.Process(proc.pid).children()) >= 3, 30, proc)
        time.sleep(1)
        collectors = [c for c in psutil.Process(proc.pid).children()
                      if c.cmdline() and "q-syscollect" in " ".join(c.cmdline())]
        victim = collectors[0]
        victim.kill()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err  # EXIT_LOST, whatever p-fan did
    assert f"(pid {victim.pid}) died (signal 9); restarting it" in err
    assert re.fullmatch(r"q-syscollect: lost data: the collector for cpu \d+ died \(signal 9\) "
                        "and was restarted, losing what it had collected since its last "
                        "checkpoint", err.splitlines()[-1]), err
    check_complete(q)


def _runtime_for(lib: Path) -> Path:
    """A copy of q-tools and what the collector imports, for a user who may
    not be able to read the checkout or its virtual environment (a clone in
    a mode-0700 directory, say)."""
    import importlib
    for part in ("common", "qformat", "daemon"):
        src = importlib.import_module(f"qtools.{part}").__path__[0]
        shutil.copytree(src, lib / "qtools" / part, ignore=shutil.ignore_patterns("__pycache__"))
    for dep in ("psutil", "zlib_ng"):
        module = importlib.import_module(dep)
        src = Path(module.__file__)
        if src.name == "__init__.py":
            shutil.copytree(src.parent, lib / dep, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, lib / src.name)
    for path in [lib, *lib.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return lib


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged user")
def test_unprivileged_gets_a_clear_message_and_can_use_minus_i(perf, build, request):
    paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    if paranoid < 1:
        pytest.skip("kernel.perf_event_paranoid allows everybody to sample system-wide")
    work = Path(tempfile.mkdtemp(prefix="qtools-nobody-"))  # pytest's tmp is root-only
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    pfan = work / "p-fan"
    pfan.write_bytes(build("p-fan").read_bytes())
    pfan.chmod(0o755)
    os.chown(work, 65534, 65534)
    os.chmod(work, 0o755)
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = dict(os.environ, HOME=str(work), PYTHONPATH=str(_runtime_for(work / "lib")))
    base = [*as_nobody, os.path.realpath(sys.executable), "-m", "qtools.daemon.cli"]
    r = subprocess.run([*base, "-t", "1"], cwd=work, capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1
    msg = r.stderr.strip()
    assert msg.count("\n") == 0 and "Traceback" not in msg
    for words in ("root", "CAP_PERFMON", "perf_event_paranoid", "-i -- CMD"):
        assert words in msg
    if paranoid > 2:
        return
    r = subprocess.run([*base, "-i", "--", str(pfan), "1"], cwd=work, capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    q = work / ".q"
    assert sets_of(q, pfan.name)
    check_complete(q)


def test_a_full_filesystem_is_survived(perf, build, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    pfan = build("p-fan")
    load = subprocess.Popen([str(pfan), "30"])
    try:
        q = mnt / "q"
        proc = q_syscollect_popen("-d", str(q), "--checkpoint", "1")
        time.sleep(4)  # several checkpoints that find no space
        space_again = time.time()
        # Room for a system-wide run on a busy machine: copies of whatever
        # else runs meanwhile (compilers, toolchains) once filled 200 MB.
        subprocess.run(["mount", "-o", "remount,size=4g", str(mnt)], check=True)
        _wait_for(lambda: sets_of(q, pfan.name), 20, proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        # said by the parent and once per collector, not at every checkpoint
        assert err.count("No space left on device") <= 1 + 2 * len(os.sched_getaffinity(0)), err
        assert "works again" in err
        # what was sampled while the disk was full reached it afterwards
        assert min(i.task.start_time for _n, i in sets_of(q, pfan.name)) < space_again - 2
        check_complete(q)
    finally:
        load.kill()
        load.wait()
        subprocess.run(["umount", "-l", str(mnt)])


def test_event_errors_are_one_clear_line(perf, tmp_path):
    r = q_syscollect("-d", str(tmp_path / "q"), "-e", "no-such-event", "-t", "1")
    assert r.returncode == 1 and "unknown event 'no-such-event'" in r.stderr
    assert "Traceback" not in r.stderr
    r = q_syscollect("-l")
    assert r.returncode == 0 and "cpu-clock" in r.stdout
    if "cycles" not in r.stdout:  # no PMU here: asking for cycles must say so
        r = q_syscollect("-d", str(tmp_path / "q"), "-e", "cycles", "-t", "1")
        assert r.returncode == 1 and "not supported" in r.stderr


def test_a_command_that_cannot_run_is_an_error(perf, tmp_path):
    r = q_syscollect("-d", str(tmp_path / "q"), "--", str(tmp_path / "missing"))
    assert r.returncode == 127 and "cannot run" in r.stderr and "Traceback" not in r.stderr


def test_symlinked_output_directory_is_refused(perf, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    r = q_syscollect("-d", str(tmp_path / "link"), "-t", "1")
    assert r.returncode == 1 and "symlink" in r.stderr and "Traceback" not in r.stderr
    assert os.listdir(real) == []


def test_a_second_run_claims_the_next_version(perf, tmp_path):
    q = tmp_path / "q"
    for _ in range(2):
        assert q_syscollect("-d", str(q), "-k", "-t", "0.5", "--cpus", "0").returncode == 0
    assert sorted(n for n in os.listdir(q) if n.startswith("kernel-cpu0.info")) == [
        "kernel-cpu0.info#0", "kernel-cpu0.info#1"]
    assert resolve_info(q / "kernel-cpu0.info") == str(q / "kernel-cpu0.info#1")


@pytest.mark.parametrize("extra", [[], ["--symlink"]])
def test_deleted_binary_is_copied_from_the_running_task(perf, build, tmp_path, extra):
    """Also with --symlink: a link to a deleted file would dangle."""
    exe = tmp_path / "doomed"
    exe.write_bytes(build("p-fan").read_bytes())
    exe.chmod(0o755)
    content = exe.read_bytes()
    load = subprocess.Popen([str(exe), "4"])
    try:
        time.sleep(0.5)
        exe.unlink()  # replaced by an upgrade, say: only the running task still has it
        q = tmp_path / "q"
        r = q_syscollect("-d", str(q), "-t", "2", *OWN_SETS, *extra)
    finally:
        load.kill()
        load.wait()
    assert r.returncode == 0, r.stderr
    copies = [o for _n, i in sets_of(q, "doomed") for o in i.objects if o.path == str(exe)]
    assert copies and copies[0].file == f".doomed.crc32.{zlib.crc32(content):08x}"
    assert not (q / copies[0].file).is_symlink()
    assert (q / copies[0].file).read_bytes() == content


def test_a_binary_path_replaced_after_exec_is_not_copied(perf, build, tmp_path):
    """Two running programs whose paths are then replaced, by a symlink to a
    root-only file and by a FIFO, while the collector cannot use
    /proc/PID/map_files (no CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE, as on
    kernels before 5.9 under the service's bounding set): the secret is not
    copied into .q and the FIFO does not hang the collector."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop capabilities")
    secret = tmp_path / "secret"
    secret.write_text("root-only secret\n")
    secret.chmod(0o600)
    exes = {name: tmp_path / name for name in ("linked", "piped")}
    loads = []
    for exe in exes.values():
        exe.write_bytes(build("p-fan").read_bytes())
        exe.chmod(0o755)
        loads.append(subprocess.Popen([str(exe), "6"]))
    try:
        time.sleep(0.5)
        for exe in exes.values():
            exe.unlink()
        exes["linked"].symlink_to(secret)
        os.mkfifo(exes["piped"])
        q = tmp_path / "q"
        r = subprocess.run(["setpriv", "--bounding-set", "-sys_admin,-checkpoint_restore",
                            command("q-syscollect"), "-d", str(q), "-t", "2", *OWN_SETS],
                           capture_output=True, text=True, timeout=120)
    finally:
        for load in loads:
            load.kill()
            load.wait()
    assert r.returncode == 0, r.stderr
    for name, exe in exes.items():
        objects = [o for _n, i in sets_of(q, name) for o in i.objects if o.path == str(exe)]
        assert objects and not any(o.file for o in objects)  # sampled, but no copy
    for copy in q.iterdir():
        assert b"root-only secret" not in copy.read_bytes()
    check_complete(q)


def test_jit_perf_map_is_copied_and_names_jitted_code(perf, build, tmp_path):
    if os.uname().machine != "x86_64":
        pytest.skip("the JIT workload writes x86_64 machine code")
    jit = build("jit")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), *OWN_SETS, "--", str(jit), "2")
    try:
        assert r.returncode == 0, r.stderr
        info = max((i for _n, i in sets_of(q, jit.name)), key=lambda i: i.task.samples or 0)
        assert info.perf_maps and info.perf_maps[0].startswith(f".perf-{info.task.pid}.map.")
        assert b"jitted_spin_loop" in (q / info.perf_maps[0]).read_bytes()
        view = q_view(str(q), "--comm", jit.name, "--flat")
        assert view.returncode == 0, view.stderr
        rows = view.stdout.split("self/call  tot/call  name\n", 1)[1].splitlines()
        # the JIT code has about 99% of the self time (a call to clock_gettime every
        # 100 spins of 200,000 iterations): no other row comes near, at any n
        assert rows[0].endswith("jitted_spin_loop"), view.stdout
    finally:
        for pid in {i.task.pid for _n, i in sets_of(q, jit.name)}:
            Path(f"/tmp/perf-{pid}.map").unlink(missing_ok=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a private mount namespace")
def test_binary_in_another_mount_namespace_is_copied(perf, build, tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    pfan = build("p-fan")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    # The binary exists only inside the namespace, on a tmpfs mounted there.
    script = (f"mount -t tmpfs none {hidden} && cp {pfan} {hidden}/ns-fan && "
              f"exec {hidden}/ns-fan 2")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), *OWN_SETS, "--", "unshare", "--mount", "--propagation",
                     "private", "sh", "-c", script)
    if r.returncode and "unshare failed" in r.stderr:
        pytest.skip("cannot create a mount namespace here")
    assert r.returncode == 0, r.stderr
    assert not os.listdir(hidden)  # outside the namespace the binary is not there
    copies = [o for _n, i in sets_of(q, "ns-fan") for o in i.objects
              if o.path == f"{hidden}/ns-fan"]
    assert copies and copies[0].file == f".ns-fan.crc32.{zlib.crc32(pfan.read_bytes()):08x}"


def test_the_collectors_own_samples_are_kept_by_their_pc(perf, build, tmp_path):
    """q-syscollect samples itself like any program, but keeps each of its
    own samples as a stack of one frame, its pc, in the kernel too (a
    system call's chain is not kept); its .hist is whole."""
    pfan = build("p-fan")
    q = tmp_path / "q"
    load = subprocess.Popen([str(pfan), "20"])
    try:
        r = q_syscollect("-d", str(q), "-t", "2", *OWN_SETS)
    finally:
        load.kill()
        load.wait()
    assert r.returncode == 0, r.stderr
    check_complete(q)
    # this run's processes (another q-syscollect on the machine is a program like any)
    own = [i for i in infos(q).values()
           if i.task.comm == "q-syscollect" and str(q) in (i.task.cmdline or ())]
    assert own, sorted(infos(q))
    kernel_samples = 0
    for info in own:
        stacks = list(read_stacks(q / info.call_stacks.file))
        assert all(len(s.frames) == 1 for s in stacks), info.task.pid
        kernel_samples += sum(1 for a, _c in read_hist(q / info.histogram.file)
                              if a >= KERNEL_START)
    assert kernel_samples, "no sample of the collector in the kernel: nothing was checked"


def _kernel_text_starts() -> set[int]:
    with open("/proc/kallsyms") as f:
        return {int(a, 16) for a, kind, *_ in (line.split() for line in f) if kind in "tTwW"}


def test_rare_addresses_go_to_their_functions_start_and_the_totals_stay(perf, tmp_path):
    """--min-stack-share folds a rare kernel address of a short-lived
    program to the start of its kallsyms symbol (and the collector's own
    rare pcs to their FDE's): the set says how much weight moved, every
    stack still ends at a `.hist` address that holds at least its weight,
    and q-view reads it without a complaint and says so."""
    starts = _kernel_text_starts()
    if starts <= {0}:
        pytest.skip("kallsyms addresses are hidden here (kptr_restrict)")
    q = tmp_path / "q"
    churn = subprocess.Popen(["sh", "-c", "while :; do /bin/true; done"])
    try:
        r = q_syscollect("-d", str(q), "-t", "5", "--checkpoint", "1",
                         "--min-stack-share", "0.05", *OWN_SETS)
    finally:
        churn.kill()
        churn.wait()
    assert r.returncode == 0, r.stderr
    check_complete(q)
    moved_sets = 0
    for name, info in infos(q).items():
        hist = dict(read_hist(q / info.histogram.file))
        by_leaf: dict[int, int] = {}
        for s in read_stacks(q / info.call_stacks.file) if info.call_stacks else ():
            if s.frames:
                by_leaf[s.frames[0]] = by_leaf.get(s.frames[0], 0) + s.weight
        assert all(w <= hist.get(leaf, 0) for leaf, w in by_leaf.items()), name
        moved = info.task.extra.get("q:hist-moved", 0)
        if moved and info.task.comm == "true":
            moved_sets += 1  # only kernel addresses move here: to kallsyms starts
            assert sum(w for a, w in hist.items() if a in starts) >= moved, name
    assert moved_sets, sorted(n for n in infos(q))
    # the collector's own sets are kept by function: every kernel pc at its symbol
    own = [i for i in infos(q).values()
           if i.task.comm == "q-syscollect" and str(q) in (i.task.cmdline or ())]
    assert any(i.task.extra.get("q:hist-moved") for i in own), sorted(infos(q))
    last = max(starts)
    for info in own:
        kernel = [a for a, _w in read_hist(q / info.histogram.file) if a >= KERNEL_START]
        assert all(a in starts or a > last for a in kernel), info.task.pid
    r = q_view("--comm", "true", str(q))
    assert r.returncode == 0 and "disagree" not in r.stderr, r.stderr
    assert "first instruction of their function" in r.stdout
    # ... and their functions under the share, one line per object
    lined = [i for i in own if i.task.extra.get("q:other-functions")]
    assert lined, [i.task.pid for i in own]
    for info in lined:
        hist = dict(read_hist(q / info.histogram.file))
        assert all(hist.get(a) for a in info.task.extra["q:other-functions"]), info.task.pid
    r = q_view("--pid", str(lined[0].task.pid), str(q))
    assert r.returncode == 0 and "disagree" not in r.stderr, r.stderr
    assert "(other functions)" in r.stdout
