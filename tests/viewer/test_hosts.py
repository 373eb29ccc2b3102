"""Many machines: several hosts' directories and tar archives merged,
``--host``, the host column, and hostile archives refused."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from qsynth import MS, QBuilder
from scenarios import KALLSYMS, run

from tests.conftest import q_view


def _host_of(q: Path, host: str) -> None:
    """Edit q:hostname in every `.info` of ``q``, as another machine wrote it."""
    for info in q.glob("*.info#*"):
        text = info.read_text()
        assert '(q:hostname . "alpha")' in text
        info.write_text(text.replace('(q:hostname . "alpha")', f'(q:hostname . "{host}")'))


@pytest.fixture
def hosts(tmp_path, calls_pie) -> tuple[Path, Path]:
    """``alpha/.q`` and ``beta/.q``: the same collection, two host names."""
    q = QBuilder(tmp_path / "alpha" / ".q")
    o = q.load(calls_pie)
    q.add_kallsyms(KALLSYMS)
    main = [o.ret("main"), o.ret("_start")]
    alpha = {"hostname": "alpha"}
    q.task("calls", 10, 0, stacks=[(3 * MS, [o.at("leaf1"), o.ret("work")] + main)],
           extra_info=alpha)
    q.task("calls", 11, 1, stacks=[(1 * MS, [o.at("leaf2")] + main)], extra_info=alpha)
    q.task("kernel", None, 0, stacks=[(2 * MS, [0xFFFFFFFF81005010])], comm="kernel",
           objects=[], extra_info=alpha)
    shutil.copytree(q.path, tmp_path / "beta" / ".q")
    _host_of(tmp_path / "beta" / ".q", "beta")
    return q.path, tmp_path / "beta" / ".q"


def _tar(q: Path, out: Path, *flags: str) -> Path:
    """The README's way: ``tar chf q.tar .q`` (links followed)."""
    subprocess.run(["tar", *flags, "-C", str(q.parent), "-chf", str(out), ".q"], check=True)
    return out


def _selfs(out: str) -> dict[str, float]:
    return {f["name"]: round(f["self"] * 1000, 6) for f in json.loads(out)["functions"]
            if f["self"]}


def _hosts(out: str) -> list[str]:
    return sorted(t["host"] for t in json.loads(out)["tasks"])


def test_two_hosts_merge_and_host_selects(hosts):
    alpha, beta = hosts
    code, one, err = run(str(alpha), "--format", "json")
    assert (code, err) == (0, "")
    assert _hosts(one) == ["alpha"] * 3
    code, both, err = run(str(alpha), str(beta), "--format", "json")
    assert (code, err) == (0, "")
    assert _selfs(both) == {k: 2 * v for k, v in _selfs(one).items()}
    assert _hosts(both) == ["alpha"] * 3 + ["beta"] * 3
    code, only, err = run(str(alpha), str(beta), "--host", "beta", "--format", "json")
    assert (code, err) == (0, "")
    assert _selfs(only) == _selfs(one) and _hosts(only) == ["beta"] * 3
    code, out, err = run(str(alpha), str(beta), "--host", "gamma", "--flat")
    assert code == 1 and out == ""
    assert err == "q-view: no task set matches --host gamma; hosts there: alpha, beta\n"


def test_overview_has_a_host_column_only_for_several_hosts(hosts):
    alpha, beta = hosts
    code, single, err = run(str(alpha))
    assert (code, err) == (0, "")
    assert "host" not in single.splitlines()[1]
    code, out, err = run(str(alpha), str(beta))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith(f"Task sets in {alpha}, {beta} (")
    assert lines[1].split()[:2] == ["host", "command"]
    rows = [line.split() for line in lines[2:] if line and line.split()[0] in ("alpha", "beta")]
    assert sorted((r[0], r[1]) for r in rows if r[1] != "cpu") == [
        ("alpha", "calls"), ("alpha", "calls"), ("alpha", "idle"),
        ("beta", "calls"), ("beta", "calls"), ("beta", "idle")]
    # one machine selected: the table of that directory, as without the other
    code, out, err = run(str(alpha), str(beta), "--host", "alpha")
    assert (code, err) == (0, "")
    assert out == single
    code, out, err = run(str(alpha), str(beta), "--host", "gamma")
    assert (code, out) == (1, "")
    assert err == "q-view: no task sets of host gamma; hosts there: alpha, beta\n"
    doc = json.loads(run(str(alpha), str(beta), "--format", "json", "--overview")[1])
    assert sorted(r["host"] for r in doc["sets"]) == ["alpha"] * 3 + ["beta"] * 3


@pytest.mark.parametrize("flags", [(), ("-z",)], ids=["tar", "tar.gz"])
def test_a_tar_and_a_directory_merge(hosts, tmp_path, flags):
    alpha, beta = hosts
    archive = _tar(alpha, tmp_path / ("alpha.tar.gz" if flags else "alpha.tar"), *flags)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = q_view(str(archive), str(beta), "--format", "json", "--no-cache")
    assert (r.returncode, r.stderr) == (0, "")
    expected = run(str(alpha), str(beta), "--format", "json", "--no-cache")[1]
    assert _selfs(r.stdout) == _selfs(expected)
    assert _hosts(r.stdout) == _hosts(expected)
    assert {t["directory"] for t in json.loads(r.stdout)["tasks"]} == {f"{archive}:.q",
                                                                         str(beta)}
    # symbols came from the archive's copies: the names are the functions'
    assert {"leaf1", "leaf2"} <= set(_selfs(r.stdout))
    r = q_view(str(archive))  # the overview of the archive's .q
    assert r.returncode == 0 and r.stdout.startswith(f"Task sets in {archive}:.q ("), r.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing unpacked


