"""Time slices (--since/--until), the overview's global data, and --watch."""

from __future__ import annotations

import io
import os
import select
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from qsynth import MS, QBuilder
from tests.conftest import q_view_popen
from qtools.viewer.commands.view import main
from qtools.viewer.model.viewerrors import ViewError
from qtools.viewer.inputs.timewin import overlaps, parse_time

NOW = datetime(2026, 11, 22, 12, 0, 0).timestamp()
HOUR = 3600.0


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("text,expected", [
    ("2h ago", NOW - 2 * HOUR), ("90m ago", NOW - 5400), ("3 days ago", NOW - 3 * 86400),
    ("1w ago", NOW - 7 * 86400), ("now", NOW), ("@1763800000", 1763800000.0),
    ("03:00", datetime(2026, 11, 22, 3, 0).timestamp()),
    ("today", datetime(2026, 11, 22).timestamp()),
    ("yesterday", datetime(2026, 11, 21).timestamp()),
    ("2026-11-20 03:30", datetime(2026, 11, 20, 3, 30).timestamp()),
    ("2026-11-20T03:30:15+00:00", datetime.fromisoformat("2026-11-20T03:30:15+00:00").timestamp()),
])
def test_time_forms(text, expected):
    assert parse_time(text, NOW) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["soon", "25:00", "2h", "ago", "@x", ""])
def test_bad_times(bad):
    with pytest.raises(ViewError):
        parse_time(bad, NOW)


def test_overlap_rules():
    assert overlaps(10, 20, 15, None) and overlaps(10, 20, None, 15) and overlaps(10, 20, 0, 30)
    assert not overlaps(10, 20, 21, None) and not overlaps(10, 20, None, 9)
    assert overlaps(None, None, 100, 200)  # a slice that cannot be placed is kept


def _slices(tmp_path: Path) -> QBuilder:
    """Three hourly slices of one task, 1, 2 and 3 samples, and one per CPU."""
    qb = QBuilder(tmp_path / "q")
    for v, hours in enumerate((3, 2, 1)):
        start = time.time() - hours * HOUR
        extra = {"start_time": start, "end_time": start + HOUR, "state": "closed",
                 "task_stats": {"q:user-seconds": 1.5, "q:voluntary-switches": 10 * (v + 1)}}
        qb.task("app", 7, 0, version=v, hist={0x1000: (v + 1) * MS}, extra_info=extra)
        qb.task("kernel", None, 0, version=v, hist={0xffffffff81000000: MS},
                extra_info={**extra, "task_stats": None,
                            "cpu_stats": {"q:busy": 0.25 * (v + 1), "q:seconds": HOUR,
                                          "q:frequency-mhz": 2400.0 + v}})
    return qb


def test_since_until_select_and_merge_slices(tmp_path):
    qb = _slices(tmp_path)
    q = str(qb.path)
    code, out, _ = run(q, "--comm", "app", "--format", "json")
    assert code == 0 and '"total": 0.003' in out  # without a window: the latest slice only
    # slices: [-3h, -2h] 1 sample, [-2h, -1h] 2 samples, [-1h, now] 3 samples
    code, out, _ = run(q, "--comm", "app", "--since", "110m ago", "--format", "json")
    assert code == 0 and '"total": 0.005' in out  # the last two slices, merged
    code, out, _ = run(q, "--comm", "app", "--since", "4h ago", "--until", "90m ago",
                       "--format", "json")
    assert code == 0 and '"total": 0.003' in out  # the first two
    code, out, err = run(q, "--comm", "app", "--until", "5h ago")
    assert code == 1 and "no task set matches --comm app --until" in err
    code, out, _ = run(os.path.join(q, "app-pid7-cpu0.info"), "--since", "50m ago",
                       "--format", "json")
    assert code == 0 and '"total": 0.003' in out  # a name without #N: its slices in the window


def test_selection_reads_only_what_it_may_need(tmp_path):
    """A long run's directory holds thousands of sets: --pid and --cpu pass
    over the other sets' files by name, --since over slices last written
    before the window, so a broken file there is not even read."""
    qb = _slices(tmp_path)
    q = qb.path
    for v, hours in enumerate((3, 2, 1)):  # each slice's .info last written as it closed
        end = time.time() - hours * HOUR + HOUR
        os.utime(q / f"app-pid7-cpu0.info#{v}", (end, end))
    (q / "app-pid7-cpu0.info#0").write_text("(q:info '((q:pid . 7)")  # truncated
    os.utime(q / "app-pid7-cpu0.info#0", (time.time() - 2 * HOUR,) * 2)
    qb.task("app", 8, 1, hist={0x1000: MS})
    (q / "app-pid8-cpu1.info#0").write_text("(((")
    code, out, err = run(str(q), "--pid", "7", "--since", "110m ago", "--format", "json")
    assert code == 0 and '"total": 0.005' in out, err
    code, out, err = run(str(q), "--cpu", "0", "--comm", "app", "--format", "json")
    assert code == 0 and '"total": 0.003' in out, err
    code, _out, err = run(str(q), "--pid", "7", "--since", "4h ago")
    assert code == 1 and "app-pid7-cpu0.info#0:1:" in err  # now in the window: read, refused
    code, _out, err = run(str(q))
    assert code == 1 and "app-pid8-cpu1.info#0:1:" in err


def test_overview_sums_slices_and_shows_global_data(tmp_path):
    qb = _slices(tmp_path)
    code, out, _ = run(str(qb.path), "--since", "4h ago")
    assert code == 0, out
    app = next(line for line in out.splitlines() if line.startswith("app"))
    assert "6.00m" in app and "(+2 slices)" in app  # 1+2+3 samples over three slices
    assert "4.50" in app and " 60 " in app  # user seconds and voluntary switches, summed
    assert "slices --since" in out
    cpu = out.split(" cpu    busy   steal  iowait    idle      MHz     lost\n")[1] \
        .splitlines()[0].split()
    # busy weighted over the slices, idle the rest (older sets: no steal, no
    # iowait); the latest clock
    assert cpu == ["0", "50.0%", "-", "-", "50.0%", "2402", "0"]
    code, out, _ = run(str(qb.path))
    app = next(line for line in out.splitlines() if line.startswith("app"))
    assert "3.00m" in app and "slices" not in app  # latest version only


def test_watch_redraws_when_a_checkpoint_lands(tmp_path):
    qb = QBuilder(tmp_path / "q")
    qb.task("alpha", 1, 0, hist={0x1000: MS})
    proc = q_view_popen("--watch", str(qb.path), text=False,
                        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        seen = _read_until(proc, "alpha")
        assert "\x1b[H\x1b[2J" in seen and "omega" not in seen
        qb.task("omega", 2, 0, hist={0x1000: 5 * MS})  # a collector's checkpoint
        seen = _read_until(proc, "omega")
        assert seen.count("\x1b[H\x1b[2J") >= 1
    finally:
        proc.send_signal(2)  # Ctrl-C
        proc.wait(10)
    assert proc.returncode == 0


def _read_until(proc: subprocess.Popen, word: str, timeout: float = 20) -> str:
    seen = ""
    end = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += chunk.decode()
            if word in seen:
                return seen
    raise AssertionError(f"{word!r} never appeared: {seen!r}")
