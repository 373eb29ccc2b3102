"""Services and containers in q-view: --unit selects the sets whose samples
ran in a unit or container, --group unit makes the overview's rows units,
and JSON and exports carry unit and container."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exports import pprof_profile
from qsynth import MS, QBuilder
from scenarios import KALLSYMS, run
from tests.conftest import q_view

ID = "4f7a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
DOCKER = f"docker-{ID}.scope"


def _cg(path: str, unit: str | None, container: str | None = None) -> dict:
    return {"cgroup": path, "unit": unit, "container": container}


@pytest.fixture
def services(tmp_path, calls_pie) -> Path:
    """nginx.service (two processes), a docker container, a process of a
    collection that recorded no cgroup, and the idle task."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.add_kallsyms(KALLSYMS)
    main = [o.ret("main"), o.ret("_start")]
    nginx = _cg("/system.slice/nginx.service", "nginx.service")
    q.task("nginx", 10, 0, stacks=[(3 * MS, [o.at("leaf1"), o.ret("work")] + main)],
           extra_info=nginx)
    q.task("nginx", 11, 1, stacks=[(1 * MS, [o.at("leaf2")] + main)], extra_info=nginx)
    q.task("worker", 20, 0, stacks=[(2 * MS, [o.at("leaf2")] + main)],
           extra_info=_cg(f"/system.slice/{DOCKER}", DOCKER, ID))
    q.task("old", 30, 1, stacks=[(1 * MS, [o.at("leaf1")] + main)])
    q.task("kernel", None, 0, stacks=[(2 * MS, [0xFFFFFFFF81005010])], comm="kernel",
           objects=[])
    return q.path


def _tasks(out: str) -> list[tuple[int, str | None, str | None]]:
    return sorted((t["pid"], t["unit"], t["container"]) for t in json.loads(out)["tasks"]
                  if t["pid"] is not None)


@pytest.mark.parametrize("unit, pids", [
    ("nginx.service", [10, 11]),
    ("nginx*", [10, 11]),
    ("*.scope", [20]),
    (ID[:12], [20]),  # a container by its short id, as docker ps shows it
    (ID, [20]),
    ("/system.slice/*", [10, 11, 20]),  # a glob on the cgroup path
])
def test_unit_selects_sets(services, unit, pids):
    code, out, err = run(str(services), "--unit", unit, "--format", "json")
    assert (code, err) == (0, "")
    assert [p for p, _u, _c in _tasks(out)] == pids


def test_json_tasks_carry_unit_and_container(services):
    code, out, err = run(str(services), "--format", "json")
    assert (code, err) == (0, "")
    tasks = _tasks(out)
    assert (10, "nginx.service", None) in tasks and (20, DOCKER, ID) in tasks
    assert (30, None, None) in tasks


def test_unknown_unit_says_what_there_is(services):
    code, out, err = run(str(services), "--unit", "mysql.service", "--flat")
    assert (code, out) == (1, "")
    assert err == (f"q-view: {services}: no task set matches --unit mysql.service; units there: "
                   f"{DOCKER}, nginx.service\n")


def test_overview_grouped_by_unit(services):
    code, out, err = run(str(services), "--group", "unit")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[1].split()[:2] == ["unit", "pid"] and lines[1].split()[-1] == "commands"
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.strip()}
    assert rows["nginx.service"][1:3] == ["2", "procs"]
    assert rows["nginx.service"][-1] == "nginx"
    assert rows[DOCKER][1:3] == ["1", "proc"] and rows[DOCKER][-1] == "worker"
    assert rows["-"][-1] == "old"  # recorded no cgroup
    assert "idle" in rows
    # largest first: nginx's 4 ms, the idle task's 2 ms, the container's 2 ms, old's 1 ms
    firsts = [line.split()[0] for line in lines[2:] if line.strip()]
    assert firsts.index("nginx.service") < firsts.index(DOCKER) < firsts.index("-")
    doc = json.loads(run(str(services), "--group", "unit", "--format", "json")[1])
    amounts = {r["command"]: r["amount"] for r in doc["sets"]}
    assert amounts["nginx.service"] == pytest.approx(4e-3)
    assert amounts[DOCKER] == pytest.approx(2e-3)
    # --unit narrows the grouped overview
    code, out, err = run(str(services), "--group", "unit", "--unit", "nginx*")
    assert (code, err) == (0, "")
    firsts = [line.split()[0] for line in out.splitlines()[2:] if line.strip()]
    assert "nginx.service" in firsts and DOCKER not in firsts


def test_pprof_labels_carry_unit_and_container(services, tmp_path):
    out = tmp_path / "p.pb.gz"
    proc = q_view(str(services), "--format", "pprof", "-o", str(out), "--no-cache")
    assert proc.returncode == 0, proc.stderr
    p = pprof_profile(out)
    st = p.string_table
    labels = [dict((st[lb.key], st[lb.str]) for lb in s.label) for s in p.sample]
    by_pid = {lb.get("pid"): lb for lb in labels}
    assert by_pid["10"]["unit"] == "nginx.service" and "container" not in by_pid["10"]
    assert (by_pid["20"]["unit"], by_pid["20"]["container"]) == (DOCKER, ID)
    assert "unit" not in by_pid["30"]
