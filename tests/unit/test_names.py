"""Names of q files and object copies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qtools.qformat import (QFormatError, QName, SetName, check_plain_name, copy_name,
                            parse_copy_name, parse_name, sanitize_prog)


def test_parse_task_set_name():
    q = parse_name("p-fan-pid11920-cpu0.info#0")
    assert q == QName(SetName("p-fan", 0, 11920), "info", 0)
    assert str(q) == "p-fan-pid11920-cpu0.info#0"


def test_per_cpu_sets():
    k = parse_name("kernel-cpu3.hist#12")
    assert k.set.is_kernel and k.set.cpu == 3 and k.version == 12 and k.type == "hist"
    a = parse_name("make-cpu1.stack#2")
    assert a.set.is_aggregate and a.set.prog == "make" and a.set.pid is None


def test_name_without_version():
    assert parse_name("x-pid1-cpu0.edge").version is None


@pytest.mark.parametrize("comm,prog", [
    ("kworker/0:1", "kworker_0:1"), ("my prog", "my_prog"), ("a\tb\nc\x01", "a_b_c_"),
    (".hidden", "_hidden"), ("v1#2", "v1_2"), ("a..b", "a__b"), ("", "_"),
    ("kernel", "kernel_"), ("x-pid3", "x-pid3_"), ("y-cpu0", "y-cpu0_"), ("ünï", "ünï"),
])
def test_sanitize_prog(comm, prog):
    assert sanitize_prog(comm) == prog
    assert parse_name(SetName(prog, 0, 5).file("info", 0)).set.prog == prog


@given(st.text(max_size=30), st.integers(0, 4096), st.none() | st.integers(0, 1 << 22),
       st.sampled_from(["info", "hist", "edge", "stack"]), st.none() | st.integers(0, 10**6))
def test_names_round_trip(comm, cpu, pid, type_, version):
    q = QName(SetName(sanitize_prog(comm), cpu, pid), type_, version)
    assert parse_name(str(q)) == q


@pytest.mark.parametrize("bad", [
    "x-pid1-cpu0.info#0/../../etc", "../x-pid1-cpu0.info#0", "x-pid1.info#0",
    "x-pid1-cpu0.data#0", "x-pid1-cpu0.info#-1", "x-pid1-cpu0.info#a", "", ".", "..",
    "a/b-cpu0.info", "x-cpu0.info#1#2",
])
def test_bad_names(bad):
    with pytest.raises(QFormatError):
        parse_name(bad)


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "/etc/passwd", "../x", "a\x00b", "x..y"])
def test_plain_names_only(bad):
    with pytest.raises(QFormatError):
        check_plain_name(bad)


def test_copy_names():
    assert copy_name("libc.so.6", 0xA23BAC21) == ".libc.so.6.crc32.a23bac21"
    assert copy_name("p-fan", 0xEB5A8B94) == ".p-fan.crc32.eb5a8b94"
    assert parse_copy_name(".kallsyms.crc32.c23c2a57") == ("kallsyms", 0xC23C2A57)
    assert copy_name("we ird/..name", 1) == ".we_ird___name.crc32.00000001"
    with pytest.raises(QFormatError):
        parse_copy_name(".x.crc32.ABCDEF12")


def test_set_names_sort_with_and_without_pid():
    names = [SetName("a", 0, 5), SetName("a", 0), SetName("kernel", 1), SetName("a", 0, 2)]
    assert sorted(names) == [SetName("a", 0), SetName("a", 0, 2), SetName("a", 0, 5),
                             SetName("kernel", 1)]
