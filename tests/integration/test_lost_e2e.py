"""Lost samples on a real run: a one-page ring at 20 kHz loses most of its
records (seen: 41,079 lost, 3,636 captured, frame-pointer stacks, whose
small records still let some of p-fan's samples through), and q-view counts each CPU's loss once, never more than the run's summary
line says the rings lost, however many sets repeat it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from qtools.qformat import read_info
from tests.conftest import OWN_SETS, q_syscollect, q_view


def _summary_lost(stderr: str) -> int:
    m = re.search(r"captured \d+ samples? \((\d+) lost\)", stderr)
    assert m, stderr
    return int(m[1])


def _viewed_lost(q: Path, *args: str) -> tuple[int, float | None, str]:
    flat = q_view(str(q), "--flat", *args)
    assert flat.returncode == 0, flat.stderr
    line = next((ln for ln in flat.stdout.splitlines() if ln.startswith("Lost samples:")), "")
    doc = json.loads(q_view(str(q), "--format", "json", *args).stdout)
    return doc["lost_samples"], doc["lost_share"], line


def test_a_run_that_loses_samples_shows_each_loss_once(perf, build, tmp_path):
    pfan = build("p-fan")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), *OWN_SETS, "-c", "20000", "--mmap-pages", "1",
                     "--call-graph", "fp", "--", str(pfan), "1")
    assert r.returncode == 0, r.stderr
    summary = _summary_lost(r.stderr)
    assert summary > 0, r.stderr  # the precondition: the rings overflowed
    counts = [read_info(p).task.lost_samples or 0 for p in q.glob("*.info#*")]
    count, share, line = _viewed_lost(q)
    # the sets repeat their CPU's loss (their sum was 26036 against 1905 lost
    # before it was counted once); the view shows it once
    assert 0 < count <= summary <= sum(counts), (count, summary, counts)
    assert share is not None and 0 < share <= 1
    assert re.fullmatch(rf"Lost samples: {count} \(up to [\d.]+% of the samples of the CPUs "
                        r"and times selected\)", line), line
    # each CPU's loss once: the CPUs' views add up to the whole run's
    cpus = sorted({read_info(p).task.cpu for p in q.glob("kernel-cpu*.info#*")})
    assert sum(_viewed_lost(q, "--cpu", str(cpu))[0] for cpu in cpus) == count
