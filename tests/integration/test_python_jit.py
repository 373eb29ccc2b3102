"""Python seen whole: CPython's perf trampolines (3.12 `-X perf`) and jitdump
(3.13 `-X perf_jit`), and jitdumps of a small C JIT, collected with
`q-syscollect -i` and viewed with q-view.

Shares are checked against the work the programs do (1:2:4 loop steps),
within 4 standard deviations of the sample counts, with a floor."""

from __future__ import annotations

import glob
import json
import math
import os
import platform
import re
from pathlib import Path

import pytest

from tests.conftest import q_syscollect, q_view
from tests.integration.test_collect import check_complete, sets_of

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"
PYSHARES = WORKLOADS / "pyshares.py"
ROUNDS = "250"  # about 2 s of CPU


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def interpreter(version: str) -> str:
    """CPython VERSION itself (not a wrapper script such as pyenv's shims, whose
    comm is bash) from PATH or pyenv's versions; skip, saying so, without one."""
    name = f"python{version}"
    candidates = [os.path.join(d, name) for d in os.environ.get("PATH", "").split(os.pathsep)
                  if d]
    for pattern in (os.path.expanduser(f"~/.pyenv/versions/{version}*/bin/{name}"),
                    f"/root/.pyenv/versions/{version}*/bin/{name}"):
        candidates += sorted(glob.glob(pattern), reverse=True)
    for path in candidates:
        if os.access(path, os.X_OK) and _is_elf(os.path.realpath(path)):
            return path
    pytest.skip(f"no CPython {version} executable in PATH or ~/.pyenv/versions: cannot "
                "test its perf support here")


def tolerance(share: float, samples: float, floor: float = 0.03) -> float:
    return max(4 * math.sqrt(share * (1 - share) / max(samples, 1)), floor)


def _json(q: Path, *args: str) -> dict:
    r = q_view(str(q), *args, "--format", "json", "--no-cache")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _collect(tmp_path: Path, *cmd: str) -> tuple[Path, str]:
    q = tmp_path / "q"
    r = q_syscollect("-q", "-d", str(q), "-i", "--", *cmd)  # -q: warnings alone on stderr
    assert r.returncode == 0, r.stderr
    return q, r.stderr


def _check_python_profile(q: Path, comm: str, jit_kind: str) -> None:
    data = _json(q, "--comm", comm)
    total, gran = data["total"], data["granularity"] or 1 / 997
    by_name = {f["name"]: f for f in data["functions"]}
    path = str(PYSHARES)
    names = {k: f"py::{k}:{path}" for k in ("outer", "f1", "f2", "f4")}
    missing = [n for n in names.values() if n not in by_name]
    assert not missing, (missing, sorted(by_name)[:40])
    # the caller of the three holds nearly all the time
    outer = by_name[names["outer"]]["inclusive"]
    n = total / gran
    # Samples the ring lost (a collector kept from draining on a loaded
    # machine) go missing in a stretch, from whichever function ran then:
    # each may move a share by one sample's worth, beyond sampling noise.
    lost = data["lost_samples"] or 0
    assert outer / total >= 0.95 - tolerance(0.95, n, 0.05) - lost / n, (outer, total, lost)
    # 1:2:4 among the three
    incl = {k: by_name[names[k]]["inclusive"] for k in ("f1", "f2", "f4")}
    work = sum(incl.values())
    for k, expected in (("f1", 1 / 7), ("f2", 2 / 7), ("f4", 4 / 7)):
        share = incl[k] / work
        slack = lost / (work / gran)
        assert abs(share - expected) <= tolerance(expected, work / gran) + slack, \
            (k, share, incl, lost)
    # at least 95% of the user stacks reach a root, through Python frames
    assert data["stack_quality"]["share"] >= 0.95, data["stack_quality"]
    pyq = [p for p in data["stack_quality"]["python"] if p["process"].startswith(comm)]
    assert pyq and all(kind.startswith(jit_kind) for p in pyq for kind in p["jit"]), pyq
    assert sum(p["python_rooted"] for p in pyq) / sum(p["user_stacks"] for p in pyq) >= 0.9

    # the Python view: Python frames only, NAME (FILE), native time in its caller
    py = _json(q, "--comm", comm, "--python")
    pnames = {f["name"]: f for f in py["functions"]}
    assert not [n for n in pnames if n.startswith(("py::", "_Py", "Py"))], sorted(pnames)
    f4 = pnames[f"f4 ({path})"]
    assert math.isclose(py["total"], total, rel_tol=1e-6)
    # f4 has no Python callee: all its time (interpreter, allocator) is its own
    assert math.isclose(f4["self"], f4["inclusive"], rel_tol=1e-6)
    assert abs(f4["self"] - incl["f4"]) <= 1e-9 + 1e-6 * total
    text = q_view(str(q), "--comm", comm, "--python", "--graph", "--no-cache")
    assert text.returncode == 0 and f"outer ({path})" in text.stdout
    assert "Python stacks:" in text.stdout


