"""The overview: one row per process with its counters once, idle apart."""

from __future__ import annotations

import json

import golden
from qsynth import MS, QBuilder
from scenarios import run

STATS = {"q:user-seconds": 32.9, "q:system-seconds": 0.5, "q:voluntary-switches": 10}


def machine(tmp_path, kernel_only: bool = False, idle_weight: bool = True) -> QBuilder:
    q = QBuilder(tmp_path / ".q")
    cmdline = ["q-syscollect", "-k"] if kernel_only else ["q-syscollect", "-t", "60"]
    common = {"syscollect_cmdline": cmdline}
    # xz -T2: one process on both CPUs, its process-wide counters in both sets
    q.task("xz", 70, 0, hist={0x1000: 40 * MS}, extra_info={**common, "task_stats": STATS})
    q.task("xz", 70, 1, hist={0x1000: 30 * MS},
           extra_info={**common, "task_stats": {**STATS, "q:user-seconds": 20.0}})
    # short-lived sh processes folded per CPU: different pids, counters add up
    q.task("sh", None, 0, hist={0x1000: 2 * MS}, pids=[300, 301],
           extra_info={**common, "task_stats": {"q:user-seconds": 0.1}})
    q.task("sh", None, 1, hist={0x1000: 3 * MS}, pids=[302],
           extra_info={**common, "task_stats": {"q:user-seconds": 0.2}})
    for cpu, idle in ((0, 10), (1, 15)):
        # with -k, 5 ms of each kernel set are other pids' kernel work
        extra = {"q:idle-weight": idle * MS} if kernel_only and idle_weight else {}
        q.task("kernel", None, cpu, hist={0xFFFFFFFF81000000: (idle + 5 * kernel_only) * MS},
               comm="kernel", objects=[], extra_info={**common, "extra": extra, "cpu_stats": {
                   "q:busy": 0.5, "q:seconds": 0.05, "q:frequency-mhz": 2400.0}})
    return q


def test_one_row_per_process_and_idle_apart(tmp_path):
    q = machine(tmp_path)
    code, out, err = run(str(q.path))
    assert (code, err) == (0, "")
    golden.check("overview-processes.txt", out.replace(str(q.path), ".q"))
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:5]}
    # xz's counters once (the widest set's), not 32.9 + 20.0
    assert rows["xz"][:4] == ["xz", "70", "0,1", "70.0m"] and "32.9" in rows["xz"]
    assert rows["sh"][:4] == ["sh", "3", "pids", "0,1"] and "0.300" in rows["sh"]
    assert rows["idle"][:4] == ["idle", "0", "0,1", "25.0m"]
    # the CPU table: the CPU's counters; sampled idle over its seconds in JSON
    assert "   0   50.0%       -       -   50.0%     2400        0" in out
    doc = json.loads(run(str(q.path), "--overview", "--format", "json")[1])
    assert [(c["cpu"], c["busy"], c["idle"], c["sampled_idle"]) for c in doc["cpus"]] == \
        [(0, 0.5, 0.5, 0.2), (1, 0.5, 0.5, 0.3)]
    _c, per_cpu, _e = run(str(q.path), "--per-cpu")
    assert sum(line.startswith("xz ") for line in per_cpu.splitlines()) == 2
    assert sum(line.startswith("idle ") for line in per_cpu.splitlines()) == 2


def test_a_kernel_only_collection_has_idle_and_kernel_rows(tmp_path):
    q = machine(tmp_path, kernel_only=True)
    _c, out, _e = run(str(q.path))
    lines = out.splitlines()
    assert any(line.startswith("kernel         -  0,1    10.0m") for line in lines), out
    assert any(line.startswith("idle           0  0,1    25.0m") for line in lines), out
    doc = json.loads(run(str(q.path), "--overview", "--format", "json")[1])
    assert doc["cpus"][0]["sampled_idle"] == 0.2  # idle 10 ms of the CPU's 50 ms
    # sets written before q:idle-weight: one kernel row, idle unknown
    q = machine(tmp_path / "old", kernel_only=True, idle_weight=False)
    _c, out, _e = run(str(q.path))
    assert any(line.startswith("kernel         -  0,1    35.0m") for line in out.splitlines())
    assert "idle " not in out.split("\n\n")[0]
    doc = json.loads(run(str(q.path), "--overview", "--format", "json")[1])
    assert doc["cpus"][0]["sampled_idle"] is None


def test_a_cpu_without_kernel_samples_leaves_idle_apart(tmp_path):
    """With -k, a CPU that spent the run in user code has a kernel set for
    its statistics only (no samples, no q:idle-weight): the others' idle
    still shows apart."""
    q = machine(tmp_path, kernel_only=True)
    q.task("kernel", None, 2, hist={}, comm="kernel", objects=[], extra_info={
        "syscollect_cmdline": ["q-syscollect", "-k"], "samples": 0,
        "extra": {"q:purpose": "cpu-stats"},
        "cpu_stats": {"q:busy": 1.0, "q:seconds": 0.05, "q:frequency-mhz": 2400.0}})
    _c, out, _e = run(str(q.path))
    lines = out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:6]}
    assert rows["idle"][:4] == ["idle", "0", "0,1,2", "25.0m"], out
    assert rows["kernel"][:4] == ["kernel", "-", "0,1,2", "10.0m"], out


def test_a_set_without_samples_keeps_the_shares(tmp_path):
    from qtools.qformat import Info, QDir, TaskInfo, dump_info
    q = machine(tmp_path)
    with QDir.open(q.path) as d:  # a version claimed by an older collector: no data yet
        d.atomic_write("late-pid99-cpu0.info#0", dump_info(Info(task=TaskInfo(
            comm="late", pid=99, cpu=0, samples=0))).encode())
    _c, out, _e = run(str(q.path))
    late = next(line for line in out.splitlines() if line.startswith("late"))
    assert late.split()[3:5] == ["0.00", "0.00"]  # seconds and %, not "0.00 events" and "-"
    assert "total                    0.100 100.00" in out


def test_an_aggregate_that_folded_more_pids_than_it_lists_says_so(tmp_path):
    """q:pids-not-listed: the overview's pid column says "+", and a --pid
    that no set lists names the aggregates it may be among."""
    q = QBuilder(tmp_path / ".q")
    q.task("sh", None, 0, hist={0x1000: 2 * MS}, pids=[300, 301],
           extra_info={"extra": {"q:pids-not-listed": 7}})
    q.task("sh", None, 1, hist={0x1000: 3 * MS}, pids=[302])
    q.task("ls", None, 0, hist={0x1000: 1 * MS}, pids=[400])
    code, out, err = run(str(q.path))
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:5]}
    assert rows["sh"][:3] == ["sh", "3+", "pids"] and rows["ls"][:3] == ["ls", "1", "pids"]
    code, out, err = run(str(q.path), "--pid", "999")
    assert code != 0 and err.count("\n") == 1, err
    assert "no task set matches --pid 999; aggregates folded more pids than they list" in err
    assert err.rstrip().endswith(": sh"), err
    assert run(str(q.path), "--pid", "301")[0] == 0
