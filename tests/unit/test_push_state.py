"""The push state file and retention's rule for slices q-push has not sent:
kept past --max-age, removed for --max-size only after every sent one."""

from __future__ import annotations

import os
import time

import pytest

from qtools.daemon.sets import retention
from qtools.qformat import QDir, QFormatError
from qtools.qformat.pushstate import STATE_NAME, check_url, read_sent, write_sent
from tests.unit.test_upkeep import FakeClock, _make_set, _round


def test_state_round_trip_drops_removed_sets_and_refuses_links(tmp_path):
    with QDir.open(tmp_path) as q:
        assert read_sent(q) is None
        a = _make_set(q, "a", time.time(), "closed", None)
        write_sent(q, {a, "gone-pid1-cpu0.info#3"})
        assert read_sent(q) == {a}
        os.unlink(tmp_path / STATE_NAME)
        os.symlink("/etc/passwd", tmp_path / STATE_NAME)
        with pytest.raises(QFormatError):
            read_sent(q)


def test_urls():
    assert check_url("http://pyroscope:4040/") == "http://pyroscope:4040"
    for bad in ("ftp://h", "http://", "http://h:0", "http://h/?a=b", "http://h h",
                "http://h/пример", "http://bücher.example"):
        with pytest.raises(ValueError):
            check_url(bad)


def test_unsent_slices_outlive_max_age_and_go_last_for_max_size(tmp_path):
    now = time.time()
    with QDir.open(tmp_path) as q:
        sets = [_make_set(q, f"s{i}", now - 40 * 86400 + i, "closed", None, lines=3000)
                for i in range(4)]
        write_sent(q, {sets[1], sets[3]})
        index = retention.Index(FakeClock(now))
        report = _round(index, q, max_age=30 * 86400, push=True)
        assert report.removed == [sets[1], sets[3]] and report.unsent_removed == []
        assert {sets[0], sets[2]} <= set(q.names())
        one = index.sets[sets[0]].size
        report = _round(index, q, max_size=one + 100, push=True)
        assert report.removed == report.unsent_removed == [sets[0]]  # forced, and said
        # once sent, the max-age rule applies again
        write_sent(q, {sets[2]})
        assert _round(index, q, max_age=30 * 86400, push=True).removed == [sets[2]]
        # without --push the state file is no copy to collect
        assert STATE_NAME in q.names()
        _round(retention.Index(FakeClock(now + 3600)), q)
        assert STATE_NAME in q.names()
