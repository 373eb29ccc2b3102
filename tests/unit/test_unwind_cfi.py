"""CFA programs -> rows, on synthetic CIEs/FDEs: every opcode the unwinder supports,
the tables ObjectCFI finds them through, and corrupt entries."""

from __future__ import annotations

import pytest

from cfi_builder import (RBP, RBX, RIP, RSP, R12, R13, TEXT, CieSpec, Cfa, ElfSpec, FdeSpec,
                         Op, build_elf, load, sleb, uleb, X86_CIE_INSNS)
from qtools.daemon.unwind import ObjectCFI
from qtools.qformat.objects.cfi import (EXPRESSION, OFFSET, REGISTER, SAME_VALUE, UNDEFINED,
                                        VAL_EXPRESSION, VAL_OFFSET)
from qtools.qformat.objects.ehframe import sleb as read_sleb, uleb as read_uleb


def rows_of(insns: bytes, size: int = 0x100, cie: CieSpec | None = None, pad: bool = True,
            **kw) -> ObjectCFI:
    spec = ElfSpec([FdeSpec(TEXT, size, insns, pad=pad)], cies=[cie or CieSpec()], **kw)
    return load(spec)[1]


def rules(cfi: ObjectCFI, pc: int) -> dict[int, tuple[int, object]]:
    row = cfi.row_at(pc)
    assert row is not None
    return {r: (k, a) for r, k, a in row.rules}


def cfa(cfi: ObjectCFI, pc: int) -> tuple[int, int]:
    row = cfi.row_at(pc)
    assert row is not None
    return row.cfa_reg, row.cfa_offset


@pytest.mark.parametrize("n", [0, 1, 63, 64, 127, 128, 624485, 2**63, 2**64 - 1])
def test_leb128_round_trip(n):
    assert read_uleb(uleb(n), 0, 20) == (n, len(uleb(n)))
    s = n - 2**63 if n >= 2**63 else -n
    assert read_sleb(sleb(s), 0, 20) == (s, len(sleb(s)))


def test_cie_defaults_apply_at_function_entry():
    cfi = rows_of(b"")
    assert cfa(cfi, TEXT) == (RSP, 8)
    assert rules(cfi, TEXT) == {RIP: (OFFSET, -8)}
    assert cfi.row_at(TEXT + 0x100) is None and cfi.row_at(TEXT - 1) is None


def test_push_rbp_mov_rsp_rbp_prologue():
    insns = (Cfa.advance(1) + Cfa.def_cfa_offset(16) + Cfa.offset(RBP, 2)
             + Cfa.advance(3) + Cfa.def_cfa_register(RBP)
             + Cfa.advance(0x20) + Cfa.def_cfa(RSP, 8))
    cfi = rows_of(insns)
    assert cfa(cfi, TEXT) == (RSP, 8)
    assert cfa(cfi, TEXT + 1) == (RSP, 16) and rules(cfi, TEXT + 1)[RBP] == (OFFSET, -16)
    assert cfa(cfi, TEXT + 4) == (RBP, 16) and cfa(cfi, TEXT + 0x23) == (RBP, 16)
    assert cfa(cfi, TEXT + 0x24) == (RSP, 8)


def test_advance_loc_forms_and_set_loc():
    insns = (Cfa.advance(2) + Cfa.def_cfa_offset(16)
             + b"\x02" + bytes([0x10]) + Cfa.def_cfa_offset(24)          # advance_loc1
             + b"\x03" + (0x20).to_bytes(2, "little") + Cfa.def_cfa_offset(32)
             + Cfa.advance4(0x30) + Cfa.def_cfa_offset(40)
             + Cfa.set_loc(TEXT + 0xF0) + Cfa.def_cfa_offset(48))
    cfi = rows_of(insns, cie=CieSpec(fde_enc=0x00))
    assert [cfa(cfi, TEXT + pc)[1] for pc in (0, 2, 0x12, 0x32, 0x62, 0xF0)] == [8, 16, 24, 32, 40, 48]
    assert cfa(cfi, TEXT + 0x61)[1] == 32


def test_code_alignment_factor_scales_advances():
    cie = CieSpec(code_align=4, insns=X86_CIE_INSNS)
    cfi = rows_of(Cfa.advance(2) + Cfa.def_cfa_offset(16), cie=cie)
    assert cfa(cfi, TEXT + 7)[1] == 8 and cfa(cfi, TEXT + 8)[1] == 16


