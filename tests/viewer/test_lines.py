"""Source lines (--by line) and annotation (--annotate) from DWARF, through
the installed q-view, on a program built with -g -O2 at test time."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import q_view
from qsynth import QBuilder, Binary

SRC = Path(__file__).resolve().parent.parent / "data" / "src" / "hotline.c"


def source_line(marker: str) -> int:
    """The line of hotline.c that holds ``marker``."""
    for number, text in enumerate(SRC.read_text().splitlines(), 1):
        if marker in text:
            return number
    raise AssertionError(marker)


def line_rows(binary: Path) -> list[tuple[int, int]]:
    """(address, line) rows of hotline.c, as binutils decodes them (an
    independent reader)."""
    text = subprocess.run(["objdump", "--dwarf=decodedline", str(binary)], check=True,
                          capture_output=True, text=True).stdout
    rows = []
    for m in re.finditer(r"^hotline\.c\s+(\d+)\s+0x([0-9a-f]+)", text, re.M):
        rows.append((int(m[2], 16), int(m[1])))
    return rows


def address_of_line(binary: Binary, line: int) -> int:
    """A link-time address inside spin() that the line table gives ``line``
    (``binary`` unstripped)."""
    start, size = binary.functions["spin"]
    for address, at in line_rows(binary.path):
        if at == line and start <= address < start + size:
            return address
    raise AssertionError(f"no address for line {line}")


def hot_q(tmp_path: Path, binary: Binary, full: Binary | None = None, hot: int = 90,
          cold: int = 10) -> tuple[QBuilder, str]:
    """A set whose samples fall on the HOT line (``hot``) and the loop's
    condition line (``cold``), with main() as the caller; ``full``: the
    unstripped build of ``binary``."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(binary, path="/nonexistent/hotline")
    hot_at = o.link(address_of_line(full or binary, source_line("/* HOT */")))
    cold_at = o.link(address_of_line(full or binary, source_line("for (long")))
    caller = o.ret("main")
    name = q.task("hotline", 7, 0, stacks=[(hot * 1_000_000, [hot_at, caller]),
                                           (cold * 1_000_000, [cold_at, caller])])
    return q, name


def test_by_line_names_the_hot_line_with_its_function(tmp_path, hotline):
    q, name = hot_q(tmp_path, hotline)
    r = q_view("--flat", "--by", "line", "--no-cache", q.info_path(name))
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if "hotline.c:" in l]
    assert rows, r.stdout
    hot = f"hotline.c:{source_line('/* HOT */')} (spin)"
    assert hot in rows[0], r.stdout  # the first row: most self time
    assert "90.0" in rows[0] or "90.00" in rows[0], rows[0]
    assert any(f"hotline.c:{source_line('for (long')} (spin)" in l for l in rows[1:])
    assert not r.stderr


def test_by_line_json_gives_file_line_and_function(tmp_path, hotline):
    q, name = hot_q(tmp_path, hotline)
    for cache in ("--no-cache", None):  # cold, then cached (Q_CACHE_DIR below)
        args = ["--format", "json", "--by", "line", q.info_path(name)]
        env_args = [cache] if cache else []
        r = q_view(*env_args, *args, env={**_env(tmp_path)})
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["by"] == "line"
        top = max(doc["functions"], key=lambda f: f["self"])
        assert top["name"] == f"hotline.c:{source_line('/* HOT */')}"
        assert top["function"] == "spin"
        assert abs(top["self"] - 0.09) < 1e-9
    # the warm run read the lines from the cache
    assert any(p.name.endswith("-lines.sym") for p in (tmp_path / "cache").iterdir())


