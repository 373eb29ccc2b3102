"""--format pprof and otlp of a real collection: decoded with their schemas
they hold q-view's flat profile, and `go tool pprof -top` agrees with it."""

from __future__ import annotations

import os

import pytest
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb

from exports import flat_of_json, go_or_skip, go_pprof_top, pprof_flat, pprof_name, \
    pprof_profile
from qtools.qformat import read_info
from tests.conftest import OWN_SETS, q_syscollect, q_view


def test_exports_of_a_real_collection(perf, build, tmp_path):
    """Exact comparisons: the export and the JSON report read the same files."""
    pfan = build("p-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), *OWN_SETS, "--", str(pfan), "1")
    assert r.returncode == 0, r.stderr
    select = ("--comm", pfan.name)
    want_total, want = flat_of_json(str(q), *select)
    assert want_total > 0

    pprof_file = tmp_path / "p.pb.gz"
    proc = q_view(str(q), *select, "--format", "pprof", "-o", str(pprof_file))
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

    go = go_or_skip()
    top = go_pprof_top(go, pprof_file, tmp_path / "home")
    shares = {pprof_name(n): 100 * v / want_total for n, v in want.items()}
    # pprof -top leaves out nodes under 0.5% of the total: rows of 1% and more
    for name, share in shares.items():
        if share >= 1:
            assert top.get(name) == pytest.approx(share, abs=0.011), name
    for name, share in top.items():
        if share >= 1:
            assert shares.get(name) == pytest.approx(share, abs=0.011), name