def test_signed_and_factored_forms():
    insns = (Cfa.def_cfa_sf(RSP, -3)                       # 24
             + Cfa.offset_extended_sf(RBX, 3)              # -24
             + Cfa.offset_extended(R12, 4)                 # -32
             + Cfa.gnu_negative_offset_extended(R13, 1)    # +8
             + Cfa.val_offset(RBP, 2)                      # val CFA-16
             + Cfa.val_offset_sf(14, -1)                   # val CFA+8
             + Cfa.advance(1) + Cfa.def_cfa_offset_sf(-4))  # 32
    cfi = rows_of(insns)
    assert cfa(cfi, TEXT) == (RSP, 24)
    r = rules(cfi, TEXT)
    assert r[RBX] == (OFFSET, -24) and r[R12] == (OFFSET, -32) and r[R13] == (OFFSET, 8)
    assert r[RBP] == (VAL_OFFSET, -16) and r[14] == (VAL_OFFSET, 8)
    assert cfa(cfi, TEXT + 1) == (RSP, 32)


def test_same_value_undefined_register_and_expressions():
    e1, e2 = Op.breg(RSP, 16), Op.breg(RSP, 8) + Op.deref
    insns = (Cfa.same_value(RBX) + Cfa.undefined(R12) + Cfa.register(RBP, R13)
             + Cfa.expression(R13, e1) + Cfa.val_expression(14, e2))
    r = rules(rows_of(insns), TEXT)
    assert r[RBX] == (SAME_VALUE, 0) and r[R12] == (UNDEFINED, 0) and r[RBP] == (REGISTER, R13)
    assert r[R13] == (EXPRESSION, e1) and r[14] == (VAL_EXPRESSION, e2)


def test_def_cfa_expression_then_def_cfa_back():
    insns = Cfa.def_cfa_expression(Op.breg(RBP, -8) + Op.deref) + Cfa.advance(4) + Cfa.def_cfa(RSP, 8)
    cfi = rows_of(insns)
    row = cfi.row_at(TEXT)
    assert row is not None and row.cfa_expr == Op.breg(RBP, -8) + Op.deref and row.cfa_reg == -1
    after = cfi.row_at(TEXT + 4)
    assert cfa(cfi, TEXT + 4) == (RSP, 8) and after is not None and after.cfa_expr is None


def test_restore_and_restore_extended_go_back_to_the_cie_rules():
    cie = CieSpec(insns=X86_CIE_INSNS + Cfa.offset(RBX, 5))
    insns = (Cfa.offset(RBP, 2) + Cfa.offset(RBX, 3) + Cfa.advance(1) + Cfa.restore(RBP)
             + Cfa.restore_extended(RBX))
    cfi = rows_of(insns, cie=cie)
    assert rules(cfi, TEXT)[RBX] == (OFFSET, -24) and RBP in rules(cfi, TEXT)
    assert RBP not in rules(cfi, TEXT + 1) and rules(cfi, TEXT + 1)[RBX] == (OFFSET, -40)


def test_remember_restore_state_includes_the_cfa():
    # a mid-function epilogue: "ret" at +10, code after it still has the full frame
    insns = (Cfa.advance(1) + Cfa.def_cfa_offset(16) + Cfa.offset(RBP, 2)
             + Cfa.advance(8) + Cfa.remember_state + Cfa.def_cfa_offset(8) + Cfa.restore(RBP)
             + Cfa.advance(2) + Cfa.restore_state
             + Cfa.advance(5) + Cfa.def_cfa_offset(8))
    cfi = rows_of(insns)
    assert cfa(cfi, TEXT + 9) == (RSP, 8) and RBP not in rules(cfi, TEXT + 9)
    assert cfa(cfi, TEXT + 11) == (RSP, 16) and rules(cfi, TEXT + 11)[RBP] == (OFFSET, -16)
    assert cfa(cfi, TEXT + 16) == (RSP, 8)


def test_args_size_and_nops_are_ignored():
    insns = Cfa.args_size(16) + Cfa.nop + Cfa.advance(1) + Cfa.def_cfa_offset(16) + Cfa.nop * 3
    cfi = rows_of(insns)
    assert cfa(cfi, TEXT) == (RSP, 8) and cfa(cfi, TEXT + 1) == (RSP, 16)


def test_signal_cie_marks_rows():
    cfi = rows_of(b"", cie=CieSpec(signal=True))
    row = cfi.row_at(TEXT)
    assert row is not None and row.signal


