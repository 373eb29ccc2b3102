"""Disassembly for --annotate: capstone on both machines q-view supports."""

from __future__ import annotations

import pytest

from qtools.viewer.naming.disasm import EM_AARCH64, EM_X86_64, DisasmProblem, disassemble


def _texts(machine: int, code: bytes) -> list[tuple[int, str]]:
    return [(i.address, i.text) for i in disassemble(machine, code, 0x1000)]


def test_x86_64_in_att_syntax_as_perf_prints_it():
    # push %rbp; mov %rsp,%rbp; nop; ret
    assert _texts(EM_X86_64, bytes.fromhex("554889e590c3")) == [
        (0x1000, "pushq %rbp"), (0x1001, "movq %rsp, %rbp"), (0x1004, "nop"),
        (0x1005, "retq")]


def test_aarch64():
    # nop; ret
    assert _texts(EM_AARCH64, bytes.fromhex("1f2003d5c0035fd6")) == [
        (0x1000, "nop"), (0x1004, "ret")]


def test_undecodable_bytes_show_as_bad_and_decoding_goes_on():
    # 0x06 (push %es) does not exist in 64-bit mode
    assert _texts(EM_X86_64, bytes.fromhex("0690c3")) == [
        (0x1000, "(bad)"), (0x1001, "nop"), (0x1002, "retq")]


def test_other_machines_are_refused_with_a_reason():
    with pytest.raises(DisasmProblem, match="x86-64, aarch64"):
        disassemble(40, b"\x00\x00\xa0\xe1", 0)  # EM_ARM
