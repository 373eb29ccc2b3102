"""--format pprof and otlp of a real collection: decoded with their schemas
they hold q-view's flat profile, and `go tool pprof -top` agrees with it;
with --off-cpu, each thread's samples under its thread label."""

from __future__ import annotations

import math
import os

import pytest
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb

from exports import flat_of_json, go_or_skip, go_pprof_top, pprof_by_thread, pprof_flat, \
    pprof_name, pprof_percent, pprof_profile
from test_offcpu_e2e import PERIOD, collect, per_thread
from qtools.qformat import read_info
from tests.conftest import OWN_SETS, q_syscollect, q_view


def test_exports_of_a_real_collection(perf, build, tmp_path):
    """Exact comparisons: the export and the JSON report read the same files."""
    pfan = build("p-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), *OWN_SETS, "--", str(pfan), "1")
    assert r.returncode == 0, r.stderr
    select = ("--comm", pfan.name)
    # pprof credits a location's self time to its first Line: the export's
    # leaf lines are the report's, its inlined functions' only with --inline
    pprof_file = tmp_path / "p.pb.gz"
    for inline in ([], ["--inline"]):
        want_total, want = flat_of_json(str(q), *select, *inline)
        assert want_total > 0
        proc = q_view(str(q), *select, "--format", "pprof", "-o", str(pprof_file), *inline)
        assert proc.returncode == 0, proc.stderr
        p = pprof_profile(pprof_file)
        total, selfs = pprof_flat(p)
        assert total == pytest.approx(want_total, rel=1e-6)
        assert selfs == pytest.approx(want, rel=1e-6, abs=1e-9)
    # the span of the sets exported, as their .info files give it
    spans = [(i.task.start_time, i.task.end_time) for n in os.listdir(q)
             if n.startswith(pfan.name) and ".info#" in n for i in [read_info(q / n)]]
    start, end = min(a for a, _b in spans), max(b for _a, b in spans)
    assert p.time_nanos == pytest.approx(start * 1e9, abs=1e3)
    assert p.duration_nanos == pytest.approx((end - start) * 1e9, abs=1e3) and end > start
    st = p.string_table
    mappings = {m.id: m for m in p.mapping}
    for loc in p.location:  # every address lies in its mapping
        if loc.mapping_id:
            m = mappings[loc.mapping_id]
            assert m.memory_start <= loc.address < m.memory_limit or (
                st[m.filename] == "[kernel.kallsyms]" and loc.address >= m.memory_start)
    assert str(pfan) in {st[m.filename] for m in p.mapping}
    labels = {(st[lb.key], st[lb.str]) for s in p.sample for lb in s.label}
    assert ("comm", pfan.name) in labels and any(k == "pid" for k, _v in labels)

    otlp_file = tmp_path / "p.otlp"
    proc = q_view(str(q), *select, "--format", "otlp", "-o", str(otlp_file))
    assert proc.returncode == 0, proc.stderr
    data = pb.ProfilesData()
    data.ParseFromString(otlp_file.read_bytes())
    d = data.dictionary
    event_total = 0.0
    for rp in data.resource_profiles:
        event = rp.scope_profiles[0].profiles[0]
        assert d.string_table[event.sample_type.unit_strindex] == "nanoseconds"
        event_total += sum(s.values[0] for s in event.samples) * 1e-9
    assert event_total == pytest.approx(want_total, rel=1e-6)

    _top_agrees(go_or_skip(), pprof_file, tmp_path / "home", want_total, want)


def _exported_by_tid(q, comm: str, out, *options: str) -> tuple[dict, dict]:
    """Seconds and thread name per tid (None: no thread label) of a pprof export."""
    proc = q_view("-d", str(q), "--comm", comm, "--format", "pprof", "-o", str(out), *options)
    assert proc.returncode == 0, proc.stderr
    assert "do not add up" not in proc.stderr, proc.stderr
    seconds: dict[int | None, float] = {}
    names: dict[int | None, str | None] = {}
    for (_pid, tid, name), value in pprof_by_thread(pprof_profile(out)).items():
        seconds[tid] = seconds.get(tid, 0.0) + value
        names[tid] = name
    return seconds, names


def _top_agrees(go: str, path, home, want_total: float, want: dict[str, float]) -> None:
    top = go_pprof_top(go, path, home)
    shares = {pprof_name(n): 100 * v / want_total for n, v in want.items()}
    # pprof -top leaves out nodes under 0.5% of the total: rows of 1% and more
    for name, share in shares.items():
        if share >= 1:
            assert top.get(name) == pytest.approx(pprof_percent(share), abs=0.011), name
    for name, share in top.items():
        if share >= 1:
            assert pprof_percent(shares.get(name, 0.0)) == pytest.approx(share, abs=0.011), name


def test_thread_labels_of_a_real_collection(perf, build, tmp_path):
    """Two spinners pinned to one CPU (tests/workloads/offcpu.c, pinned).
    Their CPU samples are exported under their tids and names; each one's
    seconds are q-view --tid's (the same `.threads` lines: only samples
    whose stack was not kept, placed on their leaves without a thread where
    several threads had such, may move between them); each has about half
    of the process's CPU (4 sigma of the binomial share of the sampled
    counts, floor 3%). --metric cpu-wait exports per thread what q-view
    shows, and go tool pprof -top agrees with q-view's flat profile."""
    q, comm, threads = collect(build, tmp_path, "pinned")
    seconds, names = _exported_by_tid(q, comm, tmp_path / "cpu.pb.gz")
    total = sum(seconds.values())
    flat_total, _selfs = flat_of_json(str(q), "--comm", comm)
    assert total == pytest.approx(flat_total, rel=1e-6)
    unlabeled = seconds.get(None, 0.0)
    spinners = 0.0
    for name in ("spin-a", "spin-b"):
        tid, _elapsed = threads[name]
        assert names[tid] == name
        want, _ = flat_of_json(str(q), "--comm", comm, "--tid", str(tid))
        assert abs(seconds[tid] - want) <= unlabeled + 1e-6, (name, seconds[tid], want)
        spinners += seconds[tid]
    samples = spinners / PERIOD
    for name in ("spin-a", "spin-b"):
        share = seconds[threads[name][0]] / spinners
        assert abs(share - 0.5) <= max(0.03, 4 * math.sqrt(0.25 / samples)), (name, share)

    waits, _names = _exported_by_tid(q, comm, tmp_path / "wait.pb.gz", "--metric", "cpu-wait")
    want_waits = per_thread(q, comm, "cpu-wait")
    assert waits.keys() == want_waits.keys()
    for tid, value in want_waits.items():
        assert waits[tid] == pytest.approx(value, rel=1e-6, abs=1e-9), tid
    wait_total, wait_selfs = flat_of_json(str(q), "--comm", comm, "--metric", "cpu-wait")
    assert sum(waits.values()) == pytest.approx(wait_total, rel=1e-6)
    _top_agrees(go_or_skip(), tmp_path / "wait.pb.gz", tmp_path / "home", wait_total,
                wait_selfs)
