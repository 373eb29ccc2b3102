"""The collector's JIT tracker on a real dump file and a task table built from
synthetic mappings: samples are held until their code load is in the dump,
then attributed by their time; a process's end lets nothing wait."""

from __future__ import annotations

import io
import os
import time

from qtools.daemon.frames.jittracker import READ_BURST, READ_SHARE, JitTracker
from qtools.daemon.frames.jitread import CHUNK
from qtools.daemon.machine.tasks import AddressMap, Mapping, ObjectKey, Process
from qtools.daemon.unwind.regs import X86_64
from qtools.qformat import QDir
from qtools.qformat.jit.jitdump import (CodeLoad, Header, encode, encode_header, parse,
                                        split_synthetic)
from tests.unit.test_jit_reader import Stepping

CODE = 0x7F00_0000_0000  # the JIT's anonymous executable mapping
LIB = 0x5555_0000_0000  # a file-backed mapping


def _process(dump) -> Process:
    st = os.stat(dump)
    maps = AddressMap([
        Mapping(CODE, CODE + 0x10000, 0, ObjectKey("//anon")),
        Mapping(LIB, LIB + 0x10000, 0, ObjectKey("/usr/lib/libx.so", (8, 1), 99)),
        Mapping(0x7F10_0000_0000, 0x7F10_0000_1000, 0,
                ObjectKey(str(dump), (os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino)),
    ])
    # a pid that cannot exist: the dump is opened by its path, its owner the one
    # the task table recorded (us)
    return Process(pid=1 << 30, comm="jit", maps=maps, maps_version=1, ppid=os.getpid(),
                   uid=os.getuid())


def _load(i: int, time: int, name: str, at: int = 0x100) -> bytes:
    return encode(CodeLoad(time, 1, 1, CODE + at, CODE + at, 0x40, i, name, bytes(0x40)))


class Sink:
    def __init__(self) -> None:
        self.added: list[tuple[int, tuple[int, ...] | None]] = []

    def __call__(self, ip: int, weight: int, stack: tuple[int, ...] | None,
                 arcs: list[tuple[int, int]]) -> None:
        self.added.append((ip, stack))


def _names(dump, stack: tuple[int, ...]) -> list[str]:
    _h, records, _p = parse(dump.read_bytes())
    loads = [r for r in records if isinstance(r, CodeLoad)]
    return [loads[split_synthetic(a)[0]].name if a >= 0x7A00_0000_0000_0000 else hex(a)
            for a in stack]


def test_samples_go_to_the_code_loaded_at_their_address_at_their_time(tmp_path):
    dump = tmp_path / "jit-7.dump"
    t0 = time.monotonic_ns()
    dump.write_bytes(encode_header(Header(1, 62, 7, 0)) + _load(0, t0, "first"))
    tracker = JitTracker(X86_64, out=io.StringIO())
    proc = _process(dump)
    sink = Sink()
    assert tracker.has_dump(proc)
    frames = [CODE + 0x110, LIB + 0x20, CODE + 0x105, LIB + 0x40]
    t1 = time.monotonic_ns()
    tracker.sample(proc, t1, CODE + 0x110, 1, [], list(frames), [], True, sink)
    assert _names(dump, sink.added[0][1]) == ["first", hex(LIB + 0x20), "first", hex(LIB + 0x40)]
    assert sink.added[0][0] == sink.added[0][1][0]  # the leaf is the histogram's address
    with open(dump, "ab") as f:  # "second" replaces "first" at the same address
        f.write(_load(1, time.monotonic_ns(), "second"))
    t3 = time.monotonic_ns()
    tracker.sample(proc, t3, CODE + 0x110, 1, [], list(frames), [], True, sink)
    tracker.sample(proc, t1, CODE + 0x110, 1, [], list(frames), [], True, sink)  # taken before
    assert [_names(dump, st)[0] for _ip, st in sink.added] == ["first", "second", "first"]


def test_a_sample_waits_for_a_code_load_written_late(tmp_path):
    dump = tmp_path / "jit-7.dump"
    dump.write_bytes(encode_header(Header(1, 62, 7, 0)) + _load(0, 1, "first"))
    tracker = JitTracker(X86_64, out=io.StringIO())
    proc = _process(dump)
    sink = Sink()
    loaded = time.monotonic_ns()  # CPython writes its record here, into a stdio buffer
    taken = time.monotonic_ns()
    tracker.sample(proc, taken, CODE + 0x910, 1, [], [CODE + 0x910, LIB + 8], [], True, sink)
    tracker.resolve_pending()
    assert not sink.added  # held: no code known at CODE + 0x910
    with open(dump, "ab") as f:  # the buffer is flushed
        f.write(_load(1, loaded, "late", at=0x900))
    tracker.resolve_pending()
    assert [_names(dump, st) for _ip, st in sink.added] == [["late", hex(LIB + 8)]]


def test_a_sample_in_jit_memory_without_any_code_load_waits_until_the_end(tmp_path):
    dump = tmp_path / "jit-7.dump"
    dump.write_bytes(encode_header(Header(1, 62, 7, 0)))
    tracker = JitTracker(X86_64, out=io.StringIO())
    proc = _process(dump)
    sink = Sink()
    tracker.sample(proc, 100, CODE + 0x900, 1, [], [CODE + 0x900, LIB + 8], [], True, sink)
    tracker.resolve_pending()
    assert not sink.added
    proc.ended = True
    tracker.resolve_pending()
    assert sink.added == [(CODE + 0x900, (CODE + 0x900, LIB + 8))]  # raw, as collected


def test_samples_outside_jit_memory_pass_at_once(tmp_path):
    dump = tmp_path / "jit-7.dump"
    dump.write_bytes(encode_header(Header(1, 62, 7, 0)))
    tracker = JitTracker(X86_64, out=io.StringIO())
    proc = _process(dump)
    sink = Sink()
    kernel = [0xFFFF_FFFF_8100_0000]
    tracker.sample(proc, 100, kernel[0], 1, kernel, [LIB + 8, LIB + 16], [], True, sink)
    assert sink.added == [(kernel[0], (kernel[0], LIB + 8, LIB + 16))]


def test_the_copy_is_the_kept_dump_and_is_made_again_only_when_it_grew(tmp_path):
    dump = tmp_path / "jit-7.dump"
    dump.write_bytes(encode_header(Header(1, 62, 7, 0)) + _load(0, 10, "first"))
    os.chmod(dump, 0o600)
    tracker = JitTracker(X86_64, out=io.StringIO())
    proc = _process(dump)
    assert tracker.has_dump(proc)
    with QDir.open(tmp_path / "q", create=True) as q:
        ref = tracker.copy(proc, q)
        assert ref is not None and ref.code_loads == 1 and ref.path == str(dump)
        copy = tmp_path / "q" / ref.file
        assert copy.read_bytes() == dump.read_bytes()
        assert os.stat(copy).st_mode & 0o077 == 0  # no wider than the dump
        assert tracker.copy(proc, q) == ref


def _hidden_behind(dump, n: int) -> bytes:
    """``n`` loads elsewhere, then "last" at CODE + 0x900: many chunks to read first."""
    data = (encode_header(Header(1, 62, 7, 0))
            + b"".join(_load(i, 1, f"filler{i}", at=0x1000 + 0x40 * (i % 900)) for i in range(n))
            + _load(n, 2, "last", at=0x900))
    dump.write_bytes(data)
    return data


def test_reading_a_dump_takes_a_slice_per_drain_within_the_budget(tmp_path):
    dump = tmp_path / "jit-7.dump"
    _hidden_behind(dump, 12000)
    clock = Stepping(0.01)  # a chunk's work: a fifth of a burst
    tracker = JitTracker(X86_64, out=io.StringIO(), clock=clock)
    proc = _process(dump)
    sink = Sink()
    tracker.sample(proc, time.monotonic_ns(), CODE + 0x910, 1, [], [CODE + 0x910, LIB + 8], [],
                   True, sink)
    reader = proc.jit.dump
    assert reader.behind and not sink.added  # held until "last" is read
    steps = [reader.offset]
    while not sink.added and len(steps) < 10_000:
        tracker.resolve_pending()  # what each checkpoint (and sample) does
        steps.append(reader.offset)
    assert len(reader.placements.items) == 12001 and reader.problem is None
    most = (READ_BURST / clock.step + 1) * CHUNK  # a burst, and the chunk it ends in
    assert max(b - a for a, b in zip(steps, steps[1:])) <= most
    assert sum(b == a for a, b in zip(steps, steps[1:])) > 0  # calls that found it spent
    assert reader.spent <= 2 * READ_BURST + READ_SHARE * clock.now
    assert [_names(dump, st) for _ip, st in sink.added] == [["last", hex(LIB + 8)]]


def test_a_process_that_ends_before_its_dump_is_read_says_so_once(tmp_path):
    dump = tmp_path / "jit-7.dump"
    _hidden_behind(dump, 12000)
    out = io.StringIO()
    with QDir.open(tmp_path / "q", create=True) as q:
        tracker = JitTracker(X86_64, out=out, qdir=q, clock=Stepping(0.01))
        proc = _process(dump)
        assert tracker.has_dump(proc) and proc.jit.dump.behind
        tracker.budget.tokens = 0.0  # spent by other dumps
        proc.ended = True
        tracker.process_ended(proc)
        ref = tracker._ended_refs[proc.pid]
    kept = proc.jit.dump.placements.items
    assert ref.truncated == 1 and ref.code_loads == len(kept) < 12001
    assert out.getvalue() == (
        f"q-syscollect: jitdump {dump} (pid {proc.pid}): not read past offset "
        f"{proc.jit.dump.parser.offset} when its process ended (the collector's time for "
        f"jitdumps was spent); keeping the {len(kept)} code loads before it\n")


def test_a_sample_does_not_wait_for_a_dump_given_up(tmp_path):
    dump = tmp_path / "jit-7.dump"
    bad = b"\0\0\0\0\3\0\0\0" + bytes(8)  # a record of 3 bytes: reading stops there
    dump.write_bytes(encode_header(Header(1, 62, 7, 0)) + _load(0, 1, "first") + bad)
    out = io.StringIO()
    tracker = JitTracker(X86_64, out=out)
    proc = _process(dump)
    sink = Sink()
    tracker.sample(proc, time.monotonic_ns(), CODE + 0x910, 1, [], [CODE + 0x910, LIB + 8], [],
                   True, sink)
    assert "record size 3 is too small" in out.getvalue()
    assert sink.added == [(CODE + 0x910, (CODE + 0x910, LIB + 8))]  # raw, at once: none will come
