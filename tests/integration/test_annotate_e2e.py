"""Source lines and annotation of a real run: hotline.c built with -g -O2,
sampled by q-syscollect, shown by q-view --by line and --annotate."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import q_syscollect, q_view
from tests.qsynth import compile_c

SRC = Path(__file__).resolve().parent.parent / "data" / "src" / "hotline.c"


def _line(marker: str) -> int:
    return next(n for n, text in enumerate(SRC.read_text().splitlines(), 1) if marker in text)


def test_hot_line_of_a_real_run(perf, tmp_path):
    """spin()'s loop body line (HOT) holds the bulk of its samples (about
    78% here; perf annotate agrees): with n >= 100 samples of spin, sigma of
    a share near 78% is 4.1 pp, and 50% is more than 6 sigma below. The
    samples of spin are counted, so a loaded machine only makes n larger
    than the bound needs (the run is a fixed amount of work)."""
    exe = compile_c(SRC, tmp_path / "hotline", "-g", "-fPIE", "-pie")
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--", str(exe), "400000000")
    assert r.returncode == 0, r.stderr
    r = q_view(str(q), "--comm", exe.name, "--by", "line", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    in_spin = [f for f in doc["functions"] if f.get("function") == "spin"]
    total = sum(f["self"] for f in in_spin)
    samples = total / doc["granularity"] if doc["granularity"] else 0
    assert samples >= 100, f"only {samples:.0f} samples of spin"
    hot = next(f for f in in_spin if f["name"] == f"hotline.c:{_line('/* HOT */')}")
    assert hot["self"] > 0.5 * total, in_spin
    r = q_view(str(q), "--comm", exe.name, "--annotate", "spin")
    assert r.returncode == 0, r.stderr
    marked = [l for l in r.stdout.splitlines() if l.startswith("*")]
    assert any("/* HOT */" in l for l in marked), r.stdout
