"""A `.q` from anyone: every data file accounted for, caps on what is read,
no symlink followed out of the directory, names escaped once in JSON.

Each case says what a user sees: exit status, and one line on stderr naming
the file (a warning where the profile can still show something true).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import zlib
from pathlib import Path

import pytest

import hostile_names
from qsynth import MS, Binary, QBuilder
from scenarios import calls_dir, run
from tests.conftest import q_view_popen
from qtools.viewer.model.escape import printable

# ---------------------------------------------------------------- helpers


def _one_line(code: int, out: str, err: str, want_code: int, *names: str) -> str:
    assert code == want_code, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    for name in names:
        assert name in lines[0], lines[0]
    if want_code:
        assert out == "" and lines[0].startswith("q-view: ")
    else:
        assert lines[0].startswith("q-view: warning: ") and "Flat profile" in out
    return lines[0]


def _sibling(q: QBuilder, name: str, kind: str) -> Path:
    return q.path / name.replace(".info", kind)


def _gzip_members(path: Path, block: bytes, repeat: int) -> None:
    """``block`` ``repeat`` times over, as that many gzip members of one
    compressed block: gigabytes of content written in a fraction of a second."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    member = c.compress(block) + c.flush()
    with open(path, "wb") as f:
        for _ in range(repeat):
            f.write(member)


@pytest.fixture
def calls_q(tmp_path, calls_pie):
    """The standard call graph: a .stack and the .hist of its leaves."""
    return calls_dir(tmp_path, calls_pie)


# ---------------------------------------------------------------- .hist beside a .stack


def test_a_consistent_set_reads_quietly(calls_q):
    q, _o, name = calls_q
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "") and "Flat profile" in out


@pytest.mark.parametrize("damage", ["missing", "symlink", "fifo", "malformed", "corrupt-gzip"])
def test_damaged_hist_beside_good_stacks_is_a_warning(calls_q, damage):
    q, _o, name = calls_q
    hist = _sibling(q, name, ".hist")
    good = hist.read_bytes()
    hist.unlink()
    if damage == "symlink":  # even to a copy of the right content
        (q.path.parent / "elsewhere.hist").write_bytes(good)
        hist.symlink_to(q.path.parent / "elsewhere.hist")
    elif damage == "fifo":
        os.mkfifo(hist)
    elif damage == "malformed":
        hist.write_bytes(good + b"0x12 twelve\n")
    elif damage == "corrupt-gzip":
        hist.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03not deflate data")
    line = _one_line(*run(q.info_path(name)), 0, str(hist), str(_sibling(q, name, ".stack")))
    expect = {"missing": "missing", "symlink": "symlink", "fifo": "not a regular file",
              "malformed": f"{hist}:", "corrupt-gzip": "compressed"}[damage]
    assert expect in line
    # the flat profile is the stacks': the same as with the good histogram
    hist.unlink(missing_ok=True)
    hist.write_bytes(good)
    _code, with_good, _err = run(q.info_path(name), "--flat")
    hist.unlink()
    _code, without, _err = run(q.info_path(name), "--flat")
    assert with_good == without


def test_missing_hist_without_stacks_is_an_error(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, hist={o.at("main"): MS}, write_hist=False)
    _one_line(*run(q.info_path(name)), 1, str(_sibling(q, name, ".hist")), "missing")
    _one_line(*run(str(q.path)), 1, str(_sibling(q, name, ".hist")), "missing")  # overview


def test_stack_and_hist_totals_disagree(calls_q):
    q, o, name = calls_q
    hist = _sibling(q, name, ".hist")
    hist.write_bytes(hist.read_bytes() + b"0x%x %d\n" % (o.at("main") + 5, 7 * MS))
    line = _one_line(*run(q.info_path(name)), 0, str(hist), str(_sibling(q, name, ".stack")))
    assert "disagree" in line and "totals" in line


