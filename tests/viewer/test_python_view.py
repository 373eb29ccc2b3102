"""q-view on Python stacks: CPython's py::NAME:FILE frames from a perf map
or a jitdump copy, the --python view, and the per-process stack quality."""

from __future__ import annotations

import json
from pathlib import Path

from qsynth import MS, QBuilder
from scenarios import run
from qtools.qformat import read_info
from qtools.qformat.jit.jitdump import CodeLoad, Header, encode, encode_header, synthetic_address
from qtools.viewer.naming.addrspace import AddressSpace
from qtools.viewer.naming.symbols import Symbols
from qtools.viewer.naming.symcache import SymbolCache

PERF_MAP = ("7f0000001000 b py::outer:/app.py\n"
            "7f0000001010 b py::f4:/app.py\n"
            "7f0000001020 b py::f1:/app.py\n")
OUTER, F4, F1 = 0x7F0000001006, 0x7F0000001016, 0x7F0000001026  # return addresses


def _python_dir(tmp_path: Path, calls_pie) -> tuple[QBuilder, str]:
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, base=0x55D4C0000000)
    perf_map = tmp_path / "perf-77.map"
    perf_map.write_text(PERF_MAP)
    copy = q.copy(perf_map, "perf-77.map")
    start = o.ret("_start")
    stacks = [
        # leaf1 stands for _PyObject_Free, work and main for the interpreter's frames
        (4 * MS, [o.at("leaf1"), F4, o.ret("work"), OUTER, o.ret("main"), start]),
        (3 * MS, [o.at("leaf2"), F4, o.ret("main"), OUTER, start]),
        (1 * MS, [o.at("leaf1"), F1, OUTER, start]),
        (2 * MS, [o.at("main"), start]),  # start-up: no Python frame
    ]
    name = q.task("python3.12", 77, 0, stacks=stacks, perf_maps=[copy])
    return q, name


def test_python_view_folds_native_frames_into_their_python_caller(tmp_path, calls_pie):
    q, name = _python_dir(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--python", "--format", "json", "--no-cache")
    assert code == 0, err
    doc = json.loads(out)
    fns = {f["name"]: f for f in doc["functions"]}
    assert set(fns) == {"outer (/app.py)", "f4 (/app.py)", "f1 (/app.py)", "(no Python frame)"}
    assert abs(fns["f4 (/app.py)"]["self"] - 0.007) < 1e-9  # leaf1 and leaf2 under f4
    assert abs(fns["f1 (/app.py)"]["self"] - 0.001) < 1e-9
    assert fns["outer (/app.py)"]["self"] == 0 and abs(fns["outer (/app.py)"]["inclusive"]
                                                       - 0.008) < 1e-9
    assert abs(doc["total"] - 0.010) < 1e-9  # the mixed view's total
    arcs = {(a["caller"], a["callee"]) for a in doc["arcs"]}
    assert arcs == {("outer (/app.py)", "f4 (/app.py)"), ("outer (/app.py)", "f1 (/app.py)")}


def test_default_view_keeps_mixed_stacks_with_cpythons_names(tmp_path, calls_pie):
    q, name = _python_dir(tmp_path, calls_pie)
    code, out, _err = run(q.info_path(name), "--format", "json", "--no-cache")
    names = {f["name"] for f in json.loads(out)["functions"]}
    assert code == 0 and {"py::f4:/app.py", "py::outer:/app.py", "leaf1", "leaf2"} <= names


def test_stack_quality_per_process_names_the_perf_map(tmp_path, calls_pie):
    q, name = _python_dir(tmp_path, calls_pie)
    code, out, _err = run(q.info_path(name), "--stack-quality", "--no-cache")
    assert code == 0
    section = out[out.index("Python stacks:"):].splitlines()
    assert section[2].split()[0] == "80.0"  # 8 of 10 ms through Python frames to _start
    assert "python3.12 pid 77: perf map .perf-77.map.crc32." in section[2]


def test_python_view_takes_functions_only(tmp_path, calls_pie):
    q, name = _python_dir(tmp_path, calls_pie)
    code, _out, err = run(q.info_path(name), "--python", "--by", "object")
    assert code == 2 and "--python" in err


def _jitdump_dir(tmp_path: Path, calls_pie, dump: bytes) -> tuple[QBuilder, str]:
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, base=0x55D4C0000000)
    path = tmp_path / "jit-88.dump"
    path.write_bytes(dump)
    copy = q.copy(path, "jit-88.dump")
    first, second = synthetic_address(0, 4), synthetic_address(1, 4)
    beyond = synthetic_address(7, 4)
    start = o.ret("_start")
    stacks = [(1 * MS, [first, start]), (2 * MS, [second, start]), (1 * MS, [beyond, start])]
    name = q.task("jd", 88, 0, stacks=stacks)
    info = Path(q.info_path(name))
    info.write_text(info.read_text() + f'(q:jitdump \'((q:file . "{copy}") (q:pid . 88)))\n')
    return q, name


