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

from exports import flat_of_json, go_or_skip, go_pprof, go_pprof_top, pprof_by_thread, \
    pprof_flat, pprof_name, pprof_percent, pprof_profile
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


def test_exports_refuse_what_shapes_another_format(tmp_path, calls_pie):
    """Every filter goes with an export (test_filter_matrix.py); what shapes
    one other format's output, or sums rows an export does not have, is
    refused with one line naming the option."""
    q, _o, name = calls_dir(tmp_path, calls_pie)
    out = str(tmp_path / "p.pb.gz")
    for option in (["--stacks"], ["--min-percent", "5"], ["--per-pid"],
                   ["--weight", "samples"]):
        code, _out, err = run(q.info_path(name), "--format", "pprof", "-o", out, *option)
        assert code == 2 and option[0] in err and err.count("\n") == 1
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


# Threads (`.threads` files, docs/q-format.md 5.8): each exported sample
# carries its thread where the set has them; --metric and --tid export too.

KSLEEP = 0xFFFFFFFF81001010  # do_syscall_64: where the sleeps switch out


def threads_scenario(tmp_path: Path, calls_pie) -> tuple[QBuilder, dict[str, str]]:
    """Four sets of host alpha: pid 40 with two threads and off-CPU time; pid 50
    whose .threads does not add up to its .hist; pid 60 without one (an
    earlier release); pid 70 with a sample whose stack was not kept."""
    q = QBuilder(tmp_path / ".q")
    q.add_kallsyms(KALLSYMS)
    o = q.load(calls_pie)
    work = (o.at("leaf1"), o.ret("work"), o.ret("main"))
    sleep = (o.at("leaf2"), o.ret("main"))
    ksleep = (KSLEEP, o.at("leaf2"), o.ret("main"))
    host = {"hostname": "alpha"}
    names = {}
    names["40"] = q.task("calls", 40, 0, extra_info=host,
                         stacks=[(30 * MS, list(work)), (10 * MS, list(sleep))])
    q.threads(names["40"], {40: "calls", 41: "io worker"}, {
        ("cpu", 40, work): 20 * MS, ("cpu", 41, work): 10 * MS, ("cpu", 41, sleep): 10 * MS,
        ("S", 40, ksleep): 600 * MS, ("D", 41, ksleep): 300 * MS, ("S", 41, ()): 7 * MS,
        ("W", 41, sleep): 50 * MS})
    names["50"] = q.task("calls", 50, 1, extra_info=host, stacks=[(8 * MS, list(work))])
    q.threads(names["50"], {50: "calls"}, {("cpu", 50, work): 5 * MS,
                                            ("S", 50, ksleep): 100 * MS})
    names["60"] = q.task("calls", 60, 1, extra_info=host, stacks=[(3 * MS, list(sleep))])
    names["70"] = q.task("calls", 70, 0, extra_info=host, stacks=[(4 * MS, list(work))],
                         hist={work[0]: 4 * MS, sleep[0]: 2 * MS})
    stack = q.path / names["70"].replace(".info#", ".stack#")
    stack.write_bytes(stack.read_bytes() + b"%d -\n" % (2 * MS))  # a stack not kept
    q.threads(names["70"], {70: "calls", 71: "idle"},
              {("cpu", 70, work): 4 * MS, ("cpu", 70, ()): 2 * MS})
    return q, names


def _export(q: QBuilder, tmp_path: Path, fmt: str, *options: str) -> tuple[Path, str]:
    out = tmp_path / f"p{len(list(tmp_path.iterdir()))}.{fmt}"
    proc = q_view(str(q.path), "--format", fmt, "-o", str(out), *options)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return out, proc.stderr


def _same_flat(got: tuple[float, dict[str, float]], q: QBuilder, *options: str) -> None:
    total, selfs = got
    want_total, want = flat_of_json(str(q.path), *options)
    assert total == pytest.approx(want_total, rel=1e-9)
    assert selfs == pytest.approx(want, rel=1e-9)


