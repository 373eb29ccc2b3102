"""--format pprof and --format otlp on synthetic sets: the files decode with
their schemas and hold q-view's flat profile; `go tool pprof` reads the same."""

from __future__ import annotations

import os
import pty
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from exports import flat_of_json, go_or_skip, go_pprof, go_pprof_top, pprof_flat, pprof_name, \
    pprof_profile
from qsynth import MS, QBuilder
from scenarios import EXE, KALLSYMS, calls_dir, run
from tests.conftest import q_view

START = 1_700_000_000.0


def scenario(tmp_path: Path, calls_pie, stripped_plain) -> QBuilder:
    """calls (with its symbols) on two CPUs of host alpha, kernel frames, and the
    stripped calls as a second process."""
    q, o, _name = calls_dir(tmp_path, calls_pie, extra_info={
        "hostname": "alpha", "start_time": START, "end_time": START + 10})
    q.add_kallsyms(KALLSYMS)
    q.task("calls", 1234, 1, exe=EXE, extra_info={"hostname": "alpha"},
           stacks=[(3 * MS, [0xFFFFFFFFC0001010, 0xFFFFFFFF81001010, o.ret("main")]),
                   (MS, [o.at("leaf1")])])
    _full, bare = stripped_plain
    s = q.load(bare, base=0x7F0000000000, path="/opt/demo/calls-stripped")
    q.task("strip", 77, 0, objects=[s], extra_info={"hostname": "alpha", "start_time": START + 2,
                                                     "end_time": START + 12},
           stacks=[(4 * MS, [s.link(_full.functions["leaf2"][0]) + 1,
                                  s.link(_full.functions["_start"][0]) + 2])])
    return q