def test_python313_perf_jit_stacks_are_whole(perf, tmp_path):
    python = interpreter("3.13")
    q, _err = _collect(tmp_path, python, "-X", "perf_jit", str(PYSHARES), ROUNDS)
    check_complete(q)
    comm = os.path.basename(python)[:15]
    infos = [i for _n, i in sets_of(q, comm)]
    dumps = [j for i in infos for j in i.jitdumps]
    assert dumps and all((q / j.file).is_file() and j.code_loads for j in dumps), dumps
    _check_python_profile(q, comm, "jitdump")


def test_python312_perf_trampolines_are_unwound(perf, tmp_path):
    python = interpreter("3.12")
    q, _err = _collect(tmp_path, python, "-X", "perf", str(PYSHARES), ROUNDS)
    check_complete(q)
    comm = os.path.basename(python)[:15]
    _check_python_profile(q, comm, "perf map")


# ---------------------------------------------------------------- a C JIT with jitdump

@pytest.fixture
def jitdump_prog(build):
    if platform.machine() != "x86_64":
        pytest.skip("the jitdump workload generates x86-64 code")
    return build("jitdump")


def _flat_shares(q: Path, comm: str) -> tuple[dict[str, float], dict]:
    data = _json(q, "--comm", comm)
    return {f["name"]: f["self"] for f in data["functions"]}, data


def test_reused_jit_address_is_attributed_to_the_code_there_at_sample_time(
        perf, jitdump_prog, tmp_path):
    # ten times: jit_first at X for 1 unit, then jit_second at X for 2
    q, err = _collect(tmp_path, str(jitdump_prog), "reuse", "10", "20", "10")
    assert "jitdump" not in err, err
    check_complete(q)
    selfs, data = _flat_shares(q, jitdump_prog.name)
    first, second = selfs.get("jit_first", 0.0), selfs.get("jit_second", 0.0)
    both = first + second
    assert both > 0.9 * data["total"], selfs
    share = second / both
    assert abs(share - 2 / 3) <= tolerance(2 / 3, both / data["granularity"]), selfs
    # unwound through the JIT code with the CFI its dump carried
    assert data["stack_quality"]["share"] >= 0.95, data["stack_quality"]
    (ref,) = {j.file: j for _n, i in sets_of(q, jitdump_prog.name) for j in i.jitdumps}.values()
    assert ref.code_loads == 20 and not ref.truncated


@pytest.mark.parametrize("mode,problem", [
    ("hostile", r"offset \d+: record size 3 is too small; keeping the 1 code load "),
    ("truncated", r"ends inside a record at offset \d+; keeping the 1 code load "),
])
def test_bad_jitdump_costs_one_warning_line_and_nothing_else(
        perf, jitdump_prog, tmp_path, mode, problem):
    q, err = _collect(tmp_path, str(jitdump_prog), mode, "10")
    lines = [line for line in err.splitlines() if "jitdump" in line]
    assert len(lines) == 1, err
    assert re.search(r"^q-syscollect: jitdump /tmp/jit-\d+\.dump \(pid \d+\): " + problem,
                     lines[0]), lines
    check_complete(q)
    selfs, data = _flat_shares(q, jitdump_prog.name)
    assert selfs.get("jit_first", 0) > 0.9 * data["total"], selfs
    assert data["stack_quality"]["share"] >= 0.95
    refs = [j for _n, i in sets_of(q, jitdump_prog.name) for j in i.jitdumps]
    assert refs and all(j.truncated == 1 and j.code_loads == 1 for j in refs)
    assert any(i.objects for _n, i in sets_of(q, jitdump_prog.name))
