"""--watch: a redraw only when a checkpoint lands, a screen that fits."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time

from qsynth import MS, QBuilder
from scenarios import calls_dir, run, threads_setup, with_threads
from tests.conftest import q_view_popen
from qtools.viewer.render.fit import fit_text, share

CLEAR = "\x1b[H\x1b[2J"
QUIET_FOR = 2.5  # seconds an unchanging directory is watched


def _watch(*argv: str, lines: int = 40, columns: int = 120, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", LINES=str(lines), COLUMNS=str(columns))
    env.pop("Q_DIR", None)
    return q_view_popen("--watch", *argv, text=False, env=env, **kw)


def _read(proc: subprocess.Popen, until: str | None, timeout: float) -> str:
    """Output until ``until`` appears (else fail), or all of it for ``timeout`` seconds."""
    seen = ""
    end = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += chunk.decode()
            if until is not None and until in seen:
                return seen
    assert until is None, f"{until!r} never appeared: {seen!r}"
    return seen


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(2)  # Ctrl-C
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()  # not left behind holding an inotify instance
        proc.wait()
        raise
    assert proc.returncode == 0, proc.stderr.read()


def test_ctrl_c_ends_a_watch_started_with_sigint_ignored(tmp_path):
    """A background job of a shell without job control starts with SIGINT
    ignored; the watch must still end on Ctrl-C, not need SIGKILL."""
    qb = QBuilder(tmp_path / "q")
    qb.task("alpha", 1, 0, hist={0x1000: MS})
    proc = _watch(str(qb.path),
                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        _read(proc, "total", 30)
    finally:
        _stop(proc)


def test_an_unchanging_directory_is_drawn_once(tmp_path):
    qb = QBuilder(tmp_path / "q")
    for pid in range(5):
        qb.task("alpha", pid + 1, 0, hist={0x1000: MS})
    proc = _watch(str(qb.path))
    try:
        seen = _read(proc, "total", 30)
        seen += _read(proc, None, QUIET_FOR)  # q-view's own reads of the sets are no change
        assert seen.count(CLEAR) == 1, seen
        (qb.path / "alpha-pid1-cpu0.hist#7").write_text("0x1000 1\n")  # not an .info
        (qb.path / ".alpha-pid1-cpu0.info#7.tmp").write_text("")  # a writer's temporary
        assert _read(proc, None, QUIET_FOR).count(CLEAR) == 0
        qb.task("omega", 9, 0, hist={0x1000: 5 * MS})  # a checkpoint lands
        seen = _read(proc, "omega", 30)
        assert seen.count(CLEAR) == 1
    finally:
        _stop(proc)


def test_the_overview_fits_the_terminal(tmp_path):
    qb = QBuilder(tmp_path / "q")
    for pid in range(40):
        qb.task(f"task{pid:02d}", pid + 100, pid % 2, hist={0x1000: (pid + 1) * MS})
    proc = _watch(str(qb.path), lines=12, columns=50)
    try:
        screen = _read(proc, "total", 30).split(CLEAR)[1]
    finally:
        _stop(proc)
    rows = screen.splitlines()
    assert len(rows) < 12 and max(len(r) for r in rows) <= 50, screen
    assert rows[3].startswith("command") and rows[4].startswith("task39 ")  # largest first
    cut = [r for r in rows if r.startswith("... ")]
    assert len(cut) == 1 and cut[0].endswith("more task sets"), screen
    shown = sum(1 for r in rows if r.startswith("task"))
    assert cut[0] == f"... {40 - shown} more task sets"
    assert rows[-1].startswith("total")


def test_a_profile_fits_the_terminal(tmp_path, calls_pie):
    q, _o, name = calls_dir(tmp_path, calls_pie)
    proc = _watch(q.info_path(name), lines=12, columns=60)
    try:
        screen = _read(proc, "more rows", 30).split(CLEAR)[1]
    finally:
        _stop(proc)
    rows = screen.splitlines()
    assert len(rows) < 12 and max(len(r) for r in rows) <= 60, rows
    assert "Flat profile of cpu-clock" in screen and "call-graph" not in screen
    flat = [r for r in rows if r[:7].strip().replace(".", "").isdigit()]
    assert flat and flat[0].split()[-1] == "leaf1"  # the flat profile's top row
    _code, whole, _err = run(q.info_path(name), "--flat")
    body = whole.split("  name\n", 1)[1].splitlines()  # 7 functions and a note
    assert rows[-1] == f"... {len(body) - len(flat)} more rows"
    proc = _watch(q.info_path(name), "--graph", lines=20, columns=60)
    try:
        screen = _read(proc, "Stack quality", 30).split(CLEAR)[1]
    finally:
        _stop(proc)
    rows = screen.splitlines()
    assert len(rows) < 20 and "call-graph table:" in rows and "more rows" in screen


def test_a_watch_of_off_cpu_time_redraws_at_each_checkpoint(tmp_path, calls_pie):
    """--watch with --metric and --tid: the chosen metric of the chosen
    threads, redrawn when a checkpoint brings a new version of the set."""
    q, _name = threads_setup(tmp_path, calls_pie)
    proc = _watch(str(q.path), "--metric", "off-cpu", "--tid", "41")
    try:
        screen = _read(proc, "[stacks not kept]", 30).split(CLEAR)[1]
        assert "Flat profile of off-cpu" in screen
        assert [r.split()[1] for r in screen.splitlines() if r.endswith(" leaf1")] == ["0.300"]
        o = q.objects[0]
        work = (o.at("leaf1"), o.ret("work"), o.ret("main"))
        name = q.task("calls", 40, 0, version=1, stacks=[(30 * MS, list(work))])
        with_threads(q, name, {41: "io worker"}, {("D", 41, work): 2000 * MS})
        seen = _read(proc, " 2.00 ", 30)
        assert "[stacks not kept]" not in seen.split(CLEAR)[-1]
    finally:
        _stop(proc)
    proc = _watch(str(q.path), "--metric", "off-cpu,cpu", "--tid", "41")
    try:
        screen = _read(proc, "[total]", 30).split(CLEAR)[1]
        assert "Functions by off-cpu, cpu" in screen
    finally:
        _stop(proc)


def test_share_keeps_small_tables_whole():
    assert share([3, 50, 10], 20) == [3, 9, 8]
    assert share([100, 100], 11) == [6, 5]  # the remainder to the top table
    assert share([2, 2], 10) == [2, 2] and share([5], 0) == [0]


def test_fit_text_cuts_each_table_and_says_how_much():
    text = "head\n" + "".join(f"r{i}\n" for i in range(30)) + "\nsmall\ns0\n" \
        + "\nwide " + "x" * 100 + "\n"
    out = fit_text(text, 10, 20).splitlines()
    assert len(out) == 10 and max(map(len, out)) <= 20
    assert out[:2] == ["head", "r0"] and "... " in out[out.index("small") - 2]
    assert out[out.index("small") - 2].endswith("more rows")
    assert out[-1] == "wide " + "x" * 15
    assert fit_text("a\nb\n", 10, 80) == "a\nb\n"  # what fits is left alone
    tiny = fit_text(text, 3, 80).splitlines()
    assert len(tiny) == 3 and tiny[-1].endswith("more lines")


def test_without_inotify_a_change_of_the_directory_redraws(tmp_path, monkeypatch):
    """Where inotify cannot be had (its per-user limit reached: not something
    a test may do to this shared machine), the directory's change time is
    looked at instead."""
    import io
    import threading

    from qtools.viewer.commands import watch as watch_module
    monkeypatch.setattr(watch_module, "_observe", lambda directories, flag: None)
    qb = QBuilder(tmp_path / "q")
    qb.task("alpha", 1, 0, hist={0x1000: MS})
    draws: list[bool] = []
    later = threading.Timer(0.5, lambda: qb.task("omega", 2, 0, hist={0x1000: MS}))

    def draw(out, rows: int) -> int:
        draws.append((qb.path / "omega-pid2-cpu0.info#0").exists())
        if len(draws) == 1:
            later.start()  # a checkpoint lands after the first screen
        return 0

    try:
        assert watch_module.watch([str(qb.path)], draw, io.StringIO(), redraws=2) == 0
    finally:
        later.cancel()
    assert draws == [False, True]
