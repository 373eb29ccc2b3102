"""Program and whole-machine reports: PROG.info, DIR --flat, folded stacks
with a process frame."""

from __future__ import annotations

import json
import re

import pytest
from qsynth import MS, QBuilder
from scenarios import KALLSYMS, run

# frame;frame;...;frame N: no ';' or line break in a frame, N positive
COLLAPSED = re.compile(r"[^;\n]+(;[^;\n]+)* [1-9][0-9]*")


def machine(tmp_path, calls_pie) -> QBuilder:
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.add_kallsyms(KALLSYMS)
    main = [o.ret("main"), o.ret("_start")]
    q.task("calls", 10, 0, stacks=[(3 * MS, [o.at("leaf1"), o.ret("work")] + main)])
    q.task("calls", 10, 1, stacks=[(2 * MS, [o.at("leaf2")] + main)])
    q.task("calls", 11, 0, stacks=[(1 * MS, [o.at("leaf1"), o.ret("work")] + main)])
    q.task("other", 12, 1, stacks=[(4 * MS, [0xFFFFFFFF81004040, 0xFFFFFFFF81001011,
                                               o.at("work")] + main)])
    q.task("kernel", None, 0, stacks=[(5 * MS, [0xFFFFFFFF81005010])], comm="kernel",
           objects=[])
    return q


def selfs(out: str) -> dict[str, float]:
    return {f["name"]: round(f["self"] * 1000, 6) for f in json.loads(out)["functions"]
            if f["self"]}


def test_a_program_name_means_all_its_sets(tmp_path, calls_pie, monkeypatch):
    q = machine(tmp_path, calls_pie)
    code, out, err = run(str(q.path / "calls.info"), "--format", "json")
    assert (code, err) == (0, "")
    assert selfs(out) == {"leaf1": 4, "leaf2": 2}
    assert out == run(str(q.path), "--comm", "calls", "--format", "json")[1]
    doc = json.loads(out)
    assert sorted(t["file"] for t in doc["tasks"]) == [
        "calls-pid10-cpu0.info#0", "calls-pid10-cpu1.info#0", "calls-pid11-cpu0.info#0"]
    monkeypatch.chdir(tmp_path)  # a bare name is looked for in ./.q
    assert run("calls.info", "--format", "json")[1] == out.replace(str(q.path), ".q")
    # narrowed like --comm
    assert selfs(run(str(q.path / "calls.info"), "--pid", "11", "--format", "json")[1]) \
        == {"leaf1": 1}


def test_an_unknown_program_lists_the_programs(tmp_path, calls_pie):
    q = machine(tmp_path, calls_pie)
    code, out, err = run(str(q.path / "nosuch.info"))
    assert code == 1 and out == ""
    assert err == (f"q-view: {q.path}/nosuch.info: no such file, and no program 'nosuch' in "
                   f"{q.path}; programs there: calls, kernel, other\n")


def test_a_directory_with_a_report_option_is_the_whole_machine(tmp_path, calls_pie):
    q = machine(tmp_path, calls_pie)
    _c, overview, _e = run(str(q.path))
    assert overview.startswith("Task sets in")
    code, out, err = run(str(q.path), "--format", "json")
    assert (code, err) == (0, "")
    assert selfs(out) == {"leaf1": 4, "leaf2": 2, "vfs_read": 4,
                          "asm_sysvec_apic_timer_interrupt": 5}
    code, flat, err = run(str(q.path), "--flat")
    assert (code, err) == (0, "") and flat.startswith("Command: ")
    assert "Flat profile of cpu-clock in 5 histogram files:" in flat
    assert json.loads(run(str(q.path), "--format", "json", "--overview")[1])["sets"]
    # --cpu narrows it as before
    assert selfs(run(str(q.path), "--cpu", "1", "--format", "json")[1]) == {
        "leaf2": 2, "vfs_read": 4}


