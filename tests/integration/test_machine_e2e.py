"""Whole-machine and program reports on a real system-wide collection, and a
stripped program grouped by function."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.conftest import OWN_SETS, q_syscollect, q_view

# frame;frame;...;frame N: no ';' or line break inside a frame, N a positive integer
COLLAPSED = re.compile(r"[^;\n]+(;[^;\n]+)* [1-9][0-9]*")


@pytest.fixture(scope="module")
def collection(perf, build, tmp_path_factory):
    """A system-wide collection while p-fan and a stripped copy of it run."""
    if shutil.which("strip") is None:
        pytest.skip("strip is not installed")
    pfan = build("p-fan")
    tmp = tmp_path_factory.mktemp("machine")
    bare = tmp / (pfan.name[:11] + "-bare")  # a comm of its own, under 16 bytes
    subprocess.run(["strip", "-o", str(bare), str(pfan)], check=True)
    q = tmp / "q"
    # Every process a set of its own: on a loaded machine a 2 s p-fan may
    # take fewer than the default 100 samples on a CPU and be folded into
    # its program's set, which has no pid for --per-pid to show.
    r = q_syscollect("-d", str(q), *OWN_SETS, "--", "sh", "-c", f"{pfan} 2 & {bare} 2; wait")
    assert r.returncode == 0, r.stderr
    return q, pfan, bare


def test_whole_machine_collapsed_stacks_follow_the_grammar(collection):
    q, pfan, bare = collection
    out = q_view(str(q), "--format", "collapsed")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[-1] == ""  # every line ends in a newline
    lines = lines[:-1]
    assert lines
    bad = [line for line in lines if not COLLAPSED.fullmatch(line)]
    assert not bad, bad[:5]
    roots = {line.split(";", 1)[0].rsplit(" ", 1)[0] for line in lines}
    assert {pfan.name, bare.name} <= roots  # each stack starts with its process
    assert not any(r.endswith("_[k]") for r in roots)
    kernel = [line for line in lines if "_[k]" in line]
    assert kernel  # the kernel ran: its frames are marked
    for line in kernel:  # kernel frames come last (innermost): none above a user frame
        frames = line.rsplit(" ", 1)[0].split(";")[1:]
        marks = [f.endswith("_[k]") for f in frames]
        assert marks == sorted(marks), line
    total = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
    doc = json.loads(q_view(str(q), "--format", "json").stdout)
    assert doc["unit"] == "seconds" and total == pytest.approx(doc["total"] * 1e9, rel=1e-6)
    per_pid = q_view(str(q), "--format", "collapsed", "--per-pid").stdout.splitlines()
    assert all(COLLAPSED.fullmatch(line) for line in per_pid)
    assert any(re.match(rf"{re.escape(pfan.name)}-\d+;", line) for line in per_pid)
    samples = q_view(str(q), "--format", "collapsed", "--weight", "samples").stdout.splitlines()
    assert all(COLLAPSED.fullmatch(line) for line in samples)
    # at 997 Hz a sample weighs about 1 ms: the counts are the weights over that
    counted = sum(int(line.rsplit(" ", 1)[1]) for line in samples)
    assert 0.5 * total / 1e6 < counted < 2 * total / 1e6


def test_program_and_whole_machine_reports(collection):
    q, pfan, _bare = collection
    prog = q_view(str(q / f"{pfan.name}.info"), "--format", "json")
    assert prog.returncode == 0, prog.stderr
    assert prog.stdout == q_view(str(q), "--comm", pfan.name, "--format", "json").stdout
    assert {t["comm"] for t in json.loads(prog.stdout)["tasks"]} == {pfan.name}
    flat = q_view(str(q), "--flat")
    assert flat.returncode == 0, flat.stderr
    assert "Flat profile of cpu-clock in" in flat.stdout and "Task sets in" not in flat.stdout
    unknown = q_view(str(q / "no-such-prog.info"))
    assert unknown.returncode == 1
    assert "no program 'no-such-prog'" in unknown.stderr and pfan.name in unknown.stderr


def test_a_stripped_program_is_grouped_by_function(collection):
    q, pfan, bare = collection
    full = json.loads(q_view(str(q), "--comm", pfan.name, "--format", "json",
                             "--no-kernel").stdout)
    named = {f["name"] for f in full["functions"] if f["object"] == pfan.name and f["self"]
             and not f["name"].endswith("@plt")}
    out = q_view(str(q), "--comm", bare.name, "--format", "json", "--no-kernel")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = [f for f in doc["functions"] if f["object"] == bare.name and f["self"]
            and not f["name"].endswith("@plt")]  # PLT entries keep their names
    assert rows and all(re.fullmatch(rf"0x[0-9a-f]+<{re.escape(bare.name)}>", f["name"])
                        for f in rows)
    # one row per function that ran, not one per address: never more rows
    # than the unstripped copy has functions with samples (plus main's
    # loop and the PLT, which have unwind entries of their own)
    assert len(rows) <= len(named) + 2
    by_address = json.loads(q_view(str(q), "--comm", bare.name, "--format", "json",
                                   "--no-kernel", "--by", "address").stdout)
    addresses = [f for f in by_address["functions"] if f["object"] == bare.name and f["self"]]
    assert len(addresses) > len(rows)


def test_stripped_stacks_are_rooted_by_their_unwind_tables(collection):
    q, _pfan, bare = collection
    doc = json.loads(q_view(str(q), "--comm", bare.name, "--format", "json").stdout)
    # single-threaded: every stack ends in _start, whose CFI undefines the
    # return address, though the stripped program has no symbol _start
    assert doc["stack_quality"]["share"] >= 0.99


def test_stacks_cut_short_are_not_rooted(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--stack-size", "64", "--", str(pfan), "1")
    assert r.returncode == 0, r.stderr
    doc = json.loads(q_view(str(q), "--comm", pfan.name, "--format", "json").stdout)
    assert doc["stack_quality"]["share"] < 0.5


def test_a_kernel_only_run_shows_idle_apart(perf, tmp_path):
    from qtools.qformat import read_info
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "-k", "-t", "2")
    assert r.returncode == 0, r.stderr
    infos = [read_info(p) for p in q.glob("kernel-cpu*.info#*")]
    with_samples = [i for i in infos if i.task.samples]
    assert with_samples
    for info in with_samples:
        idle = info.task.extra["q:idle-weight"]
        assert isinstance(idle, int) and idle >= 0
    out = q_view(str(q))
    assert out.returncode == 0, out.stderr
    rows = [line.split()[0] for line in out.stdout.split("\n\n")[0].splitlines()[2:]]
    assert "idle" in rows and "kernel" in rows
