"""Reading q-view's exports back in tests: pprof and JSON flat profiles,
`go tool pprof -top`."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import q_view


def flat_of_json(path: str, *options: str) -> tuple[float, dict[str, float]]:
    """q-view's flat profile: total and self per function name, in seconds."""
    proc = q_view(path, "--format", "json", *options)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    selfs: dict[str, float] = {}
    for f in doc["functions"]:
        name = f["name"].removesuffix(" (inlined)")  # pprof names the function alone
        selfs[name] = selfs.get(name, 0.0) + f["self"]
    return doc["total"], {k: v for k, v in selfs.items() if v}


def pprof_profile(path: Path):
    from qtools.viewer.render.pprof import Profile
    p = Profile()
    p.ParseFromString(gzip.decompress(path.read_bytes()))
    return p


def pprof_flat(p) -> tuple[float, dict[str, float]]:
    """Total and self per function name of the event value (the last sample type), in s."""
    names = {f.id: p.string_table[f.name] for f in p.function}
    leaf = {loc.id: names[loc.line[0].function_id] for loc in p.location}
    selfs: dict[str, float] = {}
    for s in p.sample:
        name = leaf[s.location_id[0]]
        selfs[name] = selfs.get(name, 0.0) + s.value[-1] * 1e-9
    return sum(selfs.values()), selfs


def go_or_skip() -> str:
    go = shutil.which("go")
    if go is None:
        if os.environ.get("CI"):
            pytest.fail("go is not installed (.ci/run installs golang-go): go tool pprof "
                        "must read q-view's pprof files")
        pytest.skip("go is not installed (Debian: golang-go); go tool pprof not checked")
    return go


def go_pprof(go: str, path: Path, home: Path, *options: str) -> str:
    """What `go tool pprof OPTIONS FILE` prints (HOME and GOCACHE: fresh ones)."""
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), GOCACHE=str(home / "gocache"),
               PPROF_TMPDIR=str(home), GOFLAGS="")
    proc = subprocess.run([go, "tool", "pprof", *options, str(path)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def go_pprof_top(go: str, path: Path, home: Path) -> dict[str, float]:
    """flat% per function, as `go tool pprof -top` prints it."""
    rows: dict[str, float] = {}
    for line in go_pprof(go, path, home, "-top", "-nodecount=1000").splitlines():
        m = re.match(r"\s*\S+\s+([\d.]+)%\s+[\d.]+%\s+\S+\s+[\d.]+%\s+(.+)$", line)
        if m and float(m[1]):
            # pprof marks a function inlined at a location "(inline)"; q-view's
            # JSON names it alone (flat_of_json), so do the rows
            name = m[2].removesuffix(" (inline)")
            rows[name] = round(rows.get(name, 0.0) + float(m[1]), 2)
    return rows


def pprof_percent(share: float) -> float:
    """A share in percent as `go tool pprof` prints it: 100% from 99.95 to
    100.05, two decimals from 1, two significant digits below."""
    if 99.95 <= abs(share) <= 100.05:
        return 100.0
    return round(share, 2) if abs(share) >= 1 else float(f"{share:.2g}")


def pprof_name(name: str) -> str:
    # pprof drops <...> (template arguments, to its mind) from the names it shows
    return re.sub(r"<[^<>]*>", "", name)


def pprof_by_thread(p) -> dict[tuple[str | None, int | None, str | None], float]:
    """The event value (s) per (pid, thread_id, thread) of a decoded pprof profile
    (no pid: an aggregate's sets, of processes with few samples)."""
    st = p.string_table
    out: dict[tuple[str | None, int | None, str | None], float] = {}
    for s in p.sample:
        strs = {st[lb.key]: st[lb.str] for lb in s.label if lb.str}
        nums = {st[lb.key]: lb.num for lb in s.label if not lb.str}
        key = (strs.get("pid"), nums.get("thread_id"), strs.get("thread"))
        out[key] = out.get(key, 0.0) + s.value[-1] * 1e-9
    return out
