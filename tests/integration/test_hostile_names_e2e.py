"""Hostile names through the installed commands: a real process whose
program file name, functions and source file have names with control
characters and terminal escapes, and whose threads rename themselves so
with prctl(PR_SET_NAME) (tests/hostile_names.py), collected by
q-syscollect; then every view of q-view, whose output must hold none of
those characters raw (and its JSON every name exactly)."""

from __future__ import annotations

import json
import os
import select
import signal
from pathlib import Path

import pytest

from qtools.qformat.names import sanitize_prog
from tests import hostile_names as H
from tests.conftest import OWN_SETS, q_syscollect, q_view, q_view_popen

SECONDS = 2


@pytest.fixture(scope="module")
def collected(perf, tmp_path_factory) -> tuple[Path, str, Path]:
    """The .q, the program's sets (PROG.info) and the source directory."""
    tmp = tmp_path_factory.mktemp("hostile-e2e")
    exe = H.build(tmp / "bin", H.EXE_NAME)
    q = tmp / "q"
    r = q_syscollect("-q", "--off-cpu", "-d", str(q), *OWN_SETS, "--", str(exe), str(SECONDS),
                     *H.THREADS, text=False)
    assert r.returncode == 0, r.stderr
    return q, sanitize_prog(H.COMM) + ".info", exe.parent


def _views(q: Path, prog: str, source: Path) -> dict[str, list[str]]:
    d = ["-d", str(q)]
    views = {
        "overview": [str(q)], "overview per cpu": [str(q), "--per-cpu"],
        "overview by unit": [str(q), "--group", "unit"],
        "overview json": [str(q), "--overview", "--format", "json"],
        "default": [*d, prog], "flat": [*d, prog, "--flat"], "graph": [*d, prog, "--graph"],
        "stack quality": [*d, prog, "--stack-quality"], "python": [*d, prog, "--python"],
        "inline": [*d, prog, "--inline"],
        "annotate": [*d, prog, "--annotate", H.LEAF, "--source-root", str(source)],
        "event wall": [*d, prog, "--metric", "wall"],
        "metrics": [*d, prog, "--metric", "cpu,off-cpu,wall", "-g"],
        "metrics json": [*d, prog, "--metric", "cpu,wall", "--format", "json"],
        "diff": ["--diff", str(q / prog), str(q / prog)],
        "diff json": ["--diff", str(q / prog), str(q / prog), "--format", "json"],
        "collapsed per pid": [str(q), "--format", "collapsed", "--per-pid"],
    }
    for by in ("thread", "object", "address", "line"):
        views[f"by {by}"] = [*d, prog, "--by", by, "--graph"]
    for fmt in ("text", "json", "collapsed", "dot"):
        views[fmt] = [*d, prog, "--format", fmt]
        views[f"{fmt} by thread"] = [*d, prog, "--format", fmt, "--by", "thread"]
    return views


VIEWS = ["overview", "overview per cpu", "overview by unit", "overview json", "default",
         "flat", "graph", "stack quality", "python", "inline", "annotate", "event wall",
         "metrics", "metrics json", "diff", "diff json", "collapsed per pid", "by thread",
         "by object", "by address", "by line", "text", "json", "collapsed", "dot",
         "text by thread", "json by thread", "collapsed by thread", "dot by thread"]


@pytest.mark.parametrize("view", VIEWS)
def test_no_view_of_a_real_collection_shows_a_control_character(collected, view):
    q, prog, source = collected
    r = q_view(*_views(q, prog, source)[view], text=False)
    out, err = r.stdout.decode(), r.stderr.decode()
    assert r.returncode == 0 and "Traceback" not in err, err
    assert H.raw_controls(out) == [] and H.raw_controls(err) == [], (out, err)


def test_json_names_the_real_threads_functions_and_program_exactly(collected):
    q, prog, _source = collected
    r = q_view("-d", str(q), prog, "--format", "json", "--by", "thread", text=False)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    names = {f["name"] for f in doc["functions"]}
    assert {H.LEAF, H.CALLER} <= names
    threads = {n.rpartition(" [tid ")[0] for n in names if n.endswith("]") and " [tid " in n}
    assert {H.COMM, *H.THREADS} <= threads, threads
    assert H.EXE_NAME in {f["object"] for f in doc["functions"]}
    assert doc["tasks"][0]["comm"] == H.COMM


def test_a_watch_of_a_real_collection_escapes_names(collected):
    q, prog, _source = collected
    env = dict(os.environ, PYTHONUNBUFFERED="1", LINES="60", COLUMNS="200")
    proc = q_view_popen("--watch", "-d", str(q), prog, "--graph", "--by", "thread", text=False,
                        env=env)
    seen = b""
    try:
        while b"Stack quality" not in seen or not seen.endswith(b"\n"):
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, seen
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, seen
            seen += chunk
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    screen = seen.decode()
    assert screen.startswith("\x1b[H\x1b[2J")  # its own screen control, once
    assert H.raw_controls(screen.removeprefix("\x1b[H\x1b[2J")) == [], screen
    assert H.raw_controls(err.decode()) == []
