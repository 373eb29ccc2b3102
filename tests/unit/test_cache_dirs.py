"""Where caches may live (qformat.cachedir): a directory reached through no
other user's link, made only under this user's own, and, for caches whose
files are handed on by path, one nobody else can change up to the root."""

from __future__ import annotations

import os

import pytest

from qtools.common.cachedir import open_cache_dir, private_dir
from qtools.viewer.naming.debuginfod import Debuginfod

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: another user's files")


def test_a_missing_cache_directory_is_made_private(tmp_path):
    path = tmp_path / "a" / "b"
    assert private_dir(str(path))
    assert (path.stat().st_mode & 0o777) == 0o700 and (tmp_path / "a").stat().st_mode & 0o077 == 0


def test_a_directory_others_can_write_above_it_is_not_private(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may rename what is in it (no sticky bit)
    assert not private_dir(str(shared / "cache"))
    shared.chmod(0o1777)  # as /tmp: only an entry's owner may rename it
    assert private_dir(str(shared / "cache"))


@needs_root
def test_nothing_is_made_or_followed_in_another_users_directory(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    assert open_cache_dir(str(home / ".cache" / "x"), create=True) is None
    assert not private_dir(str(home / ".cache" / "x")) and list(home.iterdir()) == []
    (tmp_path / "link").symlink_to(tmp_path)
    os.lchown(tmp_path / "link", 65534, 65534)
    assert open_cache_dir(str(tmp_path / "link"), create=False) is None
    fd = open_cache_dir(str(tmp_path), create=False)  # root's own: fine
    assert fd is not None
    os.close(fd)


@needs_root
def test_debuginfod_fetches_go_to_a_temporary_directory_when_the_cache_is_not_private(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    said: list[str] = []
    d = Debuginfod(["http://127.0.0.1:9"], str(home / "debuginfod"), said.append)
    try:
        assert len(said) == 1 and str(home / "debuginfod") in said[0]
        assert d.directory != str(home / "debuginfod") and os.path.isdir(d.directory)
        assert list(home.iterdir()) == []
    finally:
        d.close()
    assert not os.path.exists(d.directory)
