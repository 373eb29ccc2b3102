"""`.hist`, `.edge`, `.stack`: round trips, gzip both ways, hostile lines."""

from __future__ import annotations

import io
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zlib_ng import gzip_ng

from qtools.qformat import (Arc, QDir, QFormatError, Stack, edge_lines, hist_lines, read_edges,
                            read_hist, read_stacks, stack_lines)

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
counts = st.integers(min_value=1, max_value=(1 << 64) - 1)


def _write(tmp_path, name, lines, compress):
    with QDir.open(tmp_path) as q:
        q.atomic_write(name, lines, compress=compress)
    return tmp_path / name


@given(st.dictionaries(u64, counts, max_size=50), st.booleans())
@settings(max_examples=100, deadline=None)
def test_hist_round_trip(tmp_path_factory, hist, compress):
    path = _write(tmp_path_factory.mktemp("h"), "a-pid1-cpu0.hist#0", hist_lines(hist), compress)
    got = list(read_hist(path))
    assert got == sorted(hist.items())
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == compress


@given(st.dictionaries(st.tuples(u64, u64), counts, max_size=50), st.booleans())
@settings(max_examples=100, deadline=None)
def test_edge_round_trip(tmp_path_factory, arcs, compress):
    path = _write(tmp_path_factory.mktemp("e"), "a-pid1-cpu0.edge#0", edge_lines(arcs), compress)
    assert {(a.caller, a.callee): a.calls for a in read_edges(path)} == arcs


@given(st.dictionaries(st.lists(u64, min_size=1, max_size=40).map(tuple), counts, max_size=30),
       st.booleans())
@settings(max_examples=100, deadline=None)
def test_stack_round_trip(tmp_path_factory, stacks, compress):
    path = _write(tmp_path_factory.mktemp("s"), "a-pid1-cpu0.stack#0", stack_lines(stacks),
                  compress)
    got = list(read_stacks(path))
    assert {s.frames: s.weight for s in got} == stacks
    assert [s.weight for s in got] == sorted((s.weight for s in got), reverse=True)


def test_text_is_what_the_shell_expects():
    assert b"".join(hist_lines({0x400500: 7, 0x10: 3, 0x20: 0})) == b"0x10 3\n0x400500 7\n"
    assert b"".join(edge_lines([Arc(0x2, 0x1, 5)])) == b"0x2 0x1 5\n"
    assert b"".join(stack_lines({(0x1, 0x2): 10, (0x3,): 20})) == b"20 0x3\n10 0x1 0x2\n"


def test_reader_reads_tabs_and_blank_lines(tmp_path):
    p = tmp_path / "x.hist"
    p.write_bytes(b"0xa000000100097760\t1801105\n\n  0x4000000000000500   129674717  \r\n")
    assert list(read_hist(p)) == [(0xA000000100097760, 1801105), (0x4000000000000500, 129674717)]
    assert list(read_hist(io.BytesIO(b"0x10 1\n0X20 2\n"))) == [(0x10, 1), (0x20, 2)]


def test_gzip_is_detected_by_magic_not_name(tmp_path):
    p = tmp_path / "plain-name.hist#0"
    p.write_bytes(gzip_ng.compress(b"0x10 1\n0x20 2\n"))
    assert list(read_hist(p)) == [(0x10, 1), (0x20, 2)]


BAD = [
    ("hist", b"0x10 1\nzz 3\n", 2, "bad address"),
    ("hist", b"0x10 -3\n", 1, "negative count"),
    ("hist", b"0x10 1 2\n", 1, "expected 2 fields"),
    ("hist", b"0x10\n", 1, "expected 2 fields"),
    ("hist", b"0x10 1.5\n", 1, "bad count"),
    ("hist", b"0x1_0 1\n", 1, "bad address"),
    ("hist", b"0x10000000000000000 1\n", 1, "64 bits"),
    ("hist", b"0x10 99999999999999999999\n", 1, "larger than 64 bits"),
    ("hist", b"0x10 1\n0x\xff\xfe 2\n", 2, "bad address"),
    ("hist", b"\x00\x01\x02\x03 garbage\n", 1, "bad address"),
    ("edge", b"0x1 0x2\n", 1, "expected 3 fields"),
    ("edge", b"0x1 0x2 -1\n", 1, "negative count"),
    ("edge", b"0x1 nope 1\n", 1, "bad callee"),
    ("stack", b"10\n", 1, "at least one address"),
    ("stack", b"-10 0x1\n", 1, "negative weight"),
    ("stack", b"10 0x1 0xg\n", 1, "bad address"),
    ("stack", b"ten 0x1\n", 1, "bad weight"),
]
READERS = {"hist": read_hist, "edge": read_edges, "stack": read_stacks}


