"""Hostile and broken inputs: one line naming the file, exit 1, no traceback."""

from __future__ import annotations

import os
import shutil
import tracemalloc
from pathlib import Path

import pytest
from zlib_ng import gzip_ng

from qsynth import MS, QBuilder
from scenarios import run
from qtools.viewer.commands.view import main

BAD = Path(__file__).resolve().parent.parent / "data" / "bad"
INFO_CASES = sorted(p.name for p in BAD.glob("*.info"))
DATA_CASES = sorted(p.name for p in BAD.iterdir() if p.suffix in (".hist", ".stack", ".edge"))

INFO_MESSAGES = {
    "absolute-path.info": "not a plain file name",
    "path-escape.info": "not a plain file name",
    "slash-in-name.info": "not a plain file name",
    "deep-nesting.info": "nesting deeper",
    "wrong-type.info": "q:pid",
    "negative-map.info": "negative",
    "duplicate-form.info": "more than one",
}


def _one_error_line(code: int, out: str, err: str, path: str) -> str:
    assert code == 1, err
    assert "Traceback" not in err and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("q-view: ") and path in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", INFO_CASES)
def test_bad_info_files(tmp_path, case):
    target = tmp_path / "bad-pid1-cpu0.info#0"
    shutil.copy(BAD / case, target)
    line = _one_error_line(*run(str(target)), str(target))
    if case in INFO_MESSAGES:
        assert INFO_MESSAGES[case] in line


@pytest.mark.parametrize("case", DATA_CASES)
def test_bad_data_files(tmp_path, case, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    kind = Path(case).suffix
    kwargs: dict = {"stacks": [(MS, [o.at("main")])]}
    if kind == ".edge":
        kwargs["edges"] = {(1, 2): 3}
    name = q.task("calls", 1, 0, **kwargs)
    data = q.path / name.replace(".info", kind)
    data.write_bytes((BAD / case).read_bytes())
    if kind == ".hist":  # a set without stacks reads its histogram
        (q.path / name.replace(".info", ".stack")).unlink()
        info = q.path / name
        info.write_text(info.read_text().split("(q:call-stacks")[0]
                        + "(q:object" + info.read_text().split("(q:object", 1)[1])
    line = _one_error_line(*run(q.info_path(name)), str(data))
    assert f"{data}:" in line  # with a line number


def test_missing_inputs(tmp_path):
    _one_error_line(*run(str(tmp_path / "nope-pid1-cpu0.info")), "nope-pid1-cpu0.info")
    _one_error_line(*run(str(tmp_path / "nope.txt")), "nope.txt")
    (tmp_path / "x-pid1-cpu0.hist#0").write_text("0x1 1\n")
    line = _one_error_line(*run(str(tmp_path / "x-pid1-cpu0.hist#0")), "x-pid1-cpu0.hist#0")
    assert "not an .info file" in line


def test_selection_that_matches_nothing(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])])
    line = _one_error_line(*run(str(q.path), "--pid", "99"), str(q.path))
    assert "no task set matches --pid 99" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(str(empty)) == (0, f"No task sets (*.info#N) in {empty}.\n", "")
    _one_error_line(*run(str(empty), "--comm", "x"), str(empty))


def test_corrupt_object_copy_is_a_warning_not_an_error(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])])
    copy = q.path / o.ref.file
    copy.unlink()
    copy.write_bytes(b"\x7fELF garbage")
    code, out, err = run(q.info_path(name))
    assert code == 0 and "Flat profile" in out
    assert err.count("\n") == 1 and "warning" in err and o.ref.file in err


def _plant(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would block forever
    else:
        path.symlink_to("/dev/zero")  # an endless stream


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_fifos_and_devices_are_refused_not_read(tmp_path, calls_pie, kind):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])])
    stack = q.path / name.replace(".info", ".stack")
    stack_text = stack.read_text()
    _plant(stack, kind)
    line = _one_error_line(*run(q.info_path(name)), str(stack))
    assert "not a regular file" in line
    stack.unlink()
    stack.write_text(stack_text)
    _plant(q.path / o.ref.file, kind)  # an object copy: a warning, the profile still shows
    code, out, err = run(q.info_path(name))
    assert code == 0 and "Flat profile" in out
    assert err.count("\n") == 1 and "not a regular file" in err and o.ref.file in err
    _plant(q.path / name, kind)
    line = _one_error_line(*run(str(q.path)), name)
    assert "not a regular file" in line


def _peak_of(argv: list[str]) -> tuple[int, int, str]:
    import io
    out, err = io.StringIO(), io.StringIO()
    tracemalloc.start()
    try:
        code = main(argv, out, err)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return code, peak, err.getvalue()


def _gzip_lines(path: Path, line: bytes, count: int) -> None:
    with gzip_ng.open(path, "wb", compresslevel=9) as f:
        block = line * 10000
        for _ in range(count // 10000):
            f.write(block)


def test_compressed_bomb_of_valid_lines_streams_in_bounded_memory(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])])
    stack = q.path / name.replace(".info", ".stack")
    line = b"1000 " + b" ".join(b"0x%x" % a for a in (o.at("leaf1"), o.ret("main"))) + b"\n"
    _gzip_lines(stack, line, 400_000)  # ~16 MB of text in ~50 kB
    assert stack.stat().st_size < 200_000
    hist = q.path / name.replace(".info", ".hist")
    hist.write_bytes(b"0x%x %d\n" % (o.at("leaf1"), 400_000 * 1000))  # agrees with the stacks
    code, peak, err = _peak_of([q.info_path(name), "--format", "json"])
    assert (code, err) == (0, "")
    assert peak < 8 << 20  # far less than the 16 MB decompressed


def test_compressed_bomb_of_one_endless_line_is_refused(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])])
    stack = q.path / name.replace(".info", ".stack")
    _gzip_lines(stack, b"0x1111111111 ", 3_000_000)  # 39 MB without a newline
    code, peak, err = _peak_of([q.info_path(name)])
    assert code == 1 and "longer than" in err and str(stack) in err
    assert peak < 16 << 20


def test_control_characters_in_names_are_escaped_not_printed(tmp_path, calls_pie):
    """A comm, a command line and a kernel symbol carrying a newline and a
    terminal escape sequence: every report keeps one record per line and
    sends no escape sequence to the terminal."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.add_kallsyms("ffffffff81000000 T _stext\nffffffff81001000 T evil\x1b]0;owned\x07sym\n"
                   "ffffffff81002000 T _etext\n")
    name = q.task("calls", 1, 0, comm="x\ny", cmdline=["./calls", "\x1b[2J"],
                  stacks=[(MS, [0xFFFFFFFF81001010, o.at("main")])])
    for argv in ([q.info_path(name)], [q.info_path(name), "--graph"], [str(q.path)],
                 ["--format", "collapsed", q.info_path(name)]):
        code, out, err = run(*argv)
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out
    code, out, _err = run(str(q.path))
    row, = [line for line in out.splitlines() if line.endswith(name)]
    assert row.startswith("x\\x0ay ")
    code, out, _err = run(q.info_path(name))
    assert out.startswith("Command: ./calls '\\x1b[2J'\n")
    assert "evil\\x1b]0;owned\\x07sym" in out, out
