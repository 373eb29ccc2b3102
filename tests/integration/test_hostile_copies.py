"""What q-syscollect, running as root, copies and reads from files that
users control: perf maps and objects, bounded in size and time, never left
for a user to change, taken only from their owner, never mapped."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from qtools.qformat import read_hist
from tests.conftest import q_syscollect, q_syscollect_popen
from tests.integration.test_collect import check_complete, infos

AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
MiB = 1 << 20

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to act as another user")


@pytest.fixture
def shared(request) -> Path:
    """A directory an unprivileged user can reach (pytest's tmp is root-only)."""
    work = Path(tempfile.mkdtemp(prefix="qtools-copies-"))
    os.chmod(work, 0o755)
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    return work


@pytest.fixture
def perf_maps(request) -> list[int]:
    """Pids whose /tmp/perf-PID.map the test made: removed afterwards."""
    pids: list[int] = []
    request.addfinalizer(lambda: [Path(f"/tmp/perf-{p}.map").unlink(missing_ok=True)
                                  for p in pids])
    return pids


def _program(build, where: Path, name: str, workload: str = "p-fan") -> Path:
    exe = where / name
    exe.write_bytes(build(workload).read_bytes())
    exe.chmod(0o755)
    return exe


def _set_of(q: Path, pid: int, comm: str):
    """The set of ``comm`` in ``pid``: with --min-samples 1 the programs the
    pid ran before its exec (the forked python, setpriv, sh) may have sets
    of their own."""
    found = [i for _n, i in infos(q).items() if i.task.pid == pid and i.task.comm == comm]
    assert found, f"no set of {comm} for pid {pid}: {os.listdir(q)}"
    return found[0]


def _wait_for_file(path: Path, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if path.exists() or proc.poll() is not None:
            return
        time.sleep(0.05)


def _started(proc: subprocess.Popen) -> list[str]:
    """Wait until every collector of a -v run says it is profiling."""
    cpus, lines = len(os.sched_getaffinity(0)), []
    while sum("profiling on cpu" in line for line in lines) < cpus:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError("q-syscollect ended early:\n" + "".join(lines))
        lines.append(line)
    return lines


def _truncated(q: Path, name: str) -> list[str]:
    info = next(i for n, i in infos(q).items() if name in i.perf_maps)
    return [f.value for f in info.extra_forms if f.tag == "q:perf-map-truncated"]


def test_a_sparse_8tb_perf_map_ends_the_run_in_time_cut_at_the_limit(perf, build, shared,
                                                                     tmp_path, perf_maps):
    pfan = _program(build, shared, "sparse-fan")
    load = subprocess.Popen([*AS_NOBODY, "sh", "-c",
                             f"truncate -s 8T /tmp/perf-$$.map && exec {pfan} 20"])
    perf_maps.append(load.pid)
    path = Path(f"/tmp/perf-{load.pid}.map")
    try:
        _wait_for_file(path, load)
        assert path.stat().st_uid == 65534 and path.stat().st_size == 8 << 40
        q = tmp_path / "q"
        r = q_syscollect("-d", str(q), "-t", "3", "--checkpoint", "1", "--max-map-size", "4M",
                         timeout=60)  # -t 3: ends long before this, whatever the map holds
    finally:
        load.kill()
        load.wait()
    assert r.returncode == 0, r.stderr
    warning = f"{path} (pid {load.pid}) is larger than --max-map-size 4M"
    assert warning in r.stderr
    info = _set_of(q, load.pid, "sparse-fan")
    copy, = info.perf_maps
    assert (q / copy).stat().st_size == 4 * MiB and _truncated(q, copy) == [copy]
    check_complete(q)


GROWER = """
import os, time
line = b"7f0000001000 10 grown\\n" * 40000
with open(f"/tmp/perf-{os.getpid()}.map", "ab") as f:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        f.write(line)
        f.flush()
        spin = time.monotonic() + 0.05
        while time.monotonic() < spin:
            pass
"""


def test_a_growing_perf_map_is_copied_up_to_the_limit(perf, shared, tmp_path, perf_maps):
    python = "/usr/bin/python3"  # one every user may run (not a pyenv shim)
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is not installed")
    load = subprocess.Popen([*AS_NOBODY, python, "-c", GROWER], cwd=shared)
    perf_maps.append(load.pid)
    path = Path(f"/tmp/perf-{load.pid}.map")
    try:
        _wait_for_file(path, load)
        q = tmp_path / "q"
        r = q_syscollect("-d", str(q), "-t", "3", "--checkpoint", "1", "--max-map-size", "2M",
                         timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"{path} (pid {load.pid}) is larger than --max-map-size 2M" in r.stderr
        copy, = _set_of(q, load.pid, "python3").perf_maps
        data = (q / copy).read_bytes()
        with open(path, "rb") as f:
            assert f.read(len(data)) == data  # its beginning, as it was
        assert 2 * MiB - 22 < len(data) <= 2 * MiB and data.endswith(b" grown\n")  # whole lines
        assert _truncated(q, copy) == [copy]
    finally:
        load.kill()
        load.wait()


def test_an_object_over_the_limit_is_refused_with_one_warning(perf, build, tmp_path):
    pfan = _program(build, tmp_path, "big-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--cpus", "0", "--checkpoint", "0.5",
                     "--max-object-size", "4K", "--", "taskset", "-c", "0", str(pfan), "2")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(f"not copying {pfan} (pid ") == 1
    assert "larger than --max-object-size 4K" in r.stderr
    objects = [o for _n, i in infos(q).items() for o in i.objects if o.path == str(pfan)]
    assert objects and not any(o.file for o in objects)  # sampled, but not copied
    check_complete(q)


def test_objects_users_can_change_are_copied_not_linked(perf, build, tmp_path):
    bins = tmp_path / "bin"
    bins.mkdir()
    exes = {name: _program(build, bins, name) for name in ("root-fan", "user-fan", "group-fan")}
    os.chown(exes["user-fan"], 65534, 65534)
    exes["group-fan"].chmod(0o775)
    q = tmp_path / "q"
    q.mkdir()
    stale = q / f".tmp-{os.getpid()}.1-left-by-a-reused-pid"
    stale.write_bytes(b"x")
    script = " & ".join(f"{exe} 1" for exe in exes.values()) + "; wait"
    r = q_syscollect("-d", str(q), "--min-samples", "1", "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    assert not stale.exists()
    for name, exe in exes.items():
        objects = [o for _n, i in infos(q).items() for o in i.objects if o.path == str(exe)]
        assert objects and objects[0].file, name
        copy, source = (q / objects[0].file).stat(), exe.stat()
        if name == "root-fan":
            assert copy.st_ino == source.st_ino  # nobody but root can change it: linked
        else:
            assert copy.st_ino != source.st_ino and copy.st_nlink == 1, name
            assert copy.st_uid == 0 and not copy.st_mode & 0o222, name
            assert (q / objects[0].file).read_bytes() == exe.read_bytes()


def test_symlink_only_along_paths_users_cannot_swap(perf, build, shared, tmp_path):
    home = shared / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)  # its owner may put anything at this path later
    pfan = _program(build, home, "home-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--symlink", "--", str(pfan), "1")
    assert r.returncode == 0, r.stderr
    objects = {o.path: o for _n, i in infos(q).items() for o in i.objects if o.file}
    mine = q / objects[str(pfan)].file
    assert not mine.is_symlink() and mine.read_bytes() == pfan.read_bytes()
    libc = next(o for p, o in objects.items() if os.path.basename(p).startswith("libc.so"))
    assert (q / libc.file).is_symlink()  # root's, in root's directories: linked


def test_a_map_planted_for_an_exited_pid_is_not_used(perf, build, tmp_path, perf_maps):
    pfan = _program(build, tmp_path, "gone-fan")
    q = tmp_path / "q"
    collector = q_syscollect_popen("-d", str(q), "-v", "-t", "6", "--min-samples", "1")
    try:
        said = _started(collector)
        victim = subprocess.Popen([str(pfan), "1"])
        perf_maps.append(victim.pid)
        victim.wait()  # root's program has exited; a user plants a map for its pid
        planted = f"/tmp/perf-{victim.pid}.map"
        subprocess.run([*AS_NOBODY, "sh", "-c", f"echo '7f0000001000 10 planted' > {planted}"],
                       check=True)
        out, err = collector.communicate(timeout=60)
    finally:
        collector.kill()
    err = "".join(said) + err
    assert collector.returncode == 0, err
    refused = f"not using {planted}: owned by uid 65534, not by uid 0 that ran pid {victim.pid}"
    if refused not in err:  # only where the records that named its owner were lost
        lost = re.search(r"captured \d+ samples \((\d+) lost\)", err)
        assert lost and int(lost[1]) > 0, err
        assert f"not using {planted}: the owner of pid {victim.pid} was never seen" in err
    assert not _set_of(q, victim.pid, "gone-fan").perf_maps
    copies = [n for n in os.listdir(q) if n.startswith(".") and ".crc32." in n]
    assert not [n for n in copies if b"planted" in (q / n).read_bytes()]


def test_a_map_left_by_an_earlier_program_of_the_pid_is_not_used(perf, build, shared,
                                                                  tmp_path, perf_maps):
    """A map written, then a new program exec'd in the same pid (as a pid
    reused after the last writer of /tmp/perf-PID.map ended): the map
    names another program's code, and its change time, older than the
    exec, says so."""
    pfan = _program(build, shared, "later-fan")
    q = tmp_path / "q"
    collector = q_syscollect_popen("-d", str(q), "-v", "-t", "6", "--min-samples", "1")
    try:
        said = _started(collector)
        script = ("echo '7f0000001000 10 stale_jitted' > /tmp/perf-$$.map; "
                  f"sleep 1.5; exec {pfan} 2")
        later = subprocess.Popen(["sh", "-c", script])
        perf_maps.append(later.pid)
        later.wait()
        out, err = collector.communicate(timeout=60)
    finally:
        collector.kill()
    err = "".join(said) + err
    assert collector.returncode == 0, err
    assert (f"not using /tmp/perf-{later.pid}.map: last written before the program of pid "
            f"{later.pid} began") in err
    # the shell that wrote it keeps it (if it was sampled), the program after it does not
    after = [i for _n, i in infos(q).items()
             if i.task.pid == later.pid and i.task.comm == "later-fan"]
    assert after and not [i.perf_maps for i in after if i.perf_maps]


def test_the_map_of_a_program_gone_before_the_checkpoint_is_taken(perf, build, shared,
                                                                  tmp_path, perf_maps):
    if os.uname().machine != "x86_64":
        pytest.skip("the JIT workload writes x86_64 machine code")
    jit = _program(build, shared, "short-jit", "jit")
    q = tmp_path / "q"
    collector = q_syscollect_popen("-d", str(q), "-v", "-t", "6", "--min-samples", "1")
    try:
        said = _started(collector)
        script = subprocess.Popen([*AS_NOBODY, str(jit), "2.5"])
        perf_maps.append(script.pid)
        script.wait()  # gone long before the only checkpoint, at the end
        out, err = collector.communicate(timeout=60)
    finally:
        collector.kill()
    assert collector.returncode == 0, "".join(said) + err
    copy, = _set_of(q, script.pid, "short-jit").perf_maps
    assert b"jitted_spin_loop" in (q / copy).read_bytes()


def test_a_library_cut_while_it_is_read_cannot_kill_the_collector(perf, build, shared,
                                                                   tmp_path):
    """A user runs a large library of their own (480 MiB, mostly a hole)
    and cuts it at its unwind tables every few tens of milliseconds,
    putting the bytes back in between, while the collector unwinds through
    it. Larger than --max-object-size, it is never copied: the collector
    reads the user's file itself all along (as it does while a copy is
    under way). Reading a cut file gives fewer bytes, never SIGBUS: no
    collector dies, nothing is lost, and the user's samples are there."""
    lib = shared / "libcut.so"  # 4,096 functions, an FDE each
    lib.write_bytes(build("trunc-lib", "-shared", "-fPIC", "-DLIBRARY", "-O0").read_bytes())
    cutter = _program(build, shared, "lib-cutter", "trunc-lib")
    for path in (lib, cutter):
        os.chown(path, 65534, 65534)
    q = tmp_path / "q"
    collector = q_syscollect_popen("-d", str(q), "-v", "--max-object-size", "256M")
    try:
        said = _started(collector)
        # 8 s of calls into the library; after 2 s (its tables read whole) the cuts begin
        attack = subprocess.Popen([*AS_NOBODY, str(cutter), str(lib), "480", "8", "2"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cut_out, cut_err = attack.communicate(timeout=120)
        collector.send_signal(signal.SIGTERM)
        out, err = collector.communicate(timeout=120)
    finally:
        collector.kill()
    err = "".join(said) + err
    assert attack.returncode == 0, cut_err
    cuts = int(re.match(r"truncations (\d+)", cut_out)[1])
    assert cuts >= 20, cut_out  # 20-80 ms apart over 6 s
    assert f"not copying {lib} (pid {attack.pid}): larger than --max-object-size 256M" in err
    assert "died (" not in err and "lost data" not in err, err
    assert collector.returncode == 0, err
    sets = [i for _n, i in infos(q).items() if i.task.comm == "lib-cutter"]
    in_library = 0
    for info in sets:
        maps = [m for o in info.objects if o.path == str(lib) for m in o.maps]
        hist = dict(read_hist(q / info.histogram.file))
        in_library += sum(c for a, c in hist.items() if any(m.contains(a) for m in maps))
    assert in_library > 0, [i.task for i in sets]
    check_complete(q)