def test_copies_of_two_hosts_are_read_once(hosts, monkeypatch):
    """Each copy is opened (and checksummed) as often for two hosts as for one."""
    from qtools.qformat import QDir
    opened: list[str] = []
    original = QDir.open_copy

    def counting(self, name, max_size=None):
        opened.append(name)
        return original(self, name, max_size)

    monkeypatch.setattr(QDir, "open_copy", counting)
    assert run(str(hosts[0]), "--flat", "--no-cache")[0] == 0
    one = sorted(opened)
    opened.clear()
    code, _out, err = run(*map(str, hosts), "--flat", "--no-cache")
    assert (code, err) == (0, "")
    assert one and sorted(opened) == one  # beta's copies, the same content, never opened


def _hostile(tmp_path: Path, alpha: Path, add) -> Path:
    """A tar of ``alpha`` with what ``add(tar)`` puts in it."""
    out = tmp_path / "hostile.tar"
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(alpha, ".q")
        add(tar)
    return out


def _member(tar: tarfile.TarFile, name: str, type_: bytes = tarfile.REGTYPE,
            data: bytes = b"", link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = type_, len(data), link
    tar.addfile(info, io.BytesIO(data) if data else None)


HOSTILE = {
    "dotdot": (lambda t: _member(t, "../x", data=b"x"), "../x: a name with '..'"),
    "absolute": (lambda t: _member(t, "/etc/passwd", data=b"x"),
                 "/etc/passwd: an absolute name"),
    "symlink": (lambda t: _member(t, ".q/link", tarfile.SYMTYPE, link="/etc/passwd"),
                ".q/link: a link"),
    "hardlink": (lambda t: _member(t, ".q/hard", tarfile.LNKTYPE, link="/etc/passwd"),
                 ".q/hard: a link"),
    "duplicate": (lambda t: _member(t, ".q/calls-pid10-cpu0.info#0", data=b"x"),
                  ".q/calls-pid10-cpu0.info#0: a name that occurs twice"),
    "fifo": (lambda t: _member(t, ".q/fifo", tarfile.FIFOTYPE), ".q/fifo: a device or FIFO"),
    "device": (lambda t: _member(t, ".q/null", tarfile.CHRTYPE), ".q/null: a device or FIFO"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_in_one_line(hosts, tmp_path, case):
    add, says = HOSTILE[case]
    archive = _hostile(tmp_path, hosts[0], add)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for args in ([], ["--flat"]):
        r = q_view(str(archive), *args, cwd=tmp_path)
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr == f"q-view: {archive}: member {says}" + r.stderr.split(says)[1]
        assert r.stderr.endswith("; refused\n") and r.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_member_over_a_limit_is_refused(hosts, tmp_path):
    big = b"(q:info '((q:comm . \"" + b"x" * 5000 + b"\")))"
    archive = _hostile(tmp_path, hosts[0], lambda t: _member(t, ".q/big-pid1-cpu0.info#0",
                                                            data=big))
    r = q_view(str(archive), "--flat", "--limits", "info-size=1K")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"q-view: {archive}:.q/big-pid1-cpu0.info#0: {len(big)} bytes, over "
                        "the limit of 1 KiB (info-size); raise it with --limits info-size=N\n")
    r = q_view(str(archive), "--flat", "--limits", "archive-size=8K")
    assert r.returncode == 1
    assert re.fullmatch(rf"q-view: {re.escape(str(archive))}: \d+ bytes, over the limit of "
                        r"8 KiB \(archive-size\); raise it with --limits archive-size=N\n",
                        r.stderr)


def test_too_many_members_are_refused(tmp_path):
    archive = tmp_path / "many.tar"
    with tarfile.open(archive, "w") as tar:
        for i in range(100_000):
            _member(tar, f".q/empty{i}")
    before = sorted(os.listdir(tmp_path))
    r = q_view(str(archive), cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"q-view: {archive}: more than 50000 members, over the limit of 50000 "
                        "(members); raise it with --limits members=N\n")
    assert sorted(os.listdir(tmp_path)) == before


def test_forged_headers_and_non_archives_are_refused(hosts, tmp_path):
    long_name = _hostile(tmp_path, hosts[0], lambda t: _member(t, ".q/" + "n" * (2 << 20)))
    r = q_view(str(long_name))
    assert r.returncode == 1 and r.stdout == ""
    assert re.fullmatch(rf"q-view: {re.escape(str(long_name))}: a header of more than 1 MiB "
                        r"after \d+ members\n", r.stderr)
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar\n" * 100)
    r = q_view(str(junk))
    assert r.returncode == 1 and r.stderr.startswith(f"q-view: {junk}: not a tar archive")
    assert r.stderr.count("\n") == 1
    gz = tmp_path / "junk.tar.gz"
    gz.write_bytes(b"\x1f\x8b" + b"\0" * 100)
    r = q_view(str(gz))
    assert r.returncode == 1 and r.stderr.startswith(f"q-view: {gz}: corrupt gzip data")
    assert r.stderr.count("\n") == 1
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w") as tar:
        _member(tar, "README", data=b"hello")
    r = q_view(str(empty), "--flat")
    assert (r.returncode, r.stderr) == (1, (f"q-view: {empty}: no task sets (*.info#N) in "
                                            "this archive\n"))