def test_version_3_cie_with_uleb_ra_column():
    cfi = rows_of(Cfa.advance(1) + Cfa.def_cfa_offset(16), cie=CieSpec(version=3))
    assert cfa(cfi, TEXT + 1) == (RSP, 16) and cfi.row_at(TEXT).ra_column == RIP  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", [
    b"\x3f",                                   # unknown opcode
    Cfa.restore_state,                         # restore_state without remember_state
    b"\x0c\x07",                               # truncated def_cfa
    b"\x0f\x20" + Op.breg(RSP, 8),             # expression block longer than the FDE
    b"\x0c" + b"\xff" * 12 + b"\x01",          # over-long ULEB128
    Cfa.remember_state * 65,                   # absurd nesting
    Cfa.advance(8) + Cfa.set_loc(TEXT),        # location moving backwards
])
def test_corrupt_programs_give_no_row(bad):
    cfi = rows_of(bad, cie=CieSpec(fde_enc=0x00), pad=False)
    assert cfi.row_at(TEXT) is None
    assert cfi.rule_at(TEXT, True)[0][0] == 6  # BAD


def test_lookup_through_hdr_table_and_gaps():
    spec = ElfSpec([FdeSpec(TEXT + 0x100 * i, 0x80, Cfa.advance(1) + Cfa.def_cfa_offset(16 + 8 * i))
                    for i in range(20)])
    _, cfi = load(spec)
    assert cfi.source == "eh_frame_hdr" and cfi.fde_count == 20
    for i in range(20):
        assert cfa(cfi, TEXT + 0x100 * i + 5) == (RSP, 16 + 8 * i)
        assert cfi.row_at(TEXT + 0x100 * i + 0x90) is None   # the gap between FDEs
    assert cfi.fdes_decoded == 20


def test_only_hit_fdes_are_decoded():
    spec = ElfSpec([FdeSpec(TEXT + 0x100 * i, 0x80) for i in range(50)])
    _, cfi = load(spec)
    cfi.row_at(TEXT + 0x305)
    cfi.row_at(TEXT + 0x310)
    cfi.row_at(TEXT + 0x1005)
    assert cfi.fdes_decoded == 2


def test_zero_length_fde_sharing_a_start():
    spec = ElfSpec([FdeSpec(TEXT, 0x40, Cfa.def_cfa_offset(24)), FdeSpec(TEXT, 0)])
    _, cfi = load(spec)
    assert cfa(cfi, TEXT + 8) == (RSP, 24)


@pytest.mark.parametrize("variant", [
    dict(hdr="no-table"),                        # hdr without search table: scan from eh_frame_ptr
    dict(hdr="none", sections=True),             # no PT_GNU_EH_FRAME: scan .eh_frame by section
    dict(debug_frame=True),                      # only .debug_frame
    dict(table_enc=0x04),                        # a table in another encoding (udata8, absolute)
])
def test_fallback_tables(variant):
    fdes = [FdeSpec(TEXT + 0x200 * i, 0x100, Cfa.advance(2) + Cfa.def_cfa_offset(32)) for i in (3, 1, 2)]
    spec = ElfSpec(fdes, **variant)
    _, cfi = load(spec)
    assert cfi.fde_count == 3
    for i in (1, 2, 3):
        assert cfa(cfi, TEXT + 0x200 * i + 2) == (RSP, 32)
        assert cfa(cfi, TEXT + 0x200 * i) == (RSP, 8)


def test_no_cfi_at_all():
    _, cfi = load(ElfSpec([], hdr="none"))
    assert not cfi.has_cfi and cfi.row_at(TEXT) is None


@pytest.mark.parametrize("data", [b"", b"\x7fELF", b"not an elf at all" * 10,
                                  b"\x7fELF\x01\x01\x01" + bytes(100)])   # 32-bit
def test_non_elf_input_gives_an_empty_object(data):
    cfi = ObjectCFI.from_bytes(data)
    assert not cfi.has_cfi and cfi.arch is None and cfi.row_at(0x1000) is None


def test_from_fd_never_raises(tmp_path):
    import os

    good = tmp_path / "good"
    good.write_bytes(build_elf(ElfSpec([FdeSpec(TEXT, 0x10)])))
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    fd = os.open(good, os.O_RDONLY)
    try:
        assert ObjectCFI.from_fd(fd).has_cfi
    finally:
        os.close(fd)
    for path in (empty, tmp_path):                       # empty file, a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            assert not ObjectCFI.from_fd(fd).has_cfi
        finally:
            os.close(fd)
    assert not ObjectCFI.from_fd(-1).has_cfi             # a bad descriptor
    assert not ObjectCFI.from_path(tmp_path / "missing").has_cfi


def test_truncated_files_never_raise():
    data = build_elf(ElfSpec([FdeSpec(TEXT + 0x100 * i, 0x80, Cfa.def_cfa_offset(16)) for i in range(8)],
                             sections=True))
    for cut in range(0, len(data), 97):
        cfi = ObjectCFI.from_bytes(data[:cut])
        for i in range(8):
            cfi.row_at(TEXT + 0x100 * i + 1)
            cfi.rule_at(TEXT + 0x100 * i + 1, False)