def test_an_open_set_read_between_its_two_data_files_is_not_damage(tmp_path, calls_pie):
    """A collector rewrites an open set's .hist and then its .stack at each
    checkpoint: a reader in between (or after a kill -9 there) sees them
    disagree, and that is no reason for a warning."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    stacks = [(3 * MS, [o.at("leaf1"), o.ret("main")])]
    name = q.task("calls", 1, 0, stacks=stacks, hist={o.at("leaf1"): 5 * MS},
                  extra_info={"state": "open"})
    code, out, err = run(q.info_path(name), "--flat")
    assert (code, err) == (0, "") and "leaf1" in out
    closed = q.task("calls", 2, 0, stacks=stacks, hist={o.at("leaf1"): 5 * MS},
                    extra_info={"state": "closed"})
    _one_line(*run(q.info_path(closed)), 0, "disagree")


def test_stack_and_hist_leaves_disagree_with_equal_totals(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    stacks = [(3 * MS, [o.at("leaf1"), o.ret("main")]), (2 * MS, [o.at("leaf2"), o.ret("main")])]
    name = q.task("calls", 1, 0, stacks=stacks,
                  hist={o.at("leaf1"): 2 * MS, o.at("leaf2"): 3 * MS})
    line = _one_line(*run(q.info_path(name)), 0, "disagree", "leaf address")
    assert "totals" not in line


def test_missing_stack_file_is_a_warning_and_the_hist_is_shown(calls_q):
    q, _o, name = calls_q
    stack = _sibling(q, name, ".stack")
    stack.unlink()
    _one_line(*run(q.info_path(name)), 0, str(stack), "missing")


def test_missing_edge_file_is_a_warning(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])], edges={(1, 2): 3})
    edge = _sibling(q, name, ".edge")
    edge.unlink()
    _one_line(*run(q.info_path(name)), 0, str(edge), "missing", "no call counts")


def test_remainder_of_stacks_not_kept(tmp_path, calls_pie):
    """``WEIGHT -``: samples whose stacks the collector did not keep count
    toward the total, at the functions the histogram names."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(3 * MS, [o.at("leaf1"), o.ret("main")])],
                  hist={o.at("leaf1"): 3 * MS, o.at("leaf2"): 5 * MS, o.at("main"): 1 * MS})
    stack = _sibling(q, name, ".stack")
    stack.write_bytes(stack.read_bytes() + b"%d -\n" % (6 * MS))
    code, out, err = run(q.info_path(name), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["total"] == pytest.approx(9e-3)
    self_of = {f["name"]: f["self"] for f in doc["functions"]}
    assert self_of == pytest.approx({"leaf1": 3e-3, "leaf2": 5e-3, "main": 1e-3})
    # and the report says how much came without a stack: 6 of 9 ms
    assert doc["stack_quality"]["not_kept"] == pytest.approx(6e-3)
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "") and "66.7% of the samples came without their stacks" in out
    # a remainder the histogram does not account for: a warning, shown apart
    stack.write_bytes(stack.read_bytes() + b"%d -\n" % (1 * MS))
    code, out, err = run(q.info_path(name), "--format", "json")
    assert code == 0 and "disagree" in err and err.count("\n") == 1
    assert "[stacks not kept]" in {f["name"] for f in json.loads(out)["functions"]}


@pytest.mark.parametrize("moved,share", [(4 * MS, 50.0), (80 * MS, 100.0), ("x", None),
                                         (-1, None)])
