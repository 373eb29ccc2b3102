"""Lost samples counted once: a CPU's loss, which every set open on that
CPU repeats, shows once per CPU and slice in every report, with the share
of the selection's samples it could have been (docs/q-format.md 4.1, 8)."""

from __future__ import annotations

import json

import pytest

from qsynth import MS, QBuilder
from scenarios import run
from qtools.viewer.model.lost import LostClaim, lost_once

RUN = "0123456789ab"
T0 = 1_700_000_000.0  # the run's (and its first slice's) start
SLICE = 60.0


def _set(q: QBuilder, o, prog: str, pid: int | None, cpu: int, samples: int,
         lost: int, lost_from: int | None, start: float, end: float,
         version: int = 0, slice_start: float = T0) -> str:
    info = {"samples": samples, "lost_samples": lost, "run_id": RUN, "hostname": "box",
            "start_time": start, "end_time": end}
    if lost_from is not None:  # written by this release
        info.update(lost_from=lost_from, slice_start=slice_start)
    return q.task(prog, pid, cpu, version=version, stacks=[(samples * MS, [o.at("main")])],
                  extra_info=info)


def _two_cpus(tmp_path, calls_pie, new: bool = True) -> QBuilder:
    """CPU 0 lost 100 records in the slice, CPU 1 lost 40; each CPU's sets
    repeat its loss as far as they were open (the sum of the sets' counts
    is 305)."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)

    def at(n: int) -> int | None:
        return n if new else None
    _set(q, o, "kernel", None, 0, 50, 100, at(0), T0, T0 + SLICE)  # spans the slice
    _set(q, o, "calls", 10, 0, 20, 30, at(10), T0 + 5, T0 + 20)  # losses 10..39
    _set(q, o, "calls", 11, 0, 10, 25, at(20), T0 + 10, T0 + 25)  # 20..44: shares 20 of them
    _set(q, o, "other", 12, 0, 10, 20, at(50), T0 + 30, T0 + 40)  # 50..69
    _set(q, o, "kernel", None, 1, 40, 40, at(0), T0, T0 + SLICE)
    _set(q, o, "calls", 13, 1, 30, 40, at(0), T0 + 1, T0 + 59)
    _set(q, o, "other", 14, 1, 30, 40, at(0), T0 + 1, T0 + 59)
    return q


def _lost(d: str, *args: str) -> tuple[int, float | None, str]:
    flat = run(d, "--flat", *args)[1]
    doc = json.loads(run(d, "--format", "json", *args)[1])
    line = next((ln for ln in flat.splitlines() if ln.startswith("Lost samples")), "")
    return doc["lost_samples"], doc["lost_share"], line


def test_each_cpu_loss_counts_once_not_once_per_set(tmp_path, calls_pie):
    d = str(_two_cpus(tmp_path, calls_pie).path)
    count, share, line = _lost(d)
    assert count == 100 + 40  # not 305, the sum of the sets' counts
    samples = 50 + 20 + 10 + 10 + 40 + 30 + 30
    assert share == pytest.approx(140 / (140 + samples))
    assert line == f"Lost samples: 140 (up to {100 * 140 / (140 + samples):.1f}% of the " \
        "samples of the CPUs and times selected)"


def test_a_selection_counts_the_losses_while_its_sets_were_open(tmp_path, calls_pie):
    d = str(_two_cpus(tmp_path, calls_pie).path)
    # pids 10 and 11 on CPU 0 saw losses 10..44 (35, not 30 + 25), pid 13
    # on CPU 1 saw that CPU's 40
    assert _lost(d, "--comm", "calls")[:2] == (35 + 40, pytest.approx(75 / (75 + 60)))
    assert _lost(d, "--pid", "12")[0] == 20
    assert _lost(d, "--cpu", "1")[0] == 40


def test_older_sets_count_the_largest_of_a_cpus_overlapping_sets(tmp_path, calls_pie):
    """Without q:lost-from: the kernel set spans the slice, so each CPU's
    loss still counts once."""
    d = str(_two_cpus(tmp_path, calls_pie, new=False).path)
    assert _lost(d)[0] == 100 + 40
    # pids 10 and 11 overlap (30 and 25: at least 30 were lost meanwhile);
    # on CPU 1 pid 13 saw 40
    assert _lost(d, "--comm", "calls")[0] == 30 + 40


def test_the_slices_of_a_cpu_add_up(tmp_path, calls_pie):
    """Each --rotate slice counts its losses from 0: two slices' losses
    are two losses, not one."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    _set(q, o, "kernel", None, 0, 10, 7, 0, T0, T0 + SLICE, version=0)
    _set(q, o, "calls", 10, 0, 10, 7, 0, T0 + 1, T0 + SLICE, version=0)
    _set(q, o, "kernel", None, 0, 10, 5, 0, T0 + SLICE, T0 + 2 * SLICE, version=1,
         slice_start=T0 + SLICE)
    _set(q, o, "calls", 10, 0, 10, 3, 2, T0 + SLICE, T0 + 2 * SLICE, version=1,
         slice_start=T0 + SLICE)
    assert _lost(str(q.path), "--all-versions")[0] == 7 + 5
    assert _lost(str(q.path))[0] == 5  # the latest slice alone


def test_no_loss_no_line(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    _set(q, o, "calls", 10, 0, 10, 0, None, T0, T0 + 1)
    count, share, line = _lost(str(q.path))
    assert (count, share, line) == (0, 0.0, "")


def _claim(cpu: int, lost: int, lost_from: int | None, start: float = T0,
           end: float = T0 + 1, host: str = "box", samples: int | None = 1) -> LostClaim:
    return LostClaim(host, RUN, cpu, T0 if lost_from is not None else None, lost_from, lost,
                     samples, start, end)


def test_hosts_and_cpus_are_apart_and_unknown_samples_give_no_share():
    claims = [_claim(0, 10, 0), _claim(0, 10, 0, host="other"), _claim(1, 10, 5),
              _claim(1, 10, 10)]
    assert lost_once(claims) == (10 + 10 + 15, pytest.approx(35 / 39))
    assert lost_once([_claim(0, 4, 0, samples=None)]) == (4, None)
    # older sets of one CPU: those apart in time add up, those that overlap do not
    older = [_claim(0, 6, None, T0, T0 + 10), _claim(0, 4, None, T0 + 5, T0 + 8),
             _claim(0, 3, None, T0 + 10, T0 + 20)]
    assert lost_once(older).records == 6 + 3
