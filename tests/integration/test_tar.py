"""`tar chf q.tar .q` is a complete, portable profile: unpacked elsewhere,
with the profiled program gone, or read in place, q-view shows the same
profile."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile

import pytest

from tests.conftest import q_syscollect
from tests.integration.test_view_e2e import q_view


def _profile(q, comm: str) -> dict:
    r = q_view(str(q), "--comm", comm, "--format", "json", "--no-cache")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr  # every copy found, every crc right
    doc = json.loads(r.stdout)
    return {"functions": sorted((f["name"], f["object"], round(f["self"], 9))
                                for f in doc["functions"]),
            "arcs": sorted((a["caller"], a["callee"]) for a in doc["arcs"]),
            "total": doc["total"]}


@pytest.mark.parametrize("mode", ["copies", "symlinks"])
def test_tarred_q_views_the_same_elsewhere(perf, build, tmp_path, mode):
    if shutil.which("tar") is None:
        pytest.skip("tar is not installed")
    pfan = tmp_path / "bin" / build("p-fan").name
    pfan.parent.mkdir()
    shutil.copy(build("p-fan"), pfan)
    here = tmp_path / "here"
    here.mkdir()
    extra = ["--symlink"] if mode == "symlinks" else []
    r = q_syscollect("-d", str(here / ".q"), *extra, "--", str(pfan), "2")
    assert r.returncode == 0, r.stderr
    before = _profile(here / ".q", pfan.name)
    # listed with stacks: inclusive 100% and about 25% of the samples, so present at any n
    assert {"main", "f08"} <= {name for name, _o, _s in before["functions"]}

    copy = next((here / ".q").glob(f".{pfan.name}.crc32.*"))
    assert copy.is_symlink() == (mode == "symlinks")
    subprocess.run(["tar", "chf", "q.tar", ".q"], cwd=here, check=True)
    shutil.rmtree(pfan.parent)  # the program is gone, as on another machine
    there = tmp_path / "there"
    there.mkdir()
    with tarfile.open(here / "q.tar") as tar:
        assert not [m.name for m in tar.getmembers() if m.issym()]  # h: contents, not links
        tar.extractall(there, filter="data")
    after = _profile(there / ".q", pfan.name)
    assert after == before
    # read in place, not unpacked: the same profile
    assert _profile(here / "q.tar", pfan.name) == before