def test_pprof_labels_each_threads_samples(tmp_path, calls_pie):
    q, names = threads_scenario(tmp_path, calls_pie)
    out, err = _export(q, tmp_path, "pprof")
    # told once: the set whose .threads does not add up, exported without threads
    assert err.count("do not add up") == 1 and names["50"] in err
    p = pprof_profile(out)
    st = p.string_table
    assert [(st[t.type], st[t.unit]) for t in p.sample_type] == [
        ("samples", "count"), ("cpu-clock", "nanoseconds")]
    got = pprof_by_thread(p)
    assert got == pytest.approx({
        ("40", 40, "calls"): 0.020, ("40", 41, "io worker"): 0.020,
        ("50", None, None): 0.008, ("60", None, None): 0.003,
        # the leaf the .hist has beyond the stacks: the one thread without a stack's
        ("70", 70, "calls"): 0.006}, rel=1e-9)
    # each thread's samples add up to the set's, counts too (1 ms a sample)
    counts: dict[tuple[str, int | None], int] = {}
    for s in p.sample:
        labels = {st[lb.key]: (st[lb.str] if lb.str else lb.num) for lb in s.label}
        assert ("thread_id" in labels) == ("thread" in labels)
        assert labels.get("thread_id", 0) == 0 or isinstance(labels["thread_id"], int)
        key = (labels["pid"], labels.get("thread_id"))
        counts[key] = counts.get(key, 0) + s.value[0]
    assert counts == {("40", 40): 20, ("40", 41): 20, ("50", None): 8, ("60", None): 3,
                      ("70", 70): 6}
    # one sample per distinct (labels, stack)
    keys = [(tuple(s.location_id), tuple((lb.key, lb.str, lb.num) for lb in s.label))
            for s in p.sample]
    assert len(keys) == len(set(keys))
    _same_flat(pprof_flat(p), q)


@pytest.mark.parametrize("event", ["off-cpu", "cpu-wait", "wall"])
def test_pprof_exports_time_off_the_cpu_by_thread(tmp_path, calls_pie, event):
    q, _names = threads_scenario(tmp_path, calls_pie)
    out, _err = _export(q, tmp_path, "pprof", "--metric", event)
    p = pprof_profile(out)
    st = p.string_table
    assert [(st[t.type], st[t.unit]) for t in p.sample_type] == [(event, "nanoseconds")]
    assert st[p.default_sample_type] == event
    assert all(len(s.value) == 1 for s in p.sample)
    want = {"off-cpu": {("40", 40, "calls"): 0.6, ("40", 41, "io worker"): 0.307,
                        ("50", 50, "calls"): 0.1},
            "cpu-wait": {("40", 41, "io worker"): 0.05},
            "wall": {("40", 40, "calls"): 0.62, ("40", 41, "io worker"): 0.377,
                     ("50", 50, "calls"): 0.105, ("70", 70, "calls"): 0.006}}[event]
    assert pprof_by_thread(p) == pytest.approx(want, rel=1e-9)
    _same_flat(pprof_flat(p), q, "--metric", event)
    if event == "off-cpu":
        # the 7 ms without a stack, under its thread as q-view shows it
        assert "[stacks not kept]" in pprof_flat(p)[1]


def test_tid_and_no_kernel_select_in_exports(tmp_path, calls_pie):
    q, _names = threads_scenario(tmp_path, calls_pie)
    for options in (["--tid", "41"], ["--tid", "41", "--metric", "off-cpu"],
                    ["--metric", "off-cpu", "--no-kernel"], ["--metric", "wall", "--kernel-only"],
                    ["--no-kernel"]):
        out, _err = _export(q, tmp_path, "pprof", *options)
        p = pprof_profile(out)
        _same_flat(pprof_flat(p), q, *options)
        if "--tid" in options:
            assert {k[1] for k in pprof_by_thread(p)} == {41}
    # off-CPU stacks start in the kernel: without it the time stays with the user code
    out, _err = _export(q, tmp_path, "pprof", "--metric", "off-cpu", "--no-kernel")
    total, selfs = pprof_flat(pprof_profile(out))
    assert total == pytest.approx(1.007) and selfs["leaf2"] == pytest.approx(1.0)


