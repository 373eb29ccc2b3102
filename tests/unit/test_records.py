"""perf record decoding on synthetic bytes: every sample field alone and all
together, every record type the collector handles, and broken records."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtools.daemon.kernel import abi

from qtools.daemon.decode import synth
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import (Branch, Comm, Lost, Mmap, Other, RecordError, Sample,
                                          SampleId, Switch, Task, Throttle, split_callchain)

ALL_DECODED = (abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
               | abi.SAMPLE_ADDR | abi.SAMPLE_ID | abi.SAMPLE_STREAM_ID | abi.SAMPLE_CPU
               | abi.SAMPLE_PERIOD | abi.SAMPLE_READ | abi.SAMPLE_CALLCHAIN | abi.SAMPLE_RAW
               | abi.SAMPLE_BRANCH_STACK | abi.SAMPLE_REGS_USER | abi.SAMPLE_STACK_USER
               | abi.SAMPLE_WEIGHT | abi.SAMPLE_DATA_SRC | abi.SAMPLE_TRANSACTION
               | abi.SAMPLE_REGS_INTR | abi.SAMPLE_PHYS_ADDR | abi.SAMPLE_CGROUP)
BITS = [1 << i for i in range(22) if ALL_DECODED & (1 << i)]

FULL = Sample(misc=abi.MISC_USER, ip=0x401234, pid=100, tid=101, time=123456789, addr=0xdead,
              id=7, stream_id=7, cpu=1, period=1003009,
              callchain=(abi.CONTEXT_USER, 0x401234, 0x401000, 0),
              raw=b"\x01\x02\x03\x04", branches=(Branch(0x401010, 0x402000, 4 << 20),
                                                  Branch(0x402010, 0x401015, 6 << 20)),
              regs_abi=2, regs=tuple(range(20)), stack=bytes(range(200)), weight=42,
              data_src=0x1e05080021, transaction=3, phys_addr=0x1000, cgroup=1)


def _expect(sample: Sample, st_: int, layout: SampleLayout) -> Sample:
    """What decoding should give: the fields the sample_type carries."""
    keep = {"misc": sample.misc}
    pairs = [(abi.SAMPLE_IP, ["ip"]), (abi.SAMPLE_TID, ["pid", "tid"]),
             (abi.SAMPLE_TIME, ["time"]), (abi.SAMPLE_ADDR, ["addr"]),
             (abi.SAMPLE_STREAM_ID, ["stream_id"]), (abi.SAMPLE_CPU, ["cpu"]),
             (abi.SAMPLE_PERIOD, ["period"]), (abi.SAMPLE_CALLCHAIN, ["callchain"]),
             (abi.SAMPLE_RAW, ["raw"]), (abi.SAMPLE_BRANCH_STACK, ["branches"]),
             (abi.SAMPLE_REGS_USER, ["regs_abi", "regs"]), (abi.SAMPLE_STACK_USER, ["stack"]),
             (abi.SAMPLE_WEIGHT, ["weight"]), (abi.SAMPLE_DATA_SRC, ["data_src"]),
             (abi.SAMPLE_TRANSACTION, ["transaction"]), (abi.SAMPLE_PHYS_ADDR, ["phys_addr"]),
             (abi.SAMPLE_CGROUP, ["cgroup"])]
    for bit, names in pairs:
        if st_ & bit:
            keep.update({n: getattr(sample, n) for n in names})
    if st_ & abi.SAMPLE_ID:
        keep["id"] = sample.id
    if layout.branch_sample_type & abi.BRANCH_HW_INDEX and st_ & abi.SAMPLE_BRANCH_STACK:
        keep["branch_hw_index"] = 0
    return Sample(**keep)


def _decoded(layout: SampleLayout, s: Sample) -> Sample:
    got = layout.decode(synth.encode_sample(layout, s))
    assert isinstance(got, Sample)
    return got._replace(stack=bytes(got.stack), regs=tuple(got.regs))


@pytest.mark.parametrize("bit", BITS, ids=lambda b: f"bit{b.bit_length() - 1}")
def test_each_sample_field_alone(bit):
    layout = SampleLayout(bit, regs_user_mask=0xFFFFF if bit == abi.SAMPLE_REGS_USER else 0,
                          read_format=abi.FORMAT_TOTAL_TIME_ENABLED | abi.FORMAT_ID)
    assert _decoded(layout, FULL) == _expect(FULL, bit, layout)


@pytest.mark.parametrize("hw_index", [False, True])
def test_all_sample_fields_together(hw_index):
    layout = SampleLayout(ALL_DECODED, regs_user_mask=0xFFFFF,
                          read_format=abi.FORMAT_TOTAL_TIME_RUNNING,
                          branch_sample_type=abi.BRANCH_HW_INDEX if hw_index else 0)
    assert _decoded(layout, FULL) == _expect(FULL, ALL_DECODED, layout)


@given(st.integers(0, ALL_DECODED).map(lambda x: x & ALL_DECODED),
       st.integers(0, (1 << 64) - 1), st.lists(st.integers(0, (1 << 64) - 1), max_size=130),
       st.binary(max_size=300))
@settings(max_examples=300)
def test_random_layouts_round_trip(st_, ip, chain, stack):
    layout = SampleLayout(st_, regs_user_mask=0xFF0FFF)
    s = Sample(misc=abi.MISC_KERNEL, ip=ip, pid=3, tid=4, callchain=tuple(chain), stack=stack,
               regs_abi=2, regs=tuple(range(20)), period=ip >> 1)
    assert _decoded(layout, s) == _expect(s, st_, layout)


def test_user_regs_absent_for_kernel_threads():
    layout = SampleLayout(abi.SAMPLE_IP | abi.SAMPLE_REGS_USER | abi.SAMPLE_STACK_USER,
                          regs_user_mask=0xFF0FFF)
    rec = synth.encode_sample(layout, Sample(ip=5, regs_abi=0, stack=b""))
    s = layout.decode(rec)
    assert s.regs_abi == 0 and s.regs == () and bytes(s.stack) == b""


def test_stack_dyn_size_limits_the_valid_part():
    layout = SampleLayout(abi.SAMPLE_IP | abi.SAMPLE_STACK_USER)
    body = struct.pack("<QQ", 1, 64) + bytes(range(64)) + struct.pack("<Q", 24)
    rec = struct.pack("<IHH", abi.RECORD_SAMPLE, 2, 8 + len(body)) + body
    assert bytes(layout.decode(rec).stack) == bytes(range(24))


def test_branch_types():
    call = Branch(1, 2, 4 << 20)
    ret = Branch(1, 2, 6 << 20)
    ind = Branch(1, 2, 5 << 20)
    assert call.is_call and ind.is_call and not ret.is_call and ret.type == 6


SID_LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID
                          | abi.SAMPLE_TIME | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD)
SID = SampleId(pid=10, tid=11, time=99, id=5, cpu=1)


@pytest.mark.parametrize("record,encode", [
    (Mmap(10, 10, 0x400000, 0x1000, 0x2000, "/usr/bin/ls", 254, 0, 260601, 7, None, 5, 2,
          True, SID), synth.encode_mmap2),
    (Mmap(10, 11, 0x7f0000, 0x3000, 0, "/lib/libc.so.6", build_id=bytes(range(20)),
          sid=SID), synth.encode_mmap2),
    (Mmap(10, 11, 0x7f0000, 0x3000, 0, "/data", executable=False, sid=SID),
     synth.encode_mmap2),
    (Comm(10, 10, "p-fan", True, SID), synth.encode_comm),
    (Comm(10, 12, "worker thread", False, SID), synth.encode_comm),
    (Task(True, 20, 10, 20, 10, 1000, SID), synth.encode_task),
    (Task(False, 20, 10, 21, 10, 2000, SID), synth.encode_task),
    (Lost(4917, 5, SID), synth.encode_lost),
    (Lost(3, 0, SID), synth.encode_lost_samples),
    (Throttle(77, 5, False, SID), synth.encode_throttle),
    (Throttle(78, 5, True, SID), synth.encode_throttle),
    (Switch(True, True, 30, 31, SID), synth.encode_switch),
    (Switch(False, False, 30, 32, SID), synth.encode_switch),
    (Switch(True, False, sid=SID), lambda lay, s: synth.encode_switch(lay, s, cpu_wide=False)),
])
def test_non_sample_records_round_trip(record, encode):
    assert SID_LAYOUT.decode(encode(SID_LAYOUT, record)) == record


def test_mmap_record_type_1():
    body = struct.pack("<IIQQQ", 1, 2, 0x1000, 0x2000, 0x3000) + b"/bin/sh\0"
    rec = struct.pack("<IHH", abi.RECORD_MMAP, 2, 8 + len(body)) + body
    m = SampleLayout(0, sample_id_all=False).decode(rec)
    assert isinstance(m, Mmap) and m.filename == "/bin/sh" and m.len == 0x2000


def test_unknown_record_type_is_kept_as_other():
    rec = struct.pack("<IHH", 99, 0, 16) + b"\0" * 8
    assert SID_LAYOUT.decode(rec) == Other(99, 0, 16)


@pytest.mark.parametrize("cut", [8, 16, 40])
def test_truncated_sample_raises(cut):
    layout = SampleLayout(ALL_DECODED, regs_user_mask=0xFFFFF)
    rec = synth.encode_sample(layout, FULL)
    broken = rec[:6] + struct.pack("<H", cut) + rec[8:cut]
    with pytest.raises(RecordError):
        layout.decode(broken)


def _every_record_type() -> list[tuple[SampleLayout, bytes]]:
    full = SampleLayout(ALL_DECODED, regs_user_mask=0xFFFFF, regs_intr_mask=0xF)
    records = [(full, synth.encode_sample(full, FULL))]
    records += [(SID_LAYOUT, encode(SID_LAYOUT, record)) for record, encode in (
        (Mmap(10, 10, 0x400000, 0x1000, 0, "/usr/bin/ls", 254, 0, 2606, 7, sid=SID),
         synth.encode_mmap2),
        (Mmap(10, 11, 0x7f0000, 0x3000, 0, "/lib/libc.so.6", build_id=bytes(range(20)),
              sid=SID), synth.encode_mmap2),
        (Comm(10, 10, "p-fan", True, SID), synth.encode_comm),
        (Task(True, 20, 10, 20, 10, 1000, SID), synth.encode_task),
        (Lost(4917, 5, SID), synth.encode_lost),
        (Lost(3, 0, SID), synth.encode_lost_samples),
        (Throttle(77, 5, False, SID), synth.encode_throttle),
        (Switch(True, True, 30, 31, SID), synth.encode_switch))]
    return records


@pytest.mark.parametrize("layout,rec", _every_record_type(), ids=[
    "sample", "mmap2", "mmap2-build-id", "comm", "fork", "lost", "lost-samples", "throttle",
    "switch-cpu-wide"])
def test_short_records_are_damaged_never_a_crash(layout, rec):
    """Every prefix of every kind of record, with the header's size left as it
    was (longer than the bytes) or cut to match: decoding gives a record or
    RecordError (which the collector counts as damaged), nothing else."""
    for cut in range(len(rec)):
        with pytest.raises(RecordError):
            layout.decode(rec[:cut])  # the header claims more than there is
        if cut >= 6:
            shrunk = rec[:6] + struct.pack("<H", cut) + rec[8:cut]
            try:
                layout.decode(shrunk)
            except RecordError:
                pass


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=96), st.sampled_from(
    [abi.RECORD_SAMPLE, abi.RECORD_MMAP, abi.RECORD_MMAP2, abi.RECORD_COMM, abi.RECORD_FORK,
     abi.RECORD_EXIT, abi.RECORD_LOST, abi.RECORD_LOST_SAMPLES, abi.RECORD_THROTTLE,
     abi.RECORD_SWITCH, abi.RECORD_SWITCH_CPU_WIDE]))
def test_random_bodies_are_decoded_or_damaged(body, type_):
    layout = SampleLayout(ALL_DECODED, regs_user_mask=0xFFFFF)
    rec = struct.pack("<IHH", type_, 0, 8 + len(body)) + body
    try:
        layout.decode(rec)
    except RecordError:
        pass


def test_a_switch_cpu_wide_record_without_its_pids_is_damaged():
    rec = struct.pack("<IHH", abi.RECORD_SWITCH_CPU_WIDE, abi.MISC_SWITCH_OUT, 8)
    with pytest.raises(RecordError):
        SampleLayout(0, sample_id_all=False).decode(rec)




def test_callchain_longer_than_record_raises():
    layout = SampleLayout(abi.SAMPLE_CALLCHAIN)
    body = struct.pack("<QQ", 1000, 1)
    rec = struct.pack("<IHH", abi.RECORD_SAMPLE, 2, 8 + len(body)) + body
    with pytest.raises(RecordError):
        layout.decode(rec)


def test_split_callchain():
    chain = (abi.CONTEXT_KERNEL, 0xffffffff81000010, 0xffffffff81000020, abi.CONTEXT_USER,
             0x401000, 0x402000, 0)
    assert split_callchain(chain) == ([0xffffffff81000010, 0xffffffff81000020],
                                      [0x401000, 0x402000])
    assert split_callchain((abi.CONTEXT_USER, 1, 2)) == ([], [1, 2])
    assert split_callchain((abi.CONTEXT_GUEST, 5, abi.CONTEXT_USER, 1)) == ([], [1])


def test_attr_packs_what_the_kernel_reads():
    attr = abi.Attr(abi.TYPE_SOFTWARE, 0, 997, abi.SAMPLE_IP | abi.SAMPLE_TID,
                    abi.FLAG_FREQ | abi.FLAG_MMAP2, wakeup=4096, branch_sample_type=0x12,
                    sample_regs_user=abi.REGS_MASK_X86_64, sample_stack_user=8192)
    data = attr.pack()
    assert len(data) == abi.ATTR_SIZE
    assert struct.unpack_from("<IIQQQ", data, 0) == (1, abi.ATTR_SIZE, 0, 997, 3)
    assert struct.unpack_from("<Q", data, 80)[0] == abi.REGS_MASK_X86_64
    assert struct.unpack_from("<Ii", data, 88) == (8192, abi.CLOCK_MONOTONIC)
    assert abi.unpack_attr(data) == attr


FAST_BITS = (abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
             | abi.SAMPLE_ADDR | abi.SAMPLE_ID | abi.SAMPLE_STREAM_ID | abi.SAMPLE_CPU
             | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN | abi.SAMPLE_REGS_USER
             | abi.SAMPLE_STACK_USER | abi.SAMPLE_CGROUP)


def _by_steps(layout: SampleLayout, rec: bytes):
    """The record decoded by the general step-by-step sample_body (what the
    one-function decoder of the collector's layouts stands in for)."""
    try:
        type_, misc, size = struct.unpack_from("<IHH", rec)
        if size > len(rec) or size < 8:
            raise RecordError("bad size")
        return SampleLayout.sample_body(layout, rec, type_, misc, size)
    except (RecordError, struct.error, IndexError):
        return RecordError


def _by_layout(layout: SampleLayout, rec: bytes):
    try:
        got = layout.decode(rec)
        # registers as a view of the record's words: compared as the tuple they read as
        return got._replace(regs=tuple(got.regs)) if isinstance(got, Sample) else got
    except RecordError:
        return RecordError


@given(st.integers(0, FAST_BITS).map(lambda x: x & FAST_BITS),
       st.lists(st.integers(0, (1 << 64) - 1), max_size=40), st.binary(max_size=100),
       st.integers(0, 2), st.data())
@settings(max_examples=300)
def test_the_collectors_layouts_decode_as_the_general_decoder(st_, chain, stack, abi_, data):
    layout = SampleLayout(st_, regs_user_mask=0xFF0FFF)
    s = Sample(misc=abi.MISC_USER, ip=9, pid=3, tid=4, time=5, cpu=1, period=7, id=11,
               callchain=tuple(chain), stack=stack, regs_abi=abi_,
               regs=tuple(range(20)) if abi_ else (), cgroup=13)
    rec = synth.encode_sample(layout, s)
    fast = _by_layout(layout, rec)
    assert fast == _by_steps(layout, rec) and isinstance(fast, Sample)
    # cut short (the header's size kept: fields run past it) or with a lying size
    cut = data.draw(st.integers(8, len(rec)))
    short = rec[:cut]
    assert _by_layout(layout, short) == _by_steps(layout, short)
    size = data.draw(st.integers(8, len(rec)))
    lying = struct.pack("<IHH", abi.RECORD_SAMPLE, abi.MISC_USER, size) + rec[8:]
    assert _by_layout(layout, lying) == _by_steps(layout, lying)
