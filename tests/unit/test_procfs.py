"""The daemon's file openers: only regular files, never blocking, never
through a final symlink where a path could have been swapped."""

from __future__ import annotations

import os

from qtools.daemon import procfs


def test_open_plain_takes_only_regular_files(tmp_path):
    regular = tmp_path / "perf-1.map"
    regular.write_text("1000 10 jitted\n")
    fd = procfs.open_plain(str(regular))
    assert fd is not None and os.read(fd, 100) == b"1000 10 jitted\n"
    os.close(fd)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # a blocking open would hang the collector here
    link = tmp_path / "link"
    link.symlink_to(regular)
    for path in (fifo, link, tmp_path, "/dev/zero", "relative/path"):
        assert procfs.open_plain(str(path)) is None, path


def test_open_in_root_sees_the_tasks_view_but_not_a_final_symlink(tmp_path):
    regular = tmp_path / "lib.so"
    regular.write_bytes(b"\x7fELF")
    link = tmp_path / "lib-link.so"
    link.symlink_to(regular)
    fd = procfs.open_in_root(os.getpid(), str(regular))
    assert fd is not None and os.fstat(fd).st_ino == regular.stat().st_ino
    os.close(fd)
    assert procfs.open_in_root(os.getpid(), str(link)) is None
    assert procfs.open_in_root(os.getpid(), "lib.so") is None


def test_loaded_modules_ignores_use_counts(tmp_path):
    modules = tmp_path / "modules"
    modules.write_text("ext4 1007616 1 - Live 0xffffffffc0000000\n")
    before = procfs.loaded_modules(str(modules))
    modules.write_text("ext4 1007616 4 mbcache, Live 0xffffffffc0000000\n")
    assert procfs.loaded_modules(str(modules)) == before == {("ext4", "0xffffffffc0000000")}
    assert procfs.loaded_modules(str(tmp_path / "absent")) is None
