"""Which files of this machine q-view reads on an archive's word
(viewer/naming/localfiles.py, viewer/naming/sources.py), on real files."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from qtools.viewer.naming.localfiles import (OutsideRoots, default_root, inside, open_within,
                                             same_file_here)
from qtools.viewer.naming.sources import Roots, SourceFiles


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """An allowed root holding src/a.c, and a secret beside it."""
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.c").write_text("int a;\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2\n")
    return root, secret


def _read(fd: int) -> str:
    with os.fdopen(fd) as f:
        return f.read()


def test_inside_is_by_whole_components():
    assert inside("/a/b", "/a") and inside("/a", "/a") and inside("/a/b", "/")
    assert not inside("/ab", "/a") and not inside("/", "/a")


def test_a_file_below_a_root_opens(tree):
    root, _ = tree
    assert _read(open_within(str(root / "src" / "a.c"), [str(root)])) == "int a;\n"


def test_dotdot_out_of_a_root_is_refused(tree):
    root, secret = tree
    with pytest.raises(OutsideRoots) as e:
        open_within(str(root / "src" / ".." / ".." / secret.name), [str(root)])
    assert e.value.real == str(secret)


def test_a_relative_path_is_checked_from_the_current_directory(tree, monkeypatch):
    root, secret = tree
    monkeypatch.chdir(root / "src")
    assert _read(open_within("a.c", [str(root)])) == "int a;\n"
    with pytest.raises(OutsideRoots):
        open_within(f"../../{secret.name}", [str(root)])


def test_a_symlink_leading_out_of_a_root_is_refused_one_inside_is_followed(tree):
    root, secret = tree
    (root / "out.c").symlink_to(secret)
    (root / "in.c").symlink_to(root / "src" / "a.c")
    (root / "dir").symlink_to(secret.parent)  # a directory on the way
    with pytest.raises(OutsideRoots):
        open_within(str(root / "out.c"), [str(root)])
    with pytest.raises(OutsideRoots):
        open_within(str(root / "dir" / secret.name), [str(root)])
    assert _read(open_within(str(root / "in.c"), [str(root)])) == "int a;\n"


def test_a_fifo_below_a_root_is_refused_without_blocking(tree):
    root, _ = tree
    os.mkfifo(root / "fifo.c")
    with pytest.raises(OSError) as e:
        open_within(str(root / "fifo.c"), [str(root)])
    assert not isinstance(e.value, OutsideRoots)


def test_the_current_directory_is_a_root_unless_it_is_slash_or_holds_a_home(tmp_path):
    home = tmp_path / "home" / "alice"
    home.mkdir(parents=True)
    (home / "proj").mkdir()
    homes = [str(home)]
    assert default_root("/", homes) is None
    assert default_root(str(home), homes) is None
    assert default_root(str(tmp_path / "home"), homes) is None
    assert default_root(str(home / "proj"), homes) == str(home / "proj")
    assert default_root(str(tmp_path), []) == str(tmp_path)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:40]


def test_a_file_of_this_machines_own_is_the_copy_only_with_its_content_and_owner(tmp_path):
    prog = tmp_path / "prog"
    prog.write_bytes(b"\x7fELF" + b"x" * 100)
    os.chmod(prog, 0o755)
    size, digest = prog.stat().st_size, _sha(prog)
    assert same_file_here(str(prog), size, digest, 1 << 20)
    assert not same_file_here(str(prog), size, digest, 10)  # over the size limit
    assert not same_file_here("prog", size, digest, 1 << 20)  # not an absolute path
    assert not same_file_here(str(prog), size, "0" * 40, 1 << 20)  # other content
    os.chmod(prog, 0o775)  # its group may change it
    assert not same_file_here(str(prog), size, digest, 1 << 20)
    os.chmod(prog, 0o755)
    if os.geteuid() == 0:  # another user's file
        os.chown(prog, 65534, 65534)
        assert not same_file_here(str(prog), size, digest, 1 << 20)


def _sources(root: Path | None, cwd: Path, named_here: bool = False) -> SourceFiles:
    return SourceFiles(Roots([str(root)] if root else [], cwd=str(cwd), home_dirs=[]),
                       lambda: named_here, [].append)


def test_sources_are_read_below_a_root_and_refused_outside_it(tree, tmp_path):
    root, secret = tree
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    files = _sources(root, elsewhere)
    # the longest tail of the path that exists below the root
    assert files.line("/build/somewhere/src/a.c", 1) == "int a;"
    assert files.line(str(secret), 1) is None
    assert files.refused == [str(secret)] and not files.missing
    assert files.line("/no/such/file.c", 1) is None and files.missing == ["/no/such/file.c"]
    warned: list[str] = []
    files.warn = warned.append
    files.report("prog")
    assert len(warned) == 2 and str(secret) in warned[0] and "--source-root DIR" in warned[0]


def test_a_tail_that_is_a_symlink_out_of_the_root_is_refused(tree, tmp_path):
    root, secret = tree
    (root / "src" / "b.c").symlink_to(secret)
    files = _sources(root, tmp_path / "root" / "src")
    assert files.line("/build/src/b.c", 1) is None
    assert files.refused == [str(root / "src" / "b.c")]


def test_a_line_table_of_this_machines_own_names_files_anywhere(tree, tmp_path):
    root, secret = tree
    files = _sources(root, root, named_here=True)
    assert files.line(str(secret), 1) == "password=hunter2"
    assert not files.refused