def test_stripped_copy_takes_its_lines_from_the_debug_file_by_build_id(tmp_path, hotline):
    bare_path = tmp_path / "hotline-stripped"
    debug = tmp_path / "hotline.debug"
    subprocess.run(["objcopy", "--only-keep-debug", str(hotline.path), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-all", str(hotline.path), str(bare_path)], check=True)
    bare = Binary.read(bare_path)
    bare.functions.update(hotline.functions)  # where spin is, from the unstripped build
    q, name = hot_q(tmp_path, bare, hotline)
    hot = f"hotline.c:{source_line('/* HOT */')}"
    r = q_view("--flat", "--by", "line", "--no-cache", q.info_path(name))
    assert r.returncode == 0 and hot not in r.stdout, r.stdout
    root = tmp_path / "debugroot"
    target = root / ".build-id" / bare.build_id[:2] / (bare.build_id[2:] + ".debug")
    target.parent.mkdir(parents=True)
    shutil.copy(debug, target)
    r = q_view("--flat", "--by", "line", "--no-cache", "--debug-root", str(root),
               q.info_path(name))
    assert r.returncode == 0, r.stderr
    assert f"{hot} (spin)" in r.stdout, r.stdout


def _env(tmp_path: Path) -> dict[str, str]:
    import os
    return {**os.environ, "Q_CACHE_DIR": str(tmp_path / "cache")}


def _annotated(tmp_path: Path, binary: Binary, *args: str) -> tuple[str, str, int, int]:
    q, name = hot_q(tmp_path, binary, hot=60, cold=40)
    r = q_view("--annotate", "spin", "--no-cache", *args, q.info_path(name))
    assert r.returncode == 0, r.stderr
    return (r.stdout, r.stderr, address_of_line(binary, source_line("/* HOT */")),
            address_of_line(binary, source_line("for (long")))


def _row(text: str, address: int) -> str:
    rows = [l for l in text.splitlines() if re.search(rf"\s{address:x}:\s", l)]
    assert len(rows) == 1, text
    return rows[0]


def test_annotate_gives_each_instruction_its_share_and_marks_the_hot_line(tmp_path, hotline):
    text, err, hot_at, cold_at = _annotated(tmp_path, hotline)
    assert not err
    assert _row(text, hot_at).split(":")[0].strip() == "60.00"
    assert _row(text, cold_at).split(":")[0].strip() == "40.00"
    # every other instruction of spin is there, with no samples
    start, size = hotline.functions["spin"]
    listed = [l for l in text.splitlines() if re.search(r"^\s+0\.00 :\s+[0-9a-f]+:", l)]
    assert len(listed) >= 10
    hot_line = source_line("/* HOT */")
    sources = [l for l in text.splitlines() if f"hotline.c:{hot_line} " in l and "HOT" in l]
    assert sources and all(l.startswith("*  60.00 :") for l in sources), text
    assert f"  60.00   hotline.c:{hot_line}" in text  # the summary at the top


def test_annotate_finds_moved_sources_below_source_root(tmp_path, build_dir):
    from qsynth import compile_c
    built = tmp_path / "build" / "src"
    built.mkdir(parents=True)
    shutil.copy(SRC, built / "hotline.c")
    binary = Binary.read(compile_c(built / "hotline.c", tmp_path / "hotline-moved", "-g",
                                   "-fPIE", "-pie"))
    moved = tmp_path / "elsewhere" / "src"
    moved.parent.mkdir()
    shutil.move(built, moved)
    text, err, hot_at, _ = _annotated(tmp_path, binary)
    assert "source file not found" in err and "--source-root" in err
    assert "HOT" not in text and _row(text, hot_at).split(":")[0].strip() == "60.00"
    text, err, _, _ = _annotated(tmp_path / "again", binary, "--source-root",
                                 str(tmp_path / "elsewhere"))
    assert not err, err
    assert "/* HOT */" in text


def test_annotate_without_debug_info_is_disassembly_alone(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, hist={o.at("leaf1"): 5_000_000})
    r = q_view("--annotate", "leaf1", "--no-cache", q.info_path(name))
    assert r.returncode == 0, r.stderr
    assert "no line table" in r.stderr
    assert re.search(r"^\s+100\.00 :\s+[0-9a-f]+:\s+\S", r.stdout, re.M), r.stdout
    r = q_view("--annotate", "no_such_function", "--no-cache", q.info_path(name))
    assert r.returncode == 1 and "no samples in a function" in r.stderr


def test_annotate_says_when_rare_instructions_were_counted_at_the_entry(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    plain = q.task("calls", 1, 0, hist={o.at("leaf1"): 5_000_000})
    moved = q.task("calls", 2, 0, hist={o.at("leaf1"): 5_000_000},
                   extra_info={"extra": {"q:min-stack-share": 0.001, "q:hist-moved": 1_000_000}})
    r = q_view("--annotate", "leaf1", "--no-cache", q.info_path(plain))
    assert r.returncode == 0 and "first instruction" not in r.stderr
    r = q_view("--annotate", "leaf1", "--no-cache", q.info_path(moved))
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "first instruction" in line]
    assert len(said) == 1 and q.info_path(moved) in said[0], r.stderr


def _inlined_q(tmp_path: Path, binary: Binary) -> str:
    """Samples in spin's loop (70) and in square(), inlined into spin (30)."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(binary, path="/nonexistent/hotline")
    loop = o.link(address_of_line(binary, source_line("/* HOT */")))
    inlined = o.link(address_of_line(binary, source_line("/* INLINED */")))
    caller = o.ret("main")
    return q.info_path(q.task("hotline", 9, 0, stacks=[(70_000_000, [loop, caller]),
                                                       (30_000_000, [inlined, caller])]))


def _self(doc: dict, name: str) -> float:
    return sum(f["self"] for f in doc["functions"] if f["name"] == name)


def test_inlined_function_keeps_self_on_its_container_unless_inline(tmp_path, hotline):
    info = _inlined_q(tmp_path, hotline)
    r = q_view("--format", "json", "--no-cache", info)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert abs(_self(doc, "spin") - 0.1) < 1e-9  # as perf's Self column
    r = q_view("--format", "json", "--inline", "--no-cache", info)
    doc = json.loads(r.stdout)
    assert abs(_self(doc, "square (inlined)") - 0.03) < 1e-9, doc["functions"]
    square = next(f for f in doc["functions"] if f["name"] == "square (inlined)")
    assert square["inlined"] is True
    assert all("inlined" not in f for f in doc["functions"] if f is not square)
    assert abs(_self(doc, "spin") - 0.07) < 1e-9
    r = q_view("--format", "collapsed", "--inline", "--no-cache", info)
    assert r.returncode == 0, r.stderr
    assert re.search(r";main;spin;square \(inlined\) 30000000$", r.stdout, re.M), r.stdout


def _return_after_call(binary: Binary, caller: str, callee: str) -> int:
    """Link-time return address of ``caller``'s call to ``callee`` (objdump)."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary.path)],
                          check=True, capture_output=True, text=True).stdout
    body = text.split(f"<{caller}>:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    for here, after in zip(body, body[1:]):
        if re.search(rf"call.*<{callee}>", here):
            return int(after.split(":")[0], 16)
    raise AssertionError(f"no call of {callee} in {caller}")


def test_call_chains_show_inlined_callers_as_frames_of_their_own(tmp_path, hotline):
    q = QBuilder(tmp_path / ".q")
    o = q.load(hotline, path="/nonexistent/hotline")
    back = o.link(_return_after_call(hotline, "main", "leafwork"))
    info = q.info_path(q.task("hotline", 11, 0, stacks=[(5_000_000, [o.at("leafwork"), back])]))
    r = q_view("--format", "collapsed", "--no-cache", info)
    assert r.returncode == 0, r.stderr
    assert re.search(r";main;step \(inlined\);leafwork 5000000$", r.stdout, re.M), r.stdout
    r = q_view("--graph", "--no-cache", info)
    assert "step (inlined)" in r.stdout


def test_pprof_location_in_inlined_code_has_its_lines_innermost_first(tmp_path, hotline):
    """An export's locations hold their frames as the report shows them: a
    leaf's self time on the containing function, as q-view's flat profile
    keeps it, with --inline on what was inlined there, innermost first."""
    from exports import pprof_profile
    info = _inlined_q(tmp_path, hotline)
    out = tmp_path / "p.pb.gz"

    def chains_of(*options: str) -> tuple[list[list[tuple[str, int]]], Any]:
        r = q_view("--format", "pprof", "-o", str(out), "--no-cache", *options, info)
        assert r.returncode == 0, r.stderr
        p = pprof_profile(out)
        names = {f.id: (p.string_table[f.name], p.string_table[f.filename])
                 for f in p.function}
        return [[(names[l.function_id][0], l.line) for l in loc.line]
                for loc in p.location], p
    chains, p = chains_of("--inline")
    names = {f.id: (p.string_table[f.name], p.string_table[f.filename]) for f in p.function}
    inlined = [c for c in chains if len(c) > 1]
    assert inlined == [[("square", source_line("/* INLINED */")),
                        ("spin", source_line("square(acc)"))]], chains
    assert [("spin", source_line("/* HOT */"))] in chains
    assert all(name[1].endswith("hotline.c") for name in names.values()
               if name[0] in ("spin", "square"))
    mapping = p.mapping[0]
    assert mapping.has_line_numbers and mapping.has_inline_frames
    chains, _p = chains_of()
    assert not [c for c in chains if len(c) > 1], chains
    assert [("spin", source_line("square(acc)"))] in chains


def _section(path: Path, name: str) -> tuple[int, int]:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        sec = ELFFile(f).get_section_by_name(name)
        return sec["sh_offset"], sec["sh_size"]


def test_damaged_dwarf_is_one_warning_and_the_profile_goes_on(tmp_path, hotline):
    damaged = tmp_path / "hotline-damaged"
    data = bytearray(hotline.path.read_bytes())
    for section in (".debug_line", ".debug_info"):
        offset, size = _section(hotline.path, section)
        data[offset:offset + size] = b"\xff" * size
    damaged.write_bytes(bytes(data))
    bad = Binary.read(damaged)
    q, name = hot_q(tmp_path, bad, hotline)
    for args in (["--by", "line", "--flat"], ["--inline"], ["--annotate", "spin"],
                 ["--format", "pprof", "-o", str(tmp_path / "p.pb.gz")]):
        r = q_view(*args, "--no-cache", q.info_path(name))
        assert r.returncode == 0, (args, r.stderr)
        assert "Traceback" not in r.stderr
        assert r.stderr.count("warning") <= 2, (args, r.stderr)
    r = q_view("--by", "line", "--flat", "--no-cache", q.info_path(name))
    assert "spin" in r.stdout and "hotline.c:" not in r.stdout


def test_annotate_is_text_only(tmp_path, hotline):
    q, name = hot_q(tmp_path, hotline)
    for other in (["--format", "json"], ["--watch"]):
        r = q_view("--annotate", "spin", *other, q.info_path(name))
        assert r.returncode == 2 and "--annotate prints text" in r.stderr, r.stderr


def test_a_fifo_where_the_source_should_be_does_not_block(tmp_path, hotline):
    import os
    root = tmp_path / "root"
    where = root / "tests" / "data" / "src"
    where.mkdir(parents=True)
    os.mkfifo(where / "hotline.c")
    q, name = hot_q(tmp_path, hotline)
    r = q_view("--annotate", "spin", "--source-root", str(root), q.info_path(name), timeout=60)
    assert r.returncode == 0, r.stderr


def test_an_object_without_aranges_has_its_lines_all_the_same(tmp_path, hotline):
    """Without ``.debug_aranges`` (clang's default) no unit is known by
    address: every unit is read once, and the lines are there."""
    bare = tmp_path / "hotline-noaranges"
    subprocess.run(["objcopy", "--remove-section=.debug_aranges", str(hotline.path), str(bare)],
                   check=True)
    q, name = hot_q(tmp_path, Binary.read(bare), hotline)
    for _ in range(2):  # cold, then from the cache
        r = q_view("--flat", "--by", "line", q.info_path(name))
        assert r.returncode == 0 and not r.stderr, r.stderr
        rows = [line for line in r.stdout.splitlines() if "hotline.c:" in line]
        assert rows and f"hotline.c:{source_line('/* HOT */')} (spin)" in rows[0], r.stdout
