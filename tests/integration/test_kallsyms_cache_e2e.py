"""A run's start takes the kallsyms its user's earlier run of this boot
copied (daemon/sets/kallsymscopy.py), through the real q-syscollect."""

from __future__ import annotations

import os

from tests.conftest import q_syscollect


def _kallsyms_copy(q) -> str:
    (copy,) = [p for p in q.iterdir() if p.name.startswith(".kallsyms.crc32.")]
    return copy.read_text()


def test_the_second_run_copies_kallsyms_from_the_first_runs_cache(perf, tmp_path):
    env = {**os.environ, "Q_CACHE_DIR": str(tmp_path / "cache")}
    first = q_syscollect("-d", str(tmp_path / "q1"), "-t", "0.5", env=env)
    assert first.returncode == 0, first.stderr
    (entry,) = (tmp_path / "cache" / "kallsyms").iterdir()
    assert entry.read_text() == _kallsyms_copy(tmp_path / "q1")
    # what a second run copies is the entry, not /proc/kallsyms read again
    entry.write_text(entry.read_text() + "ffffffffffff0000 t q_cache_marker\n")
    second = q_syscollect("-d", str(tmp_path / "q2"), "-t", "0.5", env=env)
    assert second.returncode == 0, second.stderr
    assert _kallsyms_copy(tmp_path / "q2").endswith("q_cache_marker\n")
    # without the cache it is read again
    third = q_syscollect("-d", str(tmp_path / "q3"), "-t", "0.5",
                         env={**os.environ, "Q_CACHE_DIR": ""})
    assert third.returncode == 0, third.stderr
    assert "q_cache_marker" not in _kallsyms_copy(tmp_path / "q3")