def _dump(*names: str) -> bytes:
    return encode_header(Header(1, 62, 88, 0)) + b"".join(
        encode(CodeLoad(i, 88, 88, 0x7F00_0000_1000, 0x7F00_0000_1000, 16, i, n, bytes(16)))
        for i, n in enumerate(names))


def test_synthetic_addresses_name_each_code_load_of_the_jitdump_copy(tmp_path, calls_pie):
    q, name = _jitdump_dir(tmp_path, calls_pie, _dump("first", "second"))
    warnings: list[str] = []
    space = AddressSpace(Symbols(SymbolCache(None), [], warnings.append), str(q.path),
                         read_info(q.info_path(name)))
    assert space.lookup(synthetic_address(0, 4)).name == "first"
    assert space.lookup(synthetic_address(1, 4)).name == "second"
    assert space.lookup(synthetic_address(1, 16), is_return=True).name == "second"
    assert space.lookup(synthetic_address(7, 4)).name.endswith("<[jit]>")
    # a raw address (its record came too late): the code loaded there last
    assert space.lookup(0x7F00_0000_1004).name == "second"
    assert space.lookup(0x7F00_0000_1010).name.endswith("<[unknown]>")
    assert not warnings


def test_a_corrupt_jitdump_copy_costs_a_warning_and_the_names_after_it(tmp_path, calls_pie):
    first_only = _dump("first")
    second = _dump("first", "second")[len(first_only):]
    bad = first_only + b"\0\0\0\0\3\0\0\0" + bytes(8) + second
    q, name = _jitdump_dir(tmp_path, calls_pie, bad)
    code, out, err = run(q.info_path(name), "--flat", "--no-cache")
    names = [line.split()[-1] for line in out.splitlines()[4:]]
    assert code == 0
    assert "first" in names and "second" not in names
    assert err.count("warning") == 1 and "record size 3 is too small" in err


def test_python_view_of_stacks_with_unnamed_code(tmp_path, calls_pie):
    """Code with no symbol (an address alone in the mixed view) folds into
    its Python caller like any native frame; the text report once kept the
    mixed view's list of unnamed frames and failed on it."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, base=0x55D4C0000000)
    perf_map = tmp_path / "perf-78.map"
    perf_map.write_text(PERF_MAP)
    copy = q.copy(perf_map, "perf-78.map")
    stacks = [(3 * MS, [0x7E0000000040, F1, OUTER, o.ret("_start")]),
              (1 * MS, [o.at("leaf1"), F4, OUTER, o.ret("_start")])]
    name = q.task("python3.12", 78, 0, stacks=stacks, perf_maps=[copy])
    code, out, err = run(q.info_path(name), "--no-cache", "--flat")
    assert code == 0 and "0x7e0000000040" in out, err  # the mixed view names it by address
    code, out, err = run(q.info_path(name), "--python", "--flat", "--no-cache")
    assert code == 0, err
    rows = {line.split()[-2]: line for line in out.splitlines() if "(/app.py)" in line}
    assert set(rows) == {"f1", "f4"}, out
    assert float(rows["f1"].split()[0]) == 75.0  # the unnamed code's 3 of 4 ms, under f1
    assert "single address" not in out  # every row of the Python view is a function
