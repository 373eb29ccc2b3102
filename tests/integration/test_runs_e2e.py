"""Runs told apart on real collections: every `.info` of a run carries its
id and start, slices and restarted collectors stay in the run, and q-view
tells two runs in one directory apart."""

from __future__ import annotations

import re
import time

import psutil

from tests.conftest import q_syscollect, q_syscollect_popen, q_view
from tests.integration.test_collect import _wait_for, infos

RUN_ID = re.compile(r"[0-9a-f]{12}")


def _runs(q) -> dict[str, set[str]]:
    """Run id -> names of the `.info` files it wrote."""
    out: dict[str, set[str]] = {}
    for name, info in infos(q).items():
        out.setdefault(info.task.run_id, set()).add(name)
    return out


def _collectors(pid: int) -> set[psutil.Process]:
    """The running collector children of q-syscollect ``pid``."""
    found = set()
    for child in psutil.Process(pid).children():
        try:
            if "q-syscollect" in " ".join(child.cmdline()):
                found.add(child)
        except psutil.Error:  # gone, or a zombie not reaped yet
            pass
    return found


def _latest(names: set[str]) -> set[str]:
    """The latest version of each set among ``names``."""
    versions: dict[str, int] = {}
    for name in names:
        base, v = name.rsplit("#", 1)
        versions[base] = max(versions.get(base, -1), int(v))
    return {f"{base}#{v}" for base, v in versions.items()}


def _files(overview: str) -> set[str]:
    return {m[1] for m in re.finditer(r"  (\S+\.info#\d+)", overview)}


def test_two_runs_into_one_directory(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    starts = []
    for _ in range(2):
        before = time.time()
        # --min-samples 1: p-fan gets sets of its own in each run, however
        # busy the machine (fewer samples would fold it into p-fan-cpuN)
        r = q_syscollect("-d", str(q), "-i", "--min-samples", "1", "--", str(pfan), "1")
        assert r.returncode == 0, r.stderr
        starts.append((before, time.time()))
    runs = _runs(q)
    assert len(runs) == 2 and all(RUN_ID.fullmatch(i) for i in runs), runs
    for name, info in infos(q).items():
        assert info.task.hostname  # host, run id and start in every .info
        span = next(s for s in starts if s[0] - 1 <= info.task.run_start <= s[1])
        assert info.task.start_time >= span[0] - 1, name
    first, second = sorted(runs, key=lambda i: next(
        infos(q)[n].task.run_start for n in runs[i]))
    view = q_view(str(q), "--per-cpu")  # a row per set, each naming its file
    assert view.returncode == 0, view.stderr
    notes = [line for line in view.stderr.splitlines() if "note:" in line]
    assert len(notes) == 1 and "2 runs" in notes[0] and first in notes[0] \
        and second in notes[0] and "--run" in notes[0], view.stderr
    # nothing hidden: the latest version of every set, whichever run wrote it
    # (a set both runs wrote, such as a pid-less p-fan-cpuN, shows the second's)
    assert _files(view.stdout) == _latest(runs[first] | runs[second])
    assert _latest(runs[first]) & _files(view.stdout)  # the older run is there too
    latest = q_view(str(q), "--run", "latest", "--per-cpu")
    assert latest.returncode == 0 and latest.stderr == "", latest.stderr
    assert _files(latest.stdout) == _latest(runs[second])
    older = q_view(str(q), "--run", first[:5], "--per-cpu")
    assert older.returncode == 0 and older.stderr == "", older.stderr
    assert _files(older.stdout) == _latest(runs[first])
    name = sorted(runs[first])[0]
    one = q_view(str(q / name), "--flat")  # an explicit name of the older run: as it is
    assert one.returncode == 0 and one.stderr == "" and "Flat profile" in one.stdout


def test_slices_and_restarted_collectors_keep_the_run_id(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    proc = q_syscollect_popen("-d", str(q), "--rotate", "1", "--checkpoint", "1",
                              "--", str(pfan), "4")
    try:
        _wait_for(lambda: len(psutil.Process(proc.pid).children()) >= 3, 30, proc)
        time.sleep(1.5)
        collectors = _collectors(proc.pid)
        next(iter(collectors)).kill()
        _wait_for(lambda: _collectors(proc.pid) - set(collectors), 30, proc)  # restarted
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # a collector that died is a loss the run's status says (docs/security.md 5)
    assert proc.returncode == 3 and "lost data: the collector for cpu" in err, err
    runs = _runs(q)
    assert len(runs) == 1, {k: sorted(v)[:3] for k, v in runs.items()}
    names = next(iter(runs.values()))
    assert len(names) > len(_latest(names))  # several slices (versions of a set), one run