def test_sets_without_samples_do_not_stop_a_whole_machine_report(tmp_path, calls_pie):
    from qtools.qformat import Info, QDir, TaskInfo, dump_info
    q = machine(tmp_path, calls_pie)
    with QDir.open(q.path) as d:  # a version claimed by an older collector: no data yet
        d.atomic_write("late-pid99-cpu0.info#0", dump_info(Info(task=TaskInfo(
            comm="late", pid=99, cpu=0, samples=0))).encode())
    code, out, err = run(str(q.path), "--format", "json")
    assert (code, err) == (0, "")
    assert "late-pid99-cpu0.info#0" not in {t["file"] for t in json.loads(out)["tasks"]}


def test_folded_stacks_start_with_the_process(tmp_path, calls_pie):
    q = machine(tmp_path, calls_pie)
    code, out, err = run(str(q.path), "--format", "collapsed")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert all(COLLAPSED.fullmatch(line) for line in lines), out
    assert lines == [
        f"calls;_start;main;leaf2 {2 * MS}",
        f"calls;_start;main;work;leaf1 {4 * MS}",
        "idle;asm_sysvec_apic_timer_interrupt_[k] 5000000",  # pid 0's set
        f"other;_start;main;work;do_syscall_64_[k];vfs_read_[k] {4 * MS}",
    ]
    _c, per_pid, _e = run(str(q.path), "--format", "collapsed", "--per-pid")
    assert f"calls-10;_start;main;work;leaf1 {3 * MS}" in per_pid.splitlines()
    assert f"calls-11;_start;main;work;leaf1 {1 * MS}" in per_pid.splitlines()
    assert "idle-0;asm_sysvec_apic_timer_interrupt_[k] 5000000" in per_pid.splitlines()
    _c, samples, _e = run(str(q.path), "--format", "collapsed", "--weight", "samples")
    assert samples.splitlines()[:2] == ["calls;_start;main;leaf2 2",
                                        "calls;_start;main;work;leaf1 4"]
    _c, kern, _e = run(str(q.path), "--format", "collapsed", "--kernel-only")
    assert kern.splitlines() == ["idle;asm_sysvec_apic_timer_interrupt_[k] 5000000",
                                 f"other;do_syscall_64_[k];vfs_read_[k] {4 * MS}"]


def test_weight_samples_goes_with_collapsed(tmp_path, calls_pie):
    q = machine(tmp_path, calls_pie)
    code, _out, err = run(str(q.path), "--flat", "--weight", "samples")
    assert code == 2 and "--weight samples goes with --format collapsed" in err


@pytest.mark.parametrize("comm", ["a;b", "new\nline"])
def test_no_frame_holds_a_separator(tmp_path, calls_pie, comm):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.task("odd", 3, 0, stacks=[(1 * MS, [o.at("main")])], comm=comm)
    code, out, err = run(str(q.path), "--format", "collapsed")
    assert (code, err) == (0, "")
    assert all(COLLAPSED.fullmatch(line) for line in out.splitlines()), out
    assert len(out.splitlines()) == 1


def test_kernel_frames_anywhere_in_the_kernel_half_are_named(tmp_path, calls_pie):
    # A 5-level x86-64 machine: kernel text at 0xff11..., which the set's
    # q:kernel-from says is the kernel's; user frames below it as usual.
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    q.add_kallsyms("ff11000000400000 T five_level_read\nff11000000401000 T five_level_end\n")
    main = [o.ret("main"), o.ret("_start")]
    kernel = [0xFF11_0000_0040_0040, 0xFF11_0000_0040_0010]
    q.task("calls", 10, 0, stacks=[(3 * MS, kernel + [o.at("work")] + main),
                                   (1 * MS, [o.at("leaf1"), o.ret("work")] + main)],
           extra_info={"kernel_from": min(kernel)})
    code, out, err = run(str(q.path / "calls.info"), "--format", "json")
    assert (code, err) == (0, "")
    assert selfs(out) == {"five_level_read": 3, "leaf1": 1}