def test_pprof_holds_the_flat_profile_with_mappings_and_labels(tmp_path, calls_pie,
                                                              stripped_plain):
    q = scenario(tmp_path, calls_pie, stripped_plain)
    out = tmp_path / "p.pb.gz"
    proc = q_view(str(q.path), "--format", "pprof", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    p = pprof_profile(out)
    st = p.string_table
    assert st[0] == "" and len(set(st)) == len(st)  # deduplicated
    assert [(st[t.type], st[t.unit]) for t in p.sample_type] == [
        ("samples", "count"), ("cpu-clock", "nanoseconds")]
    assert st[p.default_sample_type] == "cpu-clock"
    assert p.time_nanos == int(START * 1e9) and p.duration_nanos == 12 * 10**9
    total, selfs = pprof_flat(p)
    want_total, want = flat_of_json(str(q.path))
    assert total == pytest.approx(want_total, rel=1e-9)
    assert selfs.keys() == want.keys()
    for name, value in want.items():
        assert selfs[name] == pytest.approx(value, rel=1e-9), name
    # one sample per distinct stack of a set; sample counts at 1 ms a sample
    assert sum(s.value[0] for s in p.sample) == round(want_total / 1e-3)
    keys = [(tuple(s.location_id), tuple((st[lb.key], st[lb.str]) for lb in s.label))
            for s in p.sample]
    assert len(keys) == len(set(keys))
    labels = {tuple(sorted((st[lb.key], st[lb.str]) for lb in s.label)) for s in p.sample}
    assert (("comm", "calls"), ("cpu", "1"), ("host", "alpha"), ("pid", "1234")) in labels
    assert (("comm", "strip"), ("cpu", "0"), ("host", "alpha"), ("pid", "77")) in labels

    mappings = {m.id: m for m in p.mapping}
    funcs = {f.id: st[f.name] for f in p.function}
    by_name = {funcs[loc.line[0].function_id]: loc for loc in p.location}
    kernel = mappings[by_name["ext4_file_read_iter"].mapping_id]
    assert st[kernel.filename] == "[kernel.kallsyms]"
    assert kernel.memory_start <= 0xFFFFFFFFC0001010 < kernel.memory_limit
    assert by_name["ext4_file_read_iter"].address == 0xFFFFFFFFC0001010
    # the stripped object's function is named by its unwind entry, in its own mapping
    _full, bare = stripped_plain
    bare_name = next(n for n in funcs.values() if n.endswith("<calls-fde-stripped>"))
    loc = by_name[bare_name]
    m = mappings[loc.mapping_id]
    assert st[m.filename] == "/opt/demo/calls-stripped"
    assert st[m.build_id] == bare.build_id
    assert m.memory_start <= loc.address < m.memory_limit
    ref = next(o.ref for o in q.objects if o.binary is bare)
    (first,) = [r for r in ref.maps if r.contains(loc.address)]
    assert (m.memory_start, m.memory_limit, m.file_offset) == (
        first.addr, first.addr + first.size, first.offset)
    main = mappings[by_name["main"].mapping_id]
    assert st[main.filename] == str(calls_pie.path) and st[main.build_id] == calls_pie.build_id


def test_go_tool_pprof_shows_q_views_flat_profile(tmp_path, calls_pie, stripped_plain):
    go = go_or_skip()
    q = scenario(tmp_path, calls_pie, stripped_plain)
    out = tmp_path / "p.pb.gz"
    assert q_view(str(q.path), "--format", "pprof", "-o", str(out)).returncode == 0
    top = go_pprof_top(go, out, tmp_path / "home")
    total, selfs = flat_of_json(str(q.path))
    want = {pprof_name(n): round(100 * v / total, 2) for n, v in selfs.items()}
    assert top.keys() == want.keys()
    for name, share in want.items():
        assert top[name] == pytest.approx(share, abs=0.011), name
    # pprof's own reading of the mappings and labels
    raw = go_pprof(go, out, tmp_path / "home", "-raw")
    mappings = raw[raw.index("\nMappings\n"):]
    # (pprof merges mappings of one build-id and size: the stripped copy is calls')
    assert re.search(r"^\d+: 0x\w+/0xffffffffffffffff/0x0 \[kernel.kallsyms\] ", mappings,
                     re.M), mappings
    assert "comm:[strip] cpu:[0] host:[alpha] pid:[77]" in raw


def test_otlp_holds_the_flat_profile(tmp_path, calls_pie, stripped_plain):
    from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb
    q = scenario(tmp_path, calls_pie, stripped_plain)
    out = tmp_path / "p.otlp"
    proc = q_view(str(q.path), "--format", "otlp", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    data = pb.ProfilesData()
    data.ParseFromString(out.read_bytes())
    d = data.dictionary
    st = d.string_table
    assert st[0] == "" and len(set(st)) == len(st)
    for table in (d.mapping_table, d.location_table, d.function_table, d.stack_table,
                  d.attribute_table):
        assert table[0] == type(table[0])()  # the zero value first
    (resource,) = data.resource_profiles
    assert [(a.key, a.value.string_value) for a in resource.resource.attributes] == [
        ("host.name", "alpha")]
    event, count = resource.scope_profiles[0].profiles
    assert (st[event.sample_type.type_strindex], st[event.sample_type.unit_strindex]) == (
        "cpu-clock", "nanoseconds")
    assert (st[count.sample_type.type_strindex], st[count.sample_type.unit_strindex]) == (
        "samples", "count")
    assert event.time_unix_nano == int(START * 1e9) and event.duration_nano == 12 * 10**9
    selfs: dict[str, float] = {}
    for s in event.samples:
        leaf = d.location_table[d.stack_table[s.stack_index].location_indices[0]]
        name = st[d.function_table[leaf.lines[0].function_index].name_strindex]
        selfs[name] = selfs.get(name, 0.0) + s.values[0] * 1e-9
    want_total, want = flat_of_json(str(q.path))
    assert sum(selfs.values()) == pytest.approx(want_total, rel=1e-9)
    assert selfs == pytest.approx(want, rel=1e-9)
    assert sum(s.values[0] for s in count.samples) == round(want_total / 1e-3)
    attrs = {(st[a.key_strindex], a.value.WhichOneof("value"),
              getattr(a.value, a.value.WhichOneof("value") or "string_value"))
             for a in d.attribute_table[1:]}
    assert ("process.pid", "int_value", 77) in attrs
    assert ("process.executable.build_id.gnu", "string_value", calls_pie.build_id) in attrs


def test_no_kernel_and_kernel_only_match_the_flat_profile(tmp_path, calls_pie, stripped_plain):
    q = scenario(tmp_path, calls_pie, stripped_plain)
    for option in ("--no-kernel", "--kernel-only"):
        out = tmp_path / f"p{option}.pb.gz"
        assert q_view(str(q.path), "--format", "pprof", option, "-o", str(out)).returncode == 0
        total, selfs = pprof_flat(pprof_profile(out))
        want_total, want = flat_of_json(str(q.path), option)
        assert total == pytest.approx(want_total, rel=1e-9)
        assert selfs == pytest.approx(want, rel=1e-9)


def test_binary_formats_refuse_a_terminal(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    for fmt in ("pprof", "otlp"):
        master, slave = pty.openpty()
        try:
            proc = q_view(q.info_path(name), "--format", fmt, capture_output=False,
                          stdout=slave, stderr=subprocess.PIPE)
        finally:
            os.close(slave)
            os.close(master)
        assert proc.returncode == 2
        assert "-o FILE" in proc.stderr and "Traceback" not in proc.stderr
    # a pipe is not a terminal: the bytes go through
    proc = subprocess.run([shutil.which("gzip") or "gzip", "-t"], input=q_view(
        q.info_path(name), "--format", "pprof", text=False).stdout, capture_output=True)
    assert proc.returncode == 0


def test_exports_refuse_report_options(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    out = str(tmp_path / "p.pb.gz")
    for option in (["--focus", "main"], ["--python"], ["--by", "object"], ["--stacks"]):
        code, _out, err = run(q.info_path(name), "--format", "pprof", "-o", out, *option)
        assert code == 2 and option[0] in err
    assert not os.path.exists(out)


def test_output_option_writes_text_reports_too(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    out = tmp_path / "flat.txt"
    code, printed, err = run(q.info_path(name), "--flat", "-o", str(out))
    assert code == 0 and printed == "", err
    assert "leaf1" in out.read_text()


def test_the_lowest_kernel_address_as_a_return_address_lies_in_the_kernel_mapping(
        tmp_path, calls_pie):
    """q:kernel-from is the set's lowest kernel address; a return address is
    written at address-1, so the kernel mapping starts one below it."""
    q, o, _name = calls_dir(tmp_path, calls_pie)
    q.add_kallsyms(KALLSYMS)
    low = 0xFFFFFFFF81001010
    q.task("calls", 1234, 1, exe=EXE, extra_info={"kernel_from": low},
           stacks=[(MS, [0xFFFFFFFFC0001010, low, o.ret("main")])])
    out = tmp_path / "p.pb.gz"
    proc = q_view(str(q.path), "--pid", "1234", "--format", "pprof", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    p = pprof_profile(out)
    mappings = {m.id: m for m in p.mapping}
    kernel = [loc for loc in p.location if loc.mapping_id in mappings
              and p.string_table[mappings[loc.mapping_id].filename] == "[kernel.kallsyms]"]
    assert {loc.address for loc in kernel} == {0xFFFFFFFFC0001010, low - 1}
    for loc in kernel:
        m = mappings[loc.mapping_id]
        assert m.memory_start <= loc.address < m.memory_limit