def test_weight_moved_to_function_starts_is_told(tmp_path, calls_pie, moved, share):
    """q:hist-moved (--min-stack-share): the weight whose addresses the
    collector folded to their function's first instruction; never more
    than the set holds, and a value that is no count is left aside."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(3 * MS, [o.at("leaf1"), o.ret("main")]),
                                        (5 * MS, [o.at("leaf2"), o.ret("main")])],
                  extra_info={"extra": {"q:min-stack-share": 0.001, "q:hist-moved": moved}})
    code, out, err = run(q.info_path(name), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["stack_quality"]["moved_to_function_start"] == pytest.approx(
        (share or 0) / 100 * 8e-3)
    code, out, err = run(q.info_path(name))
    told = [line for line in out.splitlines() if "first instruction of their function" in line]
    assert (code, err) == (0, "")
    assert [t.split("%")[0] for t in told] == ([f"{share:.1f}"] if share else [])


# ---------------------------------------------------------------- the .info itself


def test_empty_info_is_an_error_not_an_empty_profile(calls_q):
    q, _o, name = calls_q
    info = Path(q.info_path(name))
    info.write_bytes(b"")
    assert "empty" in _one_line(*run(str(info)), 1, str(info))
    assert "empty" in _one_line(*run(str(q.path)), 1, str(info))  # overview too


@pytest.mark.parametrize("cut", ["mid-form", "after-q:info"])
def test_truncated_info_is_an_error(calls_q, cut):
    q, _o, name = calls_q
    info = Path(q.info_path(name))
    text = info.read_text()
    end_of_first = text.index("\n(q:histogram")
    info.write_text(text[:len(text) // 2] if cut == "mid-form" else text[:end_of_first + 1])
    _one_line(*run(str(info)), 1, str(info))


def test_cpu_stats_set_without_data_reads_quietly(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])])
    stats = {"q:busy": 0.5, "q:seconds": 10.0}
    name = q.task("kernel", None, 0, hist={}, write_hist=False, objects=[],
                  extra_info={"cpu_stats": stats, "extra": {"q:purpose": "cpu-stats"}})
    code, out, err = run(str(q.path))
    assert (code, err) == (0, "") and name in out
    code, out, err = run(q.info_path(name))
    assert (code, err) == (0, "")
    code, out, err = run(str(q.path), "--cpu", "0")
    assert (code, err) == (0, "") and "main" in out


def test_info_over_the_size_cap(calls_q):
    q, _o, name = calls_q
    info = Path(q.info_path(name))
    line = _one_line(*run(str(info), "--limits", "info-size=500"), 1, str(info), "info-size")
    assert "--limits info-size=" in line
    code, _out, err = run(str(info), "--limits", "info-size=1M")
    assert (code, err) == (0, "")
    with open(info, "a") as f:  # 17 MiB: over the default 16 MiB, refused unread
        f.write("(q:padding \"" + "x" * (17 << 20) + "\")\n")
    _one_line(*run(str(info)), 1, str(info), "16 MiB", "info-size")
    _one_line(*run(str(q.path)), 1, str(info), "16 MiB", "info-size")  # overview


# ---------------------------------------------------------------- caps on data files


def test_small_gzip_over_a_lowered_size_cap(calls_q):
    q, o, name = calls_q
    hist = _sibling(q, name, ".hist")
    _gzip_members(hist, b"0x%x 1\n" % o.at("main") * 400_000, 1)  # 8 MB in a few kB
    assert hist.stat().st_size < 100_000
    line = _one_line(*run(q.info_path(name), "--limits", "data-size=1M"), 1, str(hist),
                     "data-size", "1 MiB")
    assert "--limits data-size=N" in line


def test_gzip_bomb_of_zeros(calls_q):
    """Gigabytes of zeros in a few megabytes: refused after the first
    megabyte (no line is that long), not decompressed to the end."""
    q, _o, name = calls_q
    stack = _sibling(q, name, ".stack")
    _gzip_members(stack, bytes(64 << 20), 64)  # 4 GiB
    _one_line(*run(q.info_path(name)), 1, str(stack), "longer than")


def test_sixty_million_lines_refused_at_the_default_cap(calls_q):
    """60 million lines of gzip'd `.hist`: refused by the line count before
    any is parsed (parsing them would take minutes)."""
    q, o, name = calls_q
    hist = _sibling(q, name, ".hist")
    _gzip_members(hist, b"0x1 1\n" * 6_000_000, 10)
    _one_line(*run(q.info_path(name)), 1, str(hist), "50000000 lines", "--limits lines=N")


def test_three_million_distinct_stacks_over_a_lowered_cap(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, stacks=[(MS, [o.at("main")])])
    stack = _sibling(q, name, ".stack")
    base = 0x10000  # distinct leaves in no object
    stack.write_bytes(b"".join(b"1 0x%x\n" % (base + i) for i in range(3_000_000)))
    line = _one_line(*run(q.info_path(name), "--limits", "stacks=1M"), 1, str(stack),
                     "1000000 stacks", "--limits stacks=N")
    assert "over the limit" in line


def test_distinct_stacks_cap_holds_for_a_merge(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    for pid in (1, 2):  # 60 distinct (unknown) callers each, 120 merged
        q.task("calls", pid, 0,
               stacks=[(MS, [o.at("main"), 0x10000 + pid * 0x1000 + i]) for i in range(60)])
    code, _out, err = run(str(q.path), "--comm", "calls", "--limits", "stacks=100")
    assert code == 1 and "100 distinct stacks" in err and "stacks=N" in err
    code, _out, err = run(str(q.path), "--comm", "calls", "--limits", "stacks=200")
    assert (code, err) == (0, "")


@pytest.mark.parametrize("bad", ["lines", "lines=", "lines=x", "size=1", "data-size=-1",
                                 "stacks=0", "lines=5MiB"])
def test_limits_option_errors_are_usage_errors(bad, capsys):
    code, _out, _err = run("--limits", bad, "x.info")
    err = capsys.readouterr().err  # argparse writes the usage error itself
    assert code == 2 and "--limits" in err and "Traceback" not in err


# ---------------------------------------------------------------- symlinks


def test_stack_symlink_out_of_the_directory_is_refused(calls_q, tmp_path):
    q, _o, name = calls_q
    stack = _sibling(q, name, ".stack")
    outside = tmp_path / "secret"
    outside.write_bytes(stack.read_bytes())
    stack.unlink()
    stack.symlink_to(outside)
    _one_line(*run(q.info_path(name)), 1, str(stack), "symlink")


def test_info_symlink_in_a_directory_is_refused(calls_q, tmp_path):
    q, _o, name = calls_q
    info = Path(q.info_path(name))
    outside = tmp_path / "outside.info"
    shutil.move(info, outside)
    info.symlink_to(outside)
    _one_line(*run(str(q.path)), 1, str(info), "symlink")
    _one_line(*run(str(info)), 1, str(info), "symlink")


def _symlinked_copy(q: QBuilder, copy: str, target: Path, content: bytes, uid: int = 0,
                    mode: int = 0o644) -> None:
    target.write_bytes(content)
    os.chown(target, uid, uid)
    target.chmod(mode)
    (q.path / copy).unlink()
    (q.path / copy).symlink_to(target)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make root- and other-owned files")
@pytest.mark.parametrize("case", ["not-root", "group-writable", "other-writable", "wrong-crc"])
def test_object_copy_symlink_refused(tmp_path, calls_pie, case):
    q, o, name = calls_dir(tmp_path, calls_pie)
    content = calls_pie.path.read_bytes()
    target = tmp_path / "elsewhere" / "calls"
    target.parent.mkdir()
    uid, mode = {"not-root": (65534, 0o644), "group-writable": (0, 0o664),
                 "other-writable": (0, 0o646), "wrong-crc": (0, 0o644)}[case]
    if case == "wrong-crc":
        content = content[:-1] + bytes([content[-1] ^ 1])
    _symlinked_copy(q, o.ref.file, target, content, uid, mode)
    line = _one_line(*run(q.info_path(name)), 0, o.ref.file)
    expect = {"not-root": "uid 65534", "group-writable": "writable by group or others",
              "other-writable": "writable by group or others", "wrong-crc": "crc32"}[case]
    assert expect in line


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a root-owned file")
def test_object_copy_symlink_to_a_root_owned_file_is_used(tmp_path, calls_pie):
    q, o, name = calls_dir(tmp_path, calls_pie)
    target = tmp_path / "usr-bin" / "calls"
    target.parent.mkdir()
    _symlinked_copy(q, o.ref.file, target, calls_pie.path.read_bytes())
    code, out, err = run(q.info_path(name), "--flat")
    assert (code, err) == (0, "") and "leaf1" in out


# ---------------------------------------------------------------- JSON


def test_json_escapes_control_characters_once(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.add_kallsyms("ffffffff81000000 T _stext\nffffffff81001000 T evil\x1b]0;owned\x07sym\n"
                   "ffffffff81002000 T _etext\n")
    name = q.task("calls", 1, 0, comm="x\ny", cmdline=["./calls", "\x1b[2J"],
                  stacks=[(MS, [0xFFFFFFFF81001010, o.at("main")])])
    code, out, err = run(q.info_path(name), "--format", "json")
    assert (code, err) == (0, "")
    assert "\x1b" not in out and "\\\\x1b" not in out and "\\u001b" in out
    doc = json.loads(out)
    assert "evil\x1b]0;owned\x07sym" in {f["name"] for f in doc["functions"]}
    assert doc["tasks"][0]["comm"] == "x\ny"
    assert doc["tasks"][0]["command"] == "./calls '\x1b[2J'"
    code, out, err = run(str(q.path), "--format", "json", "--overview")
    assert code == 0 and json.loads(out)["sets"][0]["command"] == "x\ny"


def test_object_copy_over_the_copy_size_cap_is_a_warning(tmp_path, calls_pie):
    q, o, name = calls_dir(tmp_path, calls_pie)
    line = _one_line(*run(q.info_path(name), "--limits", "copy-size=1K"), 0, o.ref.file,
                     "copy-size")
    assert "1 KiB" in line


def test_a_set_removed_while_being_read_is_told_apart_from_damage(tmp_path, calls_pie):
    """Retention removes a set's `.info`, then its data: a reader that read
    the `.info` just before finds the data gone, which is not damage."""
    from qtools.viewer.inputs.load import SetRemoved, sets_in
    from qtools.qformat import MissingFile
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    name = q.task("calls", 1, 0, hist={o.at("main"): MS})
    ts, = sets_in(str(q.path))
    _sibling(q, name, ".hist").unlink()
    with pytest.raises(MissingFile) as e:
        ts.total()
    assert not isinstance(e.value, SetRemoved)
    Path(q.info_path(name)).unlink()
    with pytest.raises(SetRemoved):
        ts.total()


def test_a_copy_is_read_as_it_was_checked(tmp_path, calls_pie):
    """What is read is the descriptor that was checked: a copy swapped for
    a symlink after the check is not what the reader gets."""
    from qtools.qformat import QDir
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    with QDir.open(q.path, reader=True) as qdir:
        fd, problem = qdir.open_copy(o.ref.file)
        assert problem is None and fd is not None
        try:
            (q.path / o.ref.file).unlink()
            (q.path / o.ref.file).symlink_to("/etc/passwd")
            with open(f"/proc/self/fd/{fd}", "rb") as f:
                assert f.read() == calls_pie.path.read_bytes()
        finally:
            os.close(fd)
        fd, problem = qdir.open_copy(o.ref.file)
        assert fd is None and problem is not None  # passwd: not the crc of its name


def _forge_crc32(data: bytes, at: int, target: int) -> bytes:
    """``data`` with the 4 bytes at ``at`` changed so that its crc32 is
    ``target``: crc32 is affine over GF(2), so the change is the solution of
    a 32x32 linear system (what an attacker does in well under a second)."""
    base = bytearray(data)
    base[at:at + 4] = bytes(4)
    zero = zlib.crc32(base)
    columns = []
    for bit in range(32):
        probe = bytearray(base)
        probe[at + bit // 8] ^= 1 << (bit % 8)
        columns.append(zlib.crc32(probe) ^ zero)
    want = target ^ zero
    rows = [(columns[b], 1 << b) for b in range(32)]  # (effect, which bits of the patch)
    patch = 0
    for pos in range(32):  # Gaussian elimination, one output bit at a time
        pivot = next((r for r in rows if r[0] >> pos & 1), None)
        assert pivot is not None
        rows.remove(pivot)
        rows = [(e ^ pivot[0], m ^ pivot[1]) if e >> pos & 1 else (e, m) for e, m in rows]
        if want >> pos & 1:
            want ^= pivot[0]
            patch ^= pivot[1]
    base[at:at + 4] = patch.to_bytes(4, "little")
    assert zlib.crc32(base) == target
    return bytes(base)


def test_an_archive_cannot_put_its_symbols_in_the_cache_of_a_real_library(tmp_path,
                                                                        calls_pie):
    """A copy with the crc32 and size of a real one (both easy to forge) but
    other symbol names: the symbol cache must not hand them to the real one."""
    genuine, o, name = calls_dir(tmp_path / "genuine", calls_pie)
    copy = genuine.path / o.ref.file
    data = copy.read_bytes()
    forged = data.replace(b"leaf1\0", b"EVIL1\0")
    assert forged != data
    forged = _forge_crc32(forged, forged.index(b"GCC: (") + 6, zlib.crc32(data))
    hostile, o2, name2 = calls_dir(tmp_path / "hostile", calls_pie)
    (hostile.path / o2.ref.file).unlink()  # a file of its own, not a link to the genuine
    (hostile.path / o2.ref.file).write_bytes(forged)
    code, out, _err = run(hostile.info_path(name2), "--flat")  # the cache is filled first here
    assert code == 0 and "EVIL1" in out
    code, out, _err = run(genuine.info_path(name), "--flat")
    assert code == 0 and "leaf1" in out and "EVIL1" not in out



# ---------------------------------------------------------------- hostile names, every view

H = hostile_names
HOST = f"host{H.CLEAR}\u0099"
UNIT = f"svc{H.TITLE}.service"
PROG = "ev\u009b2Jil\u0085"  # the sets' file names (a set's name has no C0 control)
KSYM_AT = 0xFFFFFFFF81001000
PY_AT = 0x7F0000001000
THREAD_IDS = (0, 1000, 2000)  # added to the pid


@pytest.fixture(scope="module")
def hostile_q(tmp_path_factory) -> tuple[QBuilder, list[str], Path]:
    """A `.q` whose every name is hostile: comm, command line, exe path,
    host, unit, run id, set file names, object name and path, the ELF's
    function names and DWARF source file (and that file's text), thread
    names, a kernel symbol and its module, a perf map's Python name. Two
    processes of one program (for --diff), stacks through all of them, and
    a kernel set; returns the .q, the processes' .info names and the
    directory of the source file."""
    tmp = tmp_path_factory.mktemp("hostile")
    exe = H.build(tmp / "build")
    q = QBuilder(tmp / ".q")
    o = q.load(Binary.read(exe), base=0x55D4C0000000, name=H.OBJECT, path=H.EXE_PATH)
    q.add_kallsyms(f"ffffffff81000000 T _stext\nffffffff81001000 t {H.KERNEL_SYMBOL}"
                   f"\t[{H.KERNEL_MODULE}]\nffffffff81002000 T _etext\n")
    perf_map = tmp / "perf-77.map"
    perf_map.write_bytes(f"{PY_AT:x} 40 {H.PYTHON}\n".encode())
    copy = q.copy(perf_map, f"perf{H.TITLE}-77.map")
    leaf, caller = o.at(H.LEAF), o.ret(H.CALLER)
    spin, main = o.ret("spin"), o.ret("main")
    names = []
    for pid, scale in ((77, 1), (78, 3)):
        stacks = [(5 * scale * MS, [leaf, caller, spin, main]),
                  (2 * MS, [KSYM_AT + 0x10, leaf, caller, main]),
                  (3 * MS, [leaf, PY_AT + 6, caller, main]),
                  (1 * MS, [caller, spin, main])]
        name = q.task(PROG, pid, 0, stacks=stacks, comm=H.COMM,
                      cmdline=[H.EXE_PATH, H.CLEAR, "a\nb"], exe=H.EXE_PATH, perf_maps=[copy],
                      extra_info={"hostname": HOST, "unit": UNIT,
                                  "cgroup": f"/system.slice/{UNIT}", "run_id": f"run{H.CLEAR}{pid}",
                                  "start_time": 1.7e9, "end_time": 1.7e9 + 10})
        tids = [pid + t for t in THREAD_IDS]
        q.threads(name, dict(zip(tids, H.THREADS)),  # the stacks, each by one thread
                  {("cpu", tids[i % 3], tuple(frames)): w for i, (w, frames) in enumerate(stacks)})
        names.append(name)
    q.task("kernel", None, 1, stacks=[(4 * MS, [KSYM_AT + 0x20])], objects=[],
           extra_info={"hostname": HOST})
    return q, names, exe.parent


def _views(q: QBuilder, names: list[str], source: Path) -> dict[str, list[str]]:
    """Every report q-view makes, in every text format."""
    one, other = (q.info_path(n) for n in names)
    d = str(q.path)
    views = {
        "overview": [d], "overview per cpu": [d, "--per-cpu"],
        "overview by unit": [d, "--group", "unit"],
        "overview json": [d, "--overview", "--format", "json"],
        "default": [one], "flat": [one, "--flat"], "graph": [one, "--graph"],
        "stack quality": [one, "--stack-quality"], "whole directory": [d, "--flat", "-g"],
        "python": [one, "--python"], "inline": [one, "--inline"],
        "annotate": [one, "--annotate", H.LEAF, "--source-root", str(source)],
        "event wall": [one, "--metric", "wall"], "tid": [one, "--tid", "1077"],
        "metrics": [one, "--metric", "cpu,wall"], "metrics graph": [one, "--metric", "cpu,wall", "-g"],
        "metrics json": [one, "--metric", "cpu,wall", "--format", "json"],
        "diff": ["--diff", one, other], "diff by object": ["--diff", one, other, "--by", "object"],
        "diff json": ["--diff", one, other, "--format", "json"],
        "diff collapsed": ["--diff", one, other, "--format", "collapsed"],
        "collapsed per pid": [d, "--format", "collapsed", "--per-pid"],
    }
    for by in ("thread", "object", "address", "line"):
        views[f"by {by}"] = [one, "--by", by]
    for fmt in ("text", "json", "collapsed", "dot"):
        views[fmt] = [one, "--format", fmt] + (["--stacks"] if fmt == "json" else [])
        views[f"{fmt} by thread"] = [one, "--format", fmt, "--by", "thread"]
    return views


VIEWS = ["overview", "overview per cpu", "overview by unit", "overview json", "default",
         "flat", "graph", "stack quality", "whole directory", "python", "inline", "annotate",
         "event wall", "tid", "metrics", "metrics graph", "metrics json", "diff",
         "diff by object", "diff json", "diff collapsed", "collapsed per pid", "by thread",
         "by object", "by address", "by line", "text", "json", "collapsed", "dot",
         "text by thread", "json by thread", "collapsed by thread", "dot by thread"]


def test_every_text_format_is_among_the_views():
    from qtools.viewer.render import FORMATS
    text_formats = {name for name, f in FORMATS.items() if f.export is None}
    assert text_formats == {"text", "json", "collapsed", "dot"}


def _lines_kept(out: str) -> None:
    """No newline of a name ends a line: each part of a name before one
    shows escaped and followed by the rest of the name (escaped), never by
    a line break."""
    for name in (H.LEAF, H.SOURCE, H.COMM, H.EXE_PATH):
        for part in name.split("\n")[:-1]:
            if any(not c.isprintable() for c in part):
                assert printable(part) + "\n" not in out, part


@pytest.mark.parametrize("view", VIEWS)
def test_no_view_shows_a_control_character_of_a_name(hostile_q, view):
    """Every name shows escaped (JSON: exact, in JSON's escapes), and none
    sends the terminal a control character or breaks a line."""
    q, names, source = hostile_q
    code, out, err = run(*_views(q, names, source)[view])
    assert code == 0 and "Traceback" not in err, err
    assert H.raw_controls(out) == [] and H.raw_controls(err) == [], (out, err)
    if "json" in view:  # exact names, in JSON's escapes only
        assert "\\u001b" in out and "\\\\x1b" not in out
        assert any("\x1b" in s for s in _strings(json.loads(out)))
    else:
        _lines_kept(out)
        assert "\\x1b" in out, out  # names are shown, escaped: not left out


def _strings(value: object) -> list[str]:
    """Every string of a JSON document, keys too."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [k, *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_json_keeps_every_hostile_name_exactly(hostile_q):
    q, names, _source = hostile_q
    code, out, err = run(q.info_path(names[0]), "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert {H.LEAF, H.CALLER, H.KERNEL_SYMBOL} <= {f["name"] for f in doc["functions"]}
    assert H.OBJECT in {f["object"] for f in doc["functions"]}
    assert doc["tasks"][0]["comm"] == H.COMM and doc["tasks"][0]["host"] == HOST
    assert {o["object"] for o in doc["stack_quality"]["objects"]} == {H.OBJECT}
    assert [p["process"] for p in doc["stack_quality"]["python"]] == [f"{H.COMM} pid 77"]
    code, out, err = run(q.info_path(names[0]), "--format", "json", "--by", "thread")
    assert (code, err) == (0, "")
    assert {f"{t} [tid {77 + i}]" for t, i in zip(H.THREADS, THREAD_IDS)} <= {
        f["name"] for f in json.loads(out)["functions"]}
    code, out, err = run(str(q.path), "--overview", "--format", "json")
    assert code == 0 and {s["command"] for s in json.loads(out)["sets"]} >= {H.COMM}


@pytest.mark.parametrize("option", [("--comm", "nosuch"), ("--host", "nosuch"),
                                    ("--unit", "nosuch"), ("--run", "abc")])
def test_messages_that_list_hostile_names_are_one_escaped_line(hostile_q, option):
    q, _names, _source = hostile_q
    code, out, err = run(str(q.path), "--flat", *option)
    line = _one_line(code, out, err, 1, str(q.path))
    assert H.raw_controls(err) == [] and "\\x1b" in line, line


def test_a_hostile_data_file_name_is_one_escaped_line(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie, name=H.OBJECT)
    name = q.task(PROG, 1, 0, stacks=[(MS, [o.at("main")])])
    Path(q.info_path(name).replace(".info#", ".stack#")).unlink()
    code, out, err = run(q.info_path(name))
    line = _one_line(code, out, err, 0, "missing")
    assert H.raw_controls(err) == [] and printable(PROG) in line


def test_a_watch_screen_escapes_names(hostile_q):
    """--watch draws its screens with escape sequences of its own (to clear
    the screen); the report on it shows the names escaped."""
    q, names, _source = hostile_q
    env = dict(os.environ, PYTHONUNBUFFERED="1", LINES="60", COLUMNS="200")
    proc = q_view_popen("--watch", q.info_path(names[0]), "--by", "thread", text=False, env=env)
    seen = b""
    try:
        while b"Flat profile" not in seen or not seen.endswith(b"\n"):
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            assert ready, seen
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, seen
            seen += chunk
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    screen = seen.decode()
    assert screen.startswith("\x1b[H\x1b[2J")  # its own, once
    assert H.raw_controls(screen.removeprefix("\x1b[H\x1b[2J")) == [], screen
    assert printable(H.LEAF) in screen and H.raw_controls(err.decode()) == []


def test_a_report_written_to_a_file_escapes_names(hostile_q, tmp_path):
    q, names, _source = hostile_q
    report = tmp_path / "report.txt"
    code, out, err = run(q.info_path(names[0]), "--by", "thread", "-o", str(report))
    assert (code, out, err) == (0, "", "")
    text = report.read_text()
    assert H.raw_controls(text) == [] and printable(H.THREADS[1]) in text


def _otlp_strings(path: Path) -> set[str]:
    from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb
    data = pb.ProfilesData()
    data.ParseFromString(path.read_bytes())
    d = data.dictionary
    values = [a.value for a in d.attribute_table]
    values += [a.value for r in data.resource_profiles for a in r.resource.attributes]
    return set(d.string_table) | {v.string_value for v in values}


@pytest.mark.parametrize("fmt", ["pprof", "otlp"])
@pytest.mark.parametrize("event", ["cpu", "wall"])
def test_exports_hold_the_names_as_they_are(hostile_q, tmp_path, fmt, event):
    """pprof and OpenTelemetry are data for other tools, never shown by
    q-view: they keep each name exactly (whatever prints them escapes it)."""
    from exports import pprof_profile
    q, names, _source = hostile_q
    path = tmp_path / "profile"
    code, out, err = run(q.info_path(names[0]), "--format", fmt, "--metric", event,
                         "-o", str(path))
    assert (code, out, err) == (0, "", "")
    strings = set(pprof_profile(path).string_table) if fmt == "pprof" else _otlp_strings(path)
    assert {H.LEAF, H.CALLER, H.KERNEL_SYMBOL, H.EXE_PATH, HOST} <= strings
    assert set(H.THREADS) <= strings  # each stack under its thread
