"""Caps on what a reader takes in (qformat.limits) and the readers that keep them."""

from __future__ import annotations

import io

import pytest

from qtools.qformat import DEFAULT_LIMITS, LimitExceeded, Limits, QFormatError, Stack, \
    parse_limits, read_hist, read_stacks


def test_defaults_and_parsing():
    assert DEFAULT_LIMITS == Limits(2 << 30, 50_000_000, 2_000_000, 16 << 20, 4 << 30)
    got = parse_limits("data-size=8G, lines=5M,stacks=1.5M,info-size=64MiB,copy-size=100k")
    assert got == Limits(8 << 30, 5_000_000, 1_500_000, 64 << 20, 100 << 10)
    assert parse_limits("") == DEFAULT_LIMITS
    assert parse_limits("lines=10").data_size == DEFAULT_LIMITS.data_size
    assert (DEFAULT_LIMITS.addresses, DEFAULT_LIMITS.debug_size) == (1_000_000, 1 << 30)
    got = parse_limits("addresses=2.5M,debug-size=256M")
    assert (got.addresses, got.debug_size) == (2_500_000, 256 << 20)


@pytest.mark.parametrize("bad", ["lines", "x=1", "lines=", "lines=-1", "lines=0",
                                 "stacks=2MiB", "data-size=lots", "addresses=1MiB",
                                 "debug-size=0"])
def test_bad_limits(bad):
    with pytest.raises(ValueError):
        parse_limits(bad)


def test_remainder_line():
    data = io.BytesIO(b"5 0x10 0x20\n7 -\n")
    assert list(read_stacks(data)) == [Stack(5, (0x10, 0x20)), Stack(7, ())]
    with pytest.raises(QFormatError, match="weight"):
        list(read_stacks(io.BytesIO(b"x -\n")))


@pytest.mark.parametrize("limits,key", [(Limits(lines=3), "lines"),
                                        (Limits(data_size=20), "data-size")])
def test_caps_are_kept_before_parsing(limits, key):
    # the bad fifth line is never reached: the count stops the reader first
    data = io.BytesIO(b"0x1 1\n0x2 1\n0x3 1\n0x4 1\nbad\n")
    with pytest.raises(LimitExceeded) as e:
        next(read_hist(data, limits, name="h.hist#0"))
    assert e.value.key == key and e.value.path == "h.hist#0"


def test_stacks_cap_counts_lines_of_a_stack_file():
    with pytest.raises(LimitExceeded, match="more than 2 stacks") as e:
        list(read_stacks(io.BytesIO(b"1 0x1\n1 0x2\n1 0x3\n"), Limits(stacks=2)))
    assert e.value.key == "stacks"
