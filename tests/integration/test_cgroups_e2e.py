"""Services and containers on the real perf_events of this machine: a task
moved into a cgroup after fork (as runtimes and ``systemd-run --scope`` do)
is reported under that cgroup's unit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from qtools.daemon.machine.procfs import perf_cgroup_root
from qtools.qformat import read_info
from tests.conftest import OWN_SETS, q_syscollect, q_syscollect_popen, q_view


def _pfan_sets(q: Path, comm: str) -> list:
    return [read_info(q / n) for n in os.listdir(q)
            if ".info#" in n and n.startswith(comm)]


@pytest.fixture
def scope():
    """``qtest-PID.scope``, a cgroup made by the test under the hierarchy
    that samples' cgroup ids come from; removed at the end."""
    root = perf_cgroup_root()
    if root is None or not os.access(root, os.W_OK):
        pytest.skip("no writable cgroup hierarchy of perf_event here")
    name = f"qtest-{os.getpid()}.scope"
    path = Path(root) / name
    yield name, path
    if path.is_dir():
        for pid in (path / "cgroup.procs").read_text().split():  # what outlived the test
            try:
                (Path(root) / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        os.rmdir(path)


def test_task_moved_into_a_cgroup_is_reported_under_its_unit(perf, build, tmp_path, scope):
    name, path = scope
    pfan = build("p-fan")
    q, pidfile = tmp_path / "q", tmp_path / "pid"
    # p-fan starts in the collector's cgroup and is moved after fork, into
    # a cgroup made after the collection started
    proc = q_syscollect_popen("-d", str(q), *OWN_SETS, "--", "sh", "-c",
                              f"{pfan} 3 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; "
                              "wait")
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pidfile.exists(), proc.communicate(timeout=60)
        path.mkdir()
        (path / "cgroup.procs").write_text(pidfile.read_text().strip())
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    sets = _pfan_sets(q, pfan.name)
    assert sets, os.listdir(q)
    inside = sum(i.task.samples for i in sets if i.task.unit == name)
    total = sum(i.task.samples for i in sets)
    assert inside * 2 > total, [(i.task.cgroup, i.task.samples) for i in sets]
    named = next(i for i in sets if i.task.unit == name)
    assert named.task.cgroup == f"/{name}" and named.task.container is None
    # q-view: the unit selects its sets, and the overview groups by it
    r = q_view(str(q), "--unit", name, "--format", "json", "--no-cache")
    assert r.returncode == 0, r.stderr
    tasks = json.loads(r.stdout)["tasks"]
    assert tasks and {t["comm"] for t in tasks} == {pfan.name}
    assert {t["unit"] for t in tasks} == {name}
    r = q_view(str(q), "--group", "unit")
    assert r.returncode == 0, r.stderr
    assert any(line.split()[:1] == [name] for line in r.stdout.splitlines()), r.stdout


def test_systemd_run_scope_is_reported_under_its_unit(perf, build, tmp_path):
    try:
        init = Path("/proc/1/comm").read_text().strip()
    except OSError:
        init = "unknown"
    if init != "systemd" or shutil.which("systemd-run") is None:
        pytest.skip(f"systemd does not run here (PID 1 is {init}): "
                    "systemd-run --scope cannot make a scope")
    pfan = build("p-fan")
    q = tmp_path / "q"
    unit = f"qtest-run-{os.getpid()}"
    r = q_syscollect("-d", str(q), *OWN_SETS, "--", "systemd-run", "--quiet", "--scope",
                     "--unit", unit, str(pfan), "2")
    assert r.returncode == 0, r.stderr
    sets = _pfan_sets(q, pfan.name)
    assert sets and max(sets, key=lambda i: i.task.samples).task.unit == f"{unit}.scope"
    subprocess.run(["systemctl", "stop", f"{unit}.scope"], capture_output=True)


def test_a_kernel_refusing_cgroup_sampling_gets_events_without_it(perf, monkeypatch):
    """Kernels before 5.7 answer EINVAL to PERF_SAMPLE_CGROUP and attr.cgroup
    (this one does not, so the refusal is made here): the source opens its
    events without them, and its layout says so."""
    import errno

    from qtools.daemon.kernel import abi, source, syscalls

    real = syscalls.perf_event_open
    refused = []

    def old_kernel(attr, pid, cpu, *rest):
        if attr.sample_type & abi.SAMPLE_CGROUP or attr.flags & abi.FLAG_CGROUP:
            refused.append(attr)
            raise syscalls.PerfError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(attr, pid, cpu, *rest)
    monkeypatch.setattr(syscalls, "perf_event_open", old_kernel)
    spec = source.SourceSpec(abi.builtin_event("cpu-clock"), 0, [0], ring_pages=16)
    src = source.PerfSource(spec)
    try:
        assert refused and not src.spec.cgroups
        assert not src.layout.sample_type & abi.SAMPLE_CGROUP
    finally:
        src.close()
