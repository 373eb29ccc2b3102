"""Runs told apart: the note of a selection that spans runs, --run, and
what never filters by run (explicit names, time windows)."""

from __future__ import annotations

import json
import re
import time

import pytest

from qsynth import MS, QBuilder
from scenarios import run
from qtools.viewer.inputs.runs import Run, notice

OLD, NEW = "3f2a9c0e1b7d", "a81c55d0e4f2"
HOUR = 3600.0


def _two_runs(tmp_path) -> tuple[QBuilder, float, float]:
    """A run an hour ago (app pid 10, kernel-cpu0#0), a run a minute ago
    (app pid 20, kernel-cpu0#1, and a helper) and a set from before run ids."""
    q = QBuilder(tmp_path / ".q")
    old_start, new_start = time.time() - HOUR, time.time() - 60
    old = {"run_id": OLD, "run_start": old_start, "hostname": "h1"}
    new = {"run_id": NEW, "run_start": new_start, "hostname": "h1"}
    q.task("app", 10, 0, hist={0x1000: 3 * MS}, extra_info=old)
    q.task("kernel", None, 0, hist={0xffffffff81000000: 1 * MS}, extra_info=old)
    q.task("app", 20, 0, hist={0x1000: 5 * MS}, extra_info=new)
    q.task("kernel", None, 0, version=1, hist={0xffffffff81000000: 2 * MS}, extra_info=new)
    q.task("helper", 21, 1, hist={0x1000: 7 * MS}, extra_info=new)
    q.task("legacy", 5, 1, hist={0x1000: 11 * MS})
    return q, old_start, new_start


def _note(err: str) -> str:
    notes = [line for line in err.splitlines() if line.startswith("q-view: note:")]
    assert len(notes) == 1, err
    return notes[0]


def _files(out: str) -> set[str]:
    return {line.split()[-1] for line in out.splitlines() if ".info#" in line}


def _total_ms(out: str) -> float:
    return round(json.loads(out)["total"] * 1000, 6)


def test_a_directory_of_several_runs_shows_everything_with_one_note(tmp_path):
    q, old_start, new_start = _two_runs(tmp_path)
    code, out, err = run(str(q.path))
    assert code == 0, err
    assert _files(out) == {"app-pid10-cpu0.info#0", "app-pid20-cpu0.info#0",
                           "kernel-cpu0.info#1", "helper-pid21-cpu1.info#0",
                           "legacy-pid5-cpu1.info#0"}  # nothing hidden
    note = _note(err)
    assert "3 runs" in note and OLD in note and NEW in note and "unknown run" in note
    for start in (old_start, new_start):
        assert time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(start)) in note
    assert "--run" in note and "latest" in note
    rows = {line.split()[-1]: line for line in out.splitlines() if ".info#" in line}
    assert f" {OLD[:8]} " in rows["app-pid10-cpu0.info#0"]  # the run column: a --run prefix
    assert f" {NEW[:8]} " in rows["app-pid20-cpu0.info#0"]
    # a merged profile of several runs says so too, and merges them all
    code, out, err = run(str(q.path), "--comm", "app", "--format", "json")
    assert code == 0 and _total_ms(out) == 8.0, err
    assert "2 runs" in _note(err)


def test_run_latest_and_a_prefix_pick_one_run(tmp_path):
    q, _, _ = _two_runs(tmp_path)
    d = str(q.path)
    code, out, err = run(d, "--run", "latest")
    assert code == 0 and err == "", err
    assert _files(out) == {"app-pid20-cpu0.info#0", "kernel-cpu0.info#1",
                           "helper-pid21-cpu1.info#0"}
    # the older run's kernel-cpu0 is an older version: it is found all the same
    code, out, err = run(d, "--run", OLD[:4])
    assert code == 0 and err == "", err
    assert _files(out) == {"app-pid10-cpu0.info#0", "kernel-cpu0.info#0"}
    code, out, err = run(d, "--run", OLD, "--cpu", "0", "--format", "json")
    assert code == 0 and _total_ms(out) == 4.0, err  # app 3 + kernel 1
    code, out, err = run(d, "--run", "latest", "--comm", "app", "--format", "json")
    assert code == 0 and _total_ms(out) == 5.0 and err == "", err
    code, out, err = run(d, "--run", "unknown")
    assert code == 0 and _files(out) == {"legacy-pid5-cpu1.info#0"}, err
    code, out, err = run(d, "--run", NEW.upper(), "--all-versions", "--cpu", "0",
                         "--format", "json")
    assert code == 0 and _total_ms(out) == 7.0, err  # ids read in either case


def test_run_ids_that_name_no_run_or_several(tmp_path):
    q, _, _ = _two_runs(tmp_path)
    QBuilder(q.path).task("other", 30, 0, hist={0x1000: MS},
                          extra_info={"run_id": OLD[:3] + "fff", "run_start": time.time()})
    d = str(q.path)
    code, out, err = run(d, "--run", "99")
    assert code == 1 and out == ""
    assert re.fullmatch(rf"q-view: {re.escape(d)}: no run 99 here; .*{OLD}.*{NEW}.*\n", err)
    code, _, err = run(d, "--run", OLD[:3])
    assert code == 1 and "matches 2 runs" in err and OLD in err and "more digits" in err
    code, _, err = run(d, "--run", "3f2a-")
    assert code == 2 and "--run takes a run id" in err
    code, _, err = run(d, "--run", NEW, "--comm", "legacy")
    assert code == 1 and "no task set matches --comm legacy --run" in err
    assert "nearest" not in err  # legacy exists, in another run


