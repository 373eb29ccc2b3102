"""Jitdumps another user writes to cost the root collector the most: records
cheap to write and dear to index. The run still ends at its time with its
sets written; a dump past its caps is given up in one line naming its pid."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import q_syscollect
from tests.integration.test_collect import check_complete, sets_of
from qtools.qformat.jit.jitdump import CodeLoad, CodeMove, parse

AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
MOVE = 64  # bytes of a CODE_MOVE record

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                       reason="needs root and setpriv to act as another user"),
    pytest.mark.skipif(platform.machine() != "x86_64",
                       reason="the jitdump workload generates x86-64 code"),
]


@pytest.fixture
def attacker(build, request):
    """attacker(name, *args) -> the running workload ``jitdump *args`` as
    user nobody, once its dump holds every hostile record."""
    work = Path(tempfile.mkdtemp(prefix="qtools-jit-"))
    os.chmod(work, 0o755)
    running: list[subprocess.Popen] = []

    def _start(name: str, records: int, *args: str) -> subprocess.Popen:
        exe = work / name
        exe.write_bytes(build("jitdump").read_bytes())
        exe.chmod(0o755)
        proc = subprocess.Popen([*AS_NOBODY, str(exe), *args], cwd=work)
        running.append(proc)
        dump = Path(f"/tmp/jit-{proc.pid}.dump")
        for _ in range(600):  # its records are written in well under a second
            if proc.poll() is not None or (dump.exists()
                                          and dump.stat().st_size >= records * MOVE):
                break
            time.sleep(0.05)
        assert proc.poll() is None and dump.stat().st_uid == 65534
        return proc

    def _end() -> None:
        for proc in running:
            proc.kill()
            proc.wait()
            Path(f"/tmp/jit-{proc.pid}.dump").unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)

    request.addfinalizer(_end)
    return _start


def _collect(q: Path) -> subprocess.CompletedProcess:
    # -t 10: the run ends then, whatever the dumps hold (it once took 130 s,
    # its final checkpoints killed, no set written)
    r = q_syscollect("-d", str(q), "-t", "10", "--min-samples", "1", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "did not finish" not in r.stderr and "lost data" not in r.stderr, r.stderr
    summary = re.search(r"captured (\d+) samples? \((\d+) lost\) in [\d.]+ s; wrote (\d+) sets",
                        r.stderr)
    assert summary, r.stderr
    captured, lost, sets = map(int, summary.groups())
    assert sets > 0 and lost < captured, r.stderr  # once: more samples lost than captured
    check_complete(q)
    return r


def _dump_refs(q: Path, name: str, pid: int) -> list:
    refs = [j for _n, i in sets_of(q, name) if i.task.pid == pid for j in i.jitdumps]
    assert refs, f"no set of {name} (pid {pid}) names its jitdump"
    return refs


def test_code_moves_at_descending_addresses_leave_the_run_on_time(perf, attacker, tmp_path):
    n = 400_000  # 25.6 MB: each a sorted insert at the front of the index, once
    proc = attacker("desc-jit", n, "descending", str(n), "300")
    q = tmp_path / "q"
    _collect(q)
    dump = Path(f"/tmp/jit-{proc.pid}.dump").read_bytes()
    for ref in _dump_refs(q, "desc-jit", proc.pid):
        copy = (q / ref.file).read_bytes()
        assert dump.startswith(copy)  # what was read of it, whole records
        _h, records, pending = parse(copy)
        loads = sum(isinstance(rec, (CodeLoad, CodeMove)) for rec in records)
        assert pending == 0 and 1 <= ref.code_loads == loads <= n + 1
        assert ref.truncated == (1 if ref.code_loads < n + 1 else None)


def test_cuts_through_a_long_history_give_the_dump_up_at_the_index_cap(perf, attacker,
                                                                        tmp_path):
    # 2,000 moves over one 16 MiB range, then one-byte moves inside it: each
    # cuts the range twice, copying its 2,000-entry history each time; the
    # index's 1,048,576 entries are reached at about the 260th
    proc = attacker("split-jit", 2_300, "splits", "2000", "300", "300")
    q = tmp_path / "q"
    r = _collect(q)
    # (other processes of this machine's may have jitdumps of their own)
    said = [line for line in r.stderr.splitlines() if f"(pid {proc.pid})" in line]
    assert said == [f"q-syscollect: jitdump /tmp/jit-{proc.pid}.dump (pid {proc.pid}): more "
                    "than 1048576 index entries (code loads over code loads); later ones are "
                    "not kept"], r.stderr
    for ref in _dump_refs(q, "split-jit", proc.pid):
        _h, records, _pending = parse((q / ref.file).read_bytes())
        moves = [rec for rec in records if isinstance(rec, CodeMove)]
        assert ref.truncated == 1 and 2_000 < len(moves) < 2_300