@pytest.mark.parametrize("kind,data,line,words", BAD)
@pytest.mark.parametrize("compress", [False, True])
def test_bad_lines_name_file_and_line(tmp_path, kind, data, line, words, compress):
    p = tmp_path / f"t-pid1-cpu0.{kind}#0"
    p.write_bytes(gzip_ng.compress(data) if compress else data)
    with pytest.raises(QFormatError) as e:
        list(READERS[kind](p))
    assert e.value.path == str(p) and e.value.line == line
    assert words in str(e.value)


def test_truncated_gzip(tmp_path):
    p = tmp_path / "t.hist#0"
    p.write_bytes(gzip_ng.compress(b"".join(b"0x%x 1\n" % i for i in range(100000)))[:-300])
    with pytest.raises(QFormatError, match="truncated") as e:
        list(read_hist(p))
    assert e.value.line > 1000  # records before the cut were read


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip_ng.compress(b"0x10 1\n" * 1000))
    data[20:30] = b"\xff" * 10
    p = tmp_path / "t.hist#0"
    p.write_bytes(bytes(data))
    with pytest.raises(QFormatError, match="corrupt"):
        list(read_hist(p))


def test_missing_file(tmp_path):
    with pytest.raises(QFormatError, match="cannot read") as e:
        list(read_hist(tmp_path / "gone.hist#0"))
    assert "gone.hist#0" in str(e.value)


def test_compression_bomb_is_streamed(tmp_path):
    """A few KiB that inflate to many GiB: the reader stops at the first bad
    line, and a long valid file is read lazily, one record at a time."""
    bomb = tmp_path / "bomb.hist#0"
    with gzip_ng.open(bomb, "wb", compresslevel=9) as f:
        zeros = b"0" * (1 << 20)
        for _ in range(256):  # 256 MiB of a single line
            f.write(zeros)
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(QFormatError, match="longer than"):
        list(read_hist(bomb))

    lines = tmp_path / "lines.hist#0"
    with gzip_ng.open(lines, "wb", compresslevel=9) as f:
        block = b"0x10 1\n" * (1 << 16)
        for _ in range(512):  # 33M records
            f.write(block)
    first = list(itertools.islice(read_hist(lines), 5))
    assert first == [(0x10, 1)] * 5


def test_stack_record_types():
    (s,) = read_stacks(io.BytesIO(b"5 0x1 0x2\n"))
    assert s == Stack(5, (1, 2)) and s.weight == 5 and s.frames == (1, 2)
    (a,) = read_edges(io.BytesIO(b"0x1 0x2 3\n"))
    assert a == Arc(1, 2, 3) and a.callee == 2


@pytest.mark.parametrize("bad", [{-1: 1}, {1: -1}, {1 << 64: 1}])
def test_writer_refuses_values_outside_u64(bad):
    with pytest.raises(ValueError):
        b"".join(hist_lines(bad))


@pytest.mark.parametrize("line, frames", [
    (b"7 0x10\t0XaB  0x0\n", (0x10, 0xAB, 0)),
    (b"  18446744073709551615 0xffffffffffffffff\n", ((1 << 64) - 1,)),
    (b"7\x0b0x10\n", (0x10,)),  # odd whitespace takes the field-by-field path
])
def test_stack_lines_in_every_accepted_spelling(line, frames):
    (stack,) = read_stacks(io.BytesIO(line))
    assert stack.frames == frames


@pytest.mark.parametrize("line, message", [
    (b"18446744073709551616 0x1\n", "bad weight"),
    (b"-3 0x1\n", "negative weight"),
    (b"3 0x1 0x12345678901234567\n", "bad address"),
    (b"3\n", "needs a weight"),
    (b"3 0x1 12\n", "bad address"),
])
def test_bad_stack_lines_say_what_is_wrong(line, message):
    with pytest.raises(QFormatError, match=message) as e:
        list(read_stacks(io.BytesIO(line)))
    assert e.value.line == 1