def test_explicit_names_and_time_windows_never_filter_by_run(tmp_path):
    q, _, _ = _two_runs(tmp_path)
    older = q.info_path("app-pid10-cpu0.info")
    code, out, err = run(older, "--format", "json")
    assert code == 0 and _total_ms(out) == 3.0 and err == "", err
    code, out, err = run(q.info_path("kernel-cpu0.info#0"), q.info_path("kernel-cpu0.info#1"),
                         "--format", "json")
    assert code == 0 and _total_ms(out) == 3.0, err  # both runs, merged
    assert "--run" not in _note(err)  # no directory to pick a run from
    code, _, err = run(older, "--run", "latest")
    assert code == 2 and "--run picks among the sets of a directory" in err
    # explicit names are kept whatever run, beside a directory's sets of one run
    code, out, err = run(str(q.path), older, "--run", NEW, "--comm", "app", "--format", "json")
    assert code == 0 and _total_ms(out) == 8.0, err
    # a window takes the slices of every run in it
    code, out, err = run(str(q.path), "--cpu", "0", "--since", "2h ago", "--format", "json")
    assert code == 0 and _total_ms(out) == 11.0, err  # 3 + 1 + 5 + 2
    assert "2 runs" in _note(err)


def test_slices_of_one_run_are_one_run(tmp_path):
    """--rotate: a run's slices are versions of each set; --run picks them all
    in a window and the latest of them without one."""
    q = QBuilder(tmp_path / ".q")
    start = time.time() - 3 * HOUR
    for v in range(3):
        q.task("svc", 7, 0, version=v, hist={0x1000: (v + 1) * MS},
               extra_info={"run_id": OLD, "run_start": start, "start_time": start + v * HOUR,
                           "end_time": start + (v + 1) * HOUR})
    q.task("svc", 7, 0, version=3, hist={0x1000: 10 * MS},
           extra_info={"run_id": NEW, "run_start": time.time(), "start_time": time.time() - 1,
                       "end_time": time.time()})
    d = str(q.path)
    code, out, err = run(d, "--run", OLD, "--since", "4h ago", "--format", "json",
                         "--comm", "svc")
    assert code == 0 and _total_ms(out) == 6.0 and err == "", err
    code, out, err = run(d, "--run", OLD, "--comm", "svc", "--format", "json")
    assert code == 0 and _total_ms(out) == 3.0, err  # its latest slice
    code, out, err = run(d, "--since", "4h ago")
    assert code == 0 and "2 runs" in _note(err)
    assert "(+3 slices)" in out and " 2 runs " in out


@pytest.mark.parametrize("count,listed", [(2, 2), (5, 3)])
def test_the_note_is_one_line_however_many_runs(count, listed):
    runs = [Run(f"{i:012x}", 1_763_900_000.0 + i * HOUR, "h1") for i in range(count)]
    line = notice(runs, hint=True)
    assert line is not None and "\n" not in line
    assert f"{count} runs" in line and line.count("started") == listed
    assert runs[-1].id in line  # the latest is always named
    if count > listed:
        assert f"{count - listed} older" in line
    assert notice(runs[:1], hint=True) is None


def test_run_latest_reads_no_older_version(tmp_path):
    """Versions only grow: the latest run's sets are the latest versions, so
    picking it reads nothing more; an older run reads the older versions of
    the sets a later run wrote again (here a damaged one, which is named)."""
    q, _, _ = _two_runs(tmp_path)
    (q.path / "kernel-cpu0.info#0").write_text("(((")
    code, out, err = run(str(q.path), "--run", "latest")
    assert code == 0 and "kernel-cpu0.info#1" in out, err
    code, out, err = run(str(q.path), "--run", OLD)
    assert code == 1 and "kernel-cpu0.info#0:1:" in err


@pytest.mark.parametrize("spec", [OLD, "latest", "0123456789ab"])
def test_picking_a_run_parses_each_info_once(tmp_path, monkeypatch, spec):
    """--run reads older versions where a set's latest belongs to another
    run; the versions already read for the selection are not read again."""
    from qtools.viewer.inputs import load, select
    q, _old, _new = _two_runs(tmp_path)
    parsed: list[str] = []
    real = load.read_set

    def counting(directory, name, *args, **kw):
        parsed.append(name)
        return real(directory, name, *args, **kw)
    monkeypatch.setattr(load, "read_set", counting)
    selection = select.Selection()
    chosen = load.sets_in(str(q.path))
    try:
        select.pick_run(chosen, spec, [str(q.path)], selection, False)
    except Exception as e:  # the unknown run: an error naming it, after the look
        assert spec == "0123456789ab" and "0123456789ab" in str(e)
    assert len(parsed) == len(set(parsed)), parsed
