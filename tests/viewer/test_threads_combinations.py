"""--metric (one name or several), --tid and --by thread with every other report option:
a report (exit 0) or one line saying what does not go together (exit 2),
never a traceback."""

from __future__ import annotations

import itertools

import pytest

from scenarios import run, threads_setup

THREAD_OPTIONS = [
    [*event, *metrics, *tid, *by]
    for event in ([], ["--metric", "cpu"], ["--metric", "off-cpu"], ["--metric", "cpu-wait"],
                  ["--metric", "wall"])
    for metrics in ([], ["--metric", "cpu,off-cpu,wall"])
    for tid in ([], ["--tid", "41"])
    for by in ([], ["--by", "thread"])
][1:]  # not the plain CPU profile

REPORT_OPTIONS = [
    [], ["--python"], ["--per-pid", "--format", "collapsed"], ["--focus", "main"],
    ["--hide", "leaf1"], ["--ignore", "leaf2"], ["--kernel-only"], ["--no-kernel"],
    ["--by", "object"], ["--by", "address"], ["--format", "collapsed"], ["--format", "dot"],
    ["--format", "json"], ["--format", "json", "--stacks"], ["--format", "json", "-g"],
    ["-g"], ["--flat"], ["--stack-quality"], ["--min-percent", "20"],
    ["--min-percent", "20", "-g"], ["--weight", "samples", "--format", "collapsed"],
    ["--format", "pprof", "-o", "OUT"], ["--format", "otlp", "-o", "OUT"],
    ["--overview"], ["--per-cpu"], ["--focus", "main", "--no-kernel", "--format", "json", "-g"],
]

DIFF_OPTIONS = [[], ["--format", "json"], ["--format", "collapsed"], ["--absolute"],
                ["--no-kernel", "--focus", "main"], ["--python"], ["--by", "object"]]


def _check(argv: list[str]) -> None:
    """A report, or one line of usage error: what the command line promises."""
    code, out, err = run(*argv)  # an exception here is the traceback a user would see
    lines = err.splitlines()
    assert code in (0, 2), (argv, code, err)
    assert all(line.startswith("q-view: ") for line in lines), (argv, err)
    if code == 2:
        assert len(lines) == 1 and out == "", (argv, err)
    else:
        assert out or "-o" in argv, argv


@pytest.fixture
def threads_dir(tmp_path, calls_pie) -> str:
    q, _name = threads_setup(tmp_path, calls_pie)
    return str(q.path)


def test_every_report_option_with_the_thread_options(threads_dir, tmp_path):
    for thread, report in itertools.product(THREAD_OPTIONS, REPORT_OPTIONS):
        report = [str(tmp_path / "out") if a == "OUT" else a for a in report]
        _check([threads_dir, *thread, *report])


def test_diff_with_the_thread_options(threads_dir):
    for thread, extra in itertools.product(THREAD_OPTIONS, DIFF_OPTIONS):
        _check(["--diff", threads_dir, threads_dir, *thread, *extra])
