"""Errors that help: where the task sets are, the names and versions that
exist, and exit status 2 for every usage error."""

from __future__ import annotations

import os

import pytest

from qsynth import MS, QBuilder
from scenarios import run
from tests.conftest import q_view
from qtools.viewer.inputs.hints import versions_text


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "Q_DIR"}
    return {**env, **extra}


def _one_line(proc, code: int = 1) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_no_q_here_says_how_to_get_one(tmp_path):
    line = _one_line(q_view(cwd=tmp_path, env=_env()))
    assert f"no .q directory in {tmp_path}" in line
    assert "-d DIR" in line and "$Q_DIR" in line and "q-syscollect" in line


def test_no_q_here_but_task_sets_here_or_below(tmp_path):
    QBuilder(tmp_path / "runs" / "q1").task("app", 1, 0, hist={0x1000: MS})
    line = _one_line(q_view(cwd=tmp_path / "runs", env=_env()))
    assert line.endswith("q1 has task sets: q-view q1")
    line = _one_line(q_view(cwd=tmp_path / "runs" / "q1", env=_env()))
    assert line.endswith("this directory holds task sets: q-view .")


def test_a_missing_directory_from_d_or_q_dir(tmp_path):
    missing = str(tmp_path / "nowhere")
    line = _one_line(q_view("-d", missing, cwd=tmp_path, env=_env()))
    assert line.startswith(f"q-view: {missing}: no such directory")
    assert f"q-syscollect -t 20 -d {missing}" in line
    line = _one_line(q_view(cwd=tmp_path, env=_env(Q_DIR=missing)))
    assert f"$Q_DIR names {missing}, which is not a directory" in line


def test_a_directory_that_holds_a_q_below_it(tmp_path):
    q = QBuilder(tmp_path / "proj" / ".q")
    q.task("app", 1, 0, hist={0x1000: MS})
    parent = str(tmp_path / "proj")
    want = f"q-view: {parent}: no task sets here, but {parent}/.q has: q-view {parent}/.q"
    for argv in ([parent], ["-d", parent], [parent, "--comm", "app"]):
        code, out, err = run(*argv)
        assert (code, out, err) == (1, "", want + "\n"), argv
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty directory (a collection not checkpointed yet) is no error
    assert run(str(empty)) == (0, f"No task sets (*.info#N) in {empty}.\n", "")


def test_comm_that_matches_nothing_lists_the_nearest_names(tmp_path):
    q = QBuilder(tmp_path / ".q")
    for pid, comm in enumerate(("p-fan", "p-fan2", "postgres", "sshd", "bash")):
        q.task(comm, pid + 10, 0, hist={0x1000: MS})
    code, out, err = run(str(q.path), "--comm", "pfan")
    assert code == 1 and out == ""
    assert err == f"q-view: {q.path}: no task set matches --comm pfan; nearest: p-fan, p-fan2\n"
    code, _, err = run(str(q.path), "--comm", "xyzzy")
    assert code == 1 and "; the names there: bash, p-fan, p-fan2, postgres, sshd" in err


def test_a_missing_version_lists_those_that_exist(tmp_path):
    q = QBuilder(tmp_path / ".q")
    for v in (0, 1, 2, 5):
        q.task("app", 1, 0, version=v, hist={0x1000: MS})
    path = q.info_path("app-pid1-cpu0.info#7")
    code, out, err = run(path)
    assert (code, out) == (1, "")
    assert err == f"q-view: {path}: no version #7 of app-pid1-cpu0.info; versions here: " \
                  "#0-#2, #5\n"
    code, _, err = run(q.info_path("app-pid2-cpu0.info#0"))
    assert code == 1 and "no such file, nor any version of app-pid2-cpu0.info" in err


def test_versions_text_folds_and_bounds():
    assert versions_text([3, 0, 1, 2, 9]) == "#0-#3, #9"
    many = versions_text(list(range(0, 100, 2)))
    assert many.startswith("..., ") and many.endswith("#98") and many.count("#") == 8


@pytest.mark.parametrize("argv,message", [
    (["--since", "soonish"], "--since: not a time: 'soonish'"),
    (["--until", "25:00"], "--until: not a time of day"),
    (["--since", "1h ago", "--until", "2h ago"], "--until 2h ago is before --since 1h ago"),
    (["--run", "not-hex"], "--run takes a run id"),
    (["--min-percent", "200"], "--min-percent must be between 0 and 100"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, argv, message):
    QBuilder(tmp_path / ".q").task("app", 1, 0, hist={0x1000: MS})
    line = _one_line(q_view(str(tmp_path / ".q"), *argv), code=2)
    assert line == f"q-view: {message}" or line.startswith(f"q-view: {message}"), line
