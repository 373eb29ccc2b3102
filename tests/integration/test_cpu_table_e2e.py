"""The overview's CPU table on a real system-wide run with one CPU kept
busy: each CPU's busy, steal, iowait and idle add up to 100%, and the
busy CPU shows busy (steal apart: a hypervisor's time is not its own)."""

from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import q_syscollect, q_view


def test_each_cpus_shares_add_up_on_a_real_run(perf, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    loaded = cpus[-1]
    spin = subprocess.Popen(["taskset", "-c", str(loaded), "sh", "-c", "while :; do :; done"])
    try:
        r = q_syscollect("-d", str(tmp_path / "q"), "-t", "3")
    finally:
        spin.kill()
        spin.wait()
    assert r.returncode == 0, r.stderr
    text = q_view(str(tmp_path / "q"))
    assert text.returncode == 0, text.stderr
    head = " cpu    busy   steal  iowait    idle      MHz     lost"
    table = text.stdout.split(head + "\n")[1].split("\n\n")[0].splitlines()
    assert len(table) == len(cpus), text.stdout
    for line in table:
        shares = [float(c.rstrip("%")) for c in line.split()[1:5]]
        assert abs(sum(shares) - 100) <= 0.2, line  # each shown to 0.1%
    doc = json.loads(q_view(str(tmp_path / "q"), "--overview", "--format", "json").stdout)
    rows = {c["cpu"]: c for c in doc["cpus"]}
    for c in rows.values():
        assert abs(c["busy"] + c["steal"] + c["iowait"] + c["idle"] - 1) <= 1e-3, c
    # the spinning shell ran on its CPU the whole time, others' work too
    assert rows[loaded]["busy"] + rows[loaded]["steal"] >= 0.9, rows[loaded]
