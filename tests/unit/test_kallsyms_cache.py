"""Copies of kallsyms kept across runs (daemon/sets/kallsymscopy.py): a run's
start takes the cached copy of the same boot, modules and view instead of
reading /proc/kallsyms again, and trusts nothing another user could have
written or that is too old."""

from __future__ import annotations

import os
import time

import pytest

from qtools.daemon.machine.host import StaticHost
from qtools.daemon.sets.kallsymscopy import CACHE_MAX_AGE, KallsymsCache, KallsymsCopy, cache_key
from qtools.daemon.sets.objects import ObjectCopier
from qtools.qformat import QDir

BOOT = "0f3c6a5e-2b1d-4c8e-9a7f-1e2d3c4b5a69"


class _Booted(StaticHost):
    def __init__(self, boot: str | None = BOOT) -> None:
        super().__init__(files=None)
        self.boot = boot

    def boot_id(self) -> str | None:
        return self.boot


@pytest.fixture
def machine(tmp_path):
    kallsyms, modules = tmp_path / "kallsyms", tmp_path / "modules"
    kallsyms.write_text("ffffffff81000000 T _stext\n")
    modules.write_text("ext4 1007616 1 - Live 0xffffffffc0000000\n")
    return kallsyms, modules


def _start(tmp_path, machine, cache, host=None, q="q"):
    """A run's start: the copy the supervisor makes, and its text."""
    kallsyms, modules = machine
    copy = KallsymsCopy(str(kallsyms), str(modules), cache=cache)
    with QDir.open(tmp_path / q, create=True) as qdir:
        name = copy.current(ObjectCopier(qdir, host=host or _Booted()), report=True)
    assert name is not None
    return (tmp_path / q / name).read_text()


def test_the_next_run_takes_the_copy_the_first_one_cached(tmp_path, machine):
    cache = KallsymsCache(str(tmp_path / "cache" / "kallsyms"))
    assert _start(tmp_path, machine, cache, q="q1") == "ffffffff81000000 T _stext\n"
    entries = os.listdir(tmp_path / "cache" / "kallsyms")
    assert len(entries) == 1 and entries[0].startswith(f"kallsyms-{BOOT}-")
    assert (tmp_path / "cache" / "kallsyms").stat().st_mode & 0o777 == 0o700
    # kallsyms is not read again: what changed there since is not in the copy
    machine[0].write_text("ffffffff81000000 T _stext\nffffffff81000100 T new\n")
    assert _start(tmp_path, machine, cache, q="q2") == "ffffffff81000000 T _stext\n"


def test_a_loaded_module_or_another_boot_reads_kallsyms_again(tmp_path, machine):
    cache = KallsymsCache(str(tmp_path / "cache"))
    _start(tmp_path, machine, cache, q="q1")
    machine[0].write_text("ffffffff81000000 T _stext\nffffffffc0100000 t evil_init\t[evil]\n")
    assert "evil_init" in _start(tmp_path, machine, cache, host=_Booted(BOOT[::-1]), q="q2")
    machine[0].write_text("ffffffff81000000 T _stext\nffffffffc0100000 t ok_init\t[ok]\n")
    machine[1].write_text(machine[1].read_text() + "ok 16384 0 - Live 0xffffffffc0100000\n")
    assert "ok_init" in _start(tmp_path, machine, cache, q="q3")
    assert len(os.listdir(tmp_path / "cache")) == 1  # the entries of other keys are gone


def test_no_cache_without_a_known_boot(tmp_path, machine):
    cache = KallsymsCache(str(tmp_path / "cache"))
    _start(tmp_path, machine, cache, host=_Booted(None))
    assert not (tmp_path / "cache").exists() or not os.listdir(tmp_path / "cache")


@pytest.mark.parametrize("spoil", ["old", "group-writable entry", "open directory",
                                   "symlinked entry", "large"])
def test_an_entry_that_could_be_another_users_or_stale_is_not_taken(tmp_path, machine, spoil):
    directory = tmp_path / "cache"
    cache = KallsymsCache(str(directory))
    _start(tmp_path, machine, cache, q="q1")
    (entry,) = directory.iterdir()
    entry.chmod(0o600)
    entry.write_text("ffffffff81000000 T planted\n")
    if spoil == "old":
        then = time.time() - CACHE_MAX_AGE - 60
        os.utime(entry, (then, then))
    elif spoil == "group-writable entry":
        entry.chmod(0o620)
    elif spoil == "open directory":
        directory.chmod(0o777)
    elif spoil == "symlinked entry":
        planted = tmp_path / "elsewhere"
        entry.rename(planted)
        entry.symlink_to(planted)
    elif spoil == "large":
        entry.write_text("ffffffff81000000 T planted\n" * 100)
        cache = KallsymsCache(str(directory))
    text = _start(tmp_path, machine, cache if spoil != "large" else _Small(str(directory)),
                  q="q2")
    assert "planted" not in text and "_stext" in text


class _Small(KallsymsCache):
    def open(self, key: str, limit: int) -> int | None:
        return super().open(key, 100)


def test_the_key_follows_the_boot_the_modules_and_the_view(monkeypatch):
    mods = frozenset({("ext4", "0xffffffffc0000000")})
    key = cache_key(_Booted(), mods)
    assert key is not None and key.startswith(BOOT)
    assert cache_key(_Booted(BOOT[::-1]), mods) != key
    assert cache_key(_Booted(), mods | {("ok", "0xffffffffc0100000")}) != key
    assert cache_key(_Booted(None), mods) is None
    assert cache_key(_Booted(), None) not in (None, key, cache_key(_Booted(), frozenset()))
    monkeypatch.setattr(_Booted, "sysctl_int", lambda self, name: 2)
    assert cache_key(_Booted(), mods) != key  # kptr_restrict hides the addresses


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a link of another user")
def test_no_cache_is_reached_or_made_through_another_users_symlink(tmp_path, machine):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".cache").symlink_to(elsewhere)  # a user's link, anywhere
    os.lchown(tmp_path / "home" / ".cache", 65534, 65534)
    cache = KallsymsCache(str(tmp_path / "home" / ".cache" / "q-tools" / "kallsyms"))
    _start(tmp_path, machine, cache, q="q1")
    assert list(elsewhere.iterdir()) == []  # nothing made or written behind the link
    machine[0].write_text("ffffffff81000000 T _stext\nffffffff81000100 T new\n")
    assert "new" in _start(tmp_path, machine, cache, q="q2")  # read afresh, as without a cache


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a directory of another user")
def test_root_makes_no_cache_in_another_users_directory(tmp_path, machine):
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)  # sudo -E: HOME is the user's
    cache = KallsymsCache(str(home / ".cache" / "q-tools" / "kallsyms"))
    _start(tmp_path, machine, cache)
    assert list(home.iterdir()) == []


def test_a_link_of_root_or_the_user_is_followed(tmp_path, machine):
    """/home -> /data/home: a link its owner (root, or the user running)
    made is part of the machine's layout, not a trap."""
    (tmp_path / "data").mkdir()
    (tmp_path / "cache").symlink_to(tmp_path / "data")
    cache = KallsymsCache(str(tmp_path / "cache" / "kallsyms"))
    _start(tmp_path, machine, cache, q="q1")
    assert len(os.listdir(tmp_path / "data" / "kallsyms")) == 1