def test_go_tool_pprof_shows_the_off_cpu_flat_profile_and_thread_labels(tmp_path, calls_pie):
    go = go_or_skip()
    q, _names = threads_scenario(tmp_path, calls_pie)
    out, _err = _export(q, tmp_path, "pprof", "--metric", "off-cpu")
    top = go_pprof_top(go, out, tmp_path / "home")
    total, selfs = flat_of_json(str(q.path), "--metric", "off-cpu")
    want = {pprof_name(n): pprof_percent(100 * v / total) for n, v in selfs.items()}
    assert top.keys() == want.keys()
    for name, share in want.items():
        assert top[name] == pytest.approx(share, abs=0.011), name
    raw = go_pprof(go, out, tmp_path / "home", "-raw")
    assert "thread:[io worker]" in raw and "thread_id:[41]" in raw
    # pprof's own selection by thread: 0.307 s of the 1.007 s
    one = go_pprof(go, out, tmp_path / "home", "-top", "-tagfocus=thread_id=41")
    assert re.search(r"30\.49% of 1\.01s total|307ms, 30\.49% of 1007ms total", one), one


def test_otlp_carries_thread_id_and_name(tmp_path, calls_pie):
    from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb
    q, _names = threads_scenario(tmp_path, calls_pie)
    for event in ("cpu", "off-cpu"):
        out, _err = _export(q, tmp_path, "otlp", "--metric", event)
        data = pb.ProfilesData()
        data.ParseFromString(out.read_bytes())
        d = data.dictionary
        st = d.string_table
        (resource,) = data.resource_profiles
        profiles = resource.scope_profiles[0].profiles
        assert [(st[x.sample_type.type_strindex], st[x.sample_type.unit_strindex])
                for x in profiles] == ([("cpu-clock", "nanoseconds"), ("samples", "count")]
                                       if event == "cpu" else [("off-cpu", "nanoseconds")])
        per: dict[tuple[int | None, str | None], float] = {}
        for s in profiles[0].samples:
            attrs = {st[d.attribute_table[i].key_strindex]: d.attribute_table[i].value
                     for i in s.attribute_indices}
            key = (attrs["thread.id"].int_value if "thread.id" in attrs else None,
                   attrs["thread.name"].string_value if "thread.name" in attrs else None)
            per[key] = per.get(key, 0.0) + s.values[0] * 1e-9
        want = {"cpu": {(40, "calls"): 0.02, (41, "io worker"): 0.02, (None, None): 0.011,
                        (70, "calls"): 0.006},
                "off-cpu": {(40, "calls"): 0.6, (41, "io worker"): 0.307,
                            (50, "calls"): 0.1}}[event]
        assert per == pytest.approx(want, rel=1e-9)


def test_a_bad_threads_file_is_exported_without_thread_labels(tmp_path, calls_pie):
    """The CPU profile does not need the `.threads` file: a bad line in it
    is named, once, and the set exported from its `.stack` as before."""
    q, names = threads_scenario(tmp_path, calls_pie)
    tfile = q.path / names["40"].replace(".info#", ".threads#")
    tfile.write_bytes(tfile.read_bytes() + b"cpu 41 12 0xzz\n")
    out, err = _export(q, tmp_path, "pprof")
    assert f"{tfile.name}:" in err and "bad address" in err and "without thread labels" in err
    assert err.count(tfile.name) == 1
    got = pprof_by_thread(pprof_profile(out))
    assert got[("40", None, None)] == pytest.approx(0.04)
    assert not [k for k in got if k[0] == "40" and k[1] is not None]
    _same_flat(pprof_flat(pprof_profile(out)), q)
    # --by thread reads every sample from the `.threads` files, as the report does:
    # the bad line is an error there as it is in q-view's own --by thread
    by_thread = tmp_path / "by-thread.pb.gz"
    code, _out, err = run(str(q.path), "--format", "pprof", "-o", str(by_thread),
                          "--by", "thread")
    report_code, _out, report_err = run(str(q.path), "--flat", "--by", "thread")
    assert (code, err) == (report_code, report_err) and code == 1 and tfile.name in err
