"""Source lines and annotation of a real run: hotline.c built with -g -O2,
sampled by q-syscollect, shown by q-view --by line and --annotate."""

from __future__ import annotations

import json
import os
import re
import subprocess
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


HOT_WITH_LINE = """#include <stdlib.h>
#line 1 "{named}"
__attribute__((noinline)) long hot(long n) {{
    long s = 0;
    for (long i = 0; i < n; i++)
        s += i * i ^ (s >> 3);
    return s;
}}
int main(int argc, char **argv) {{ return hot(atol(argv[1])) == -1; }}
"""
SECRET = "SECRET-LINE-{} password=hunter2"
REFUSED = "source file not read"
INSTRUCTION = re.compile(r"^[* ]\s*\d+\.\d\d : +[0-9a-f]+:   \S")


def _secret_program(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A secret file outside every directory q-view is run from, and two
    programs whose hot() is compiled after a #line naming it: ``absolute``
    by its path, ``relative`` as ../secret/secret.txt (the compiler's
    directory mapped to ".", so the line table holds the relative path).
    Both belong to another user (nobody): someone else's program in a
    profile."""
    secret = tmp_path / "secret" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("".join(SECRET.format(i) + "\n" for i in range(1, 9)))
    build = tmp_path / "build"
    build.mkdir()
    made = []
    for name, named, flags in (("absolute", str(secret), ()),
                               ("relative", "../secret/secret.txt",
                                (f"-fdebug-prefix-map={os.getcwd()}=.",))):
        src = build / f"{name}.c"
        src.write_text(HOT_WITH_LINE.format(named=named))
        exe = compile_c(src, build / name, "-g", *flags)
        os.chown(exe, 65534, 65534)
        made.append(exe)
    return secret, made[0], made[1]


def _annotate(q: Path, comm: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    r = q_view(str(q), "--comm", comm, "--annotate", "hot", "--no-cache", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert sum(bool(INSTRUCTION.match(l)) for l in r.stdout.splitlines()) >= 5, r.stdout
    return r


def test_annotate_reads_no_file_an_archive_names_outside_the_allowed_roots(perf, tmp_path):
    secret, absolute, relative = _secret_program(tmp_path)
    q, q_relative = tmp_path / "q", tmp_path / "q-relative"
    for where, exe in ((q, absolute), (q_relative, relative)):
        r = q_syscollect("-d", str(where), "--", str(exe), "400000000")
        assert r.returncode == 0, r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The line table names the secret by its absolute path: not read from
    # another directory; one line says which file and how to allow it
    r = _annotate(q, absolute.name, elsewhere)
    assert "SECRET-LINE" not in r.stdout + r.stderr, r.stdout
    refusals = [l for l in r.stderr.splitlines() if REFUSED in l]
    assert len(refusals) == 1 and str(secret) in refusals[0], r.stderr
    assert "--source-root DIR" in refusals[0], refusals
    # ... and read once its directory is allowed
    r = _annotate(q, absolute.name, elsewhere, "--source-root", str(secret.parent))
    assert SECRET.format(3) in r.stdout and REFUSED not in r.stderr, r.stdout + r.stderr
    # A symlink inside an allowed root that leads out of it is refused
    tree = elsewhere / "tree"
    tree.mkdir()
    (tree / "secret.txt").symlink_to(secret)
    r = _annotate(q, absolute.name, elsewhere, "--source-root", str(tree))
    assert "SECRET-LINE" not in r.stdout + r.stderr, r.stdout
    assert REFUSED in r.stderr and str(tree / "secret.txt") in r.stderr, r.stderr
    # A relative path leads from the current directory, not out of it:
    # ../secret/secret.txt from elsewhere is the secret, refused
    r = _annotate(q_relative, relative.name, elsewhere)
    assert "SECRET-LINE" not in r.stdout + r.stderr, r.stdout
    assert REFUSED in r.stderr and "../secret/secret.txt" in r.stderr, r.stderr
    r = _annotate(q_relative, relative.name, elsewhere, "--source-root", str(secret.parent))
    assert SECRET.format(3) in r.stdout and REFUSED not in r.stderr, r.stdout + r.stderr


def test_annotate_reads_what_a_file_of_this_machines_own_names(perf, tmp_path):
    """Where the copy is the very program at its path, which only root (the
    user here) can change, its line table is the user's own: its sources
    are read wherever they are; not once another user may change it."""
    _secret, absolute, _relative = _secret_program(tmp_path)
    os.chown(absolute, 0, 0)
    q = tmp_path / "q"
    r = q_syscollect("-d", str(q), "--", str(absolute), "400000000")
    assert r.returncode == 0, r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _annotate(q, absolute.name, elsewhere)
    assert SECRET.format(3) in r.stdout and REFUSED not in r.stderr, r.stdout + r.stderr
    os.chmod(absolute, 0o775)  # its group may write it now
    r = _annotate(q, absolute.name, elsewhere)
    assert "SECRET-LINE" not in r.stdout and REFUSED in r.stderr, r.stdout + r.stderr
