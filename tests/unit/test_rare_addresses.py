"""--min-stack-share folds rare `.hist` addresses to their function's first
address: the kernel's by the run's kallsyms copy, the collector's own pcs
by their FDE. The flat profile stays exact; the `.hist` stops growing with
instructions sampled once."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from churn import Ticking
from elftools.elf.elffile import ELFFile

from qtools.daemon.decode.records import Comm, Mmap, SampleId, Task
from qtools.daemon.machine.tasks import Mapping, ObjectKey, Process, TaskTable
from qtools.daemon.sets.aggregate import SetBook
from qtools.daemon.sets.starts import (FunctionStarts, KernelStarts, fde_start, object_lines,
                                       start_finder, user_starts)
from qtools.daemon.sets.tally import NO_KERNEL, SampleTally
from qtools.daemon.unwind import ObjectCFI
from qtools.qformat import QDir
from qtools.qformat.objects.elfhdr import offset_of
from qtools.viewer.naming.kernelsymbols import read_plain

PERIOD = 1_000_000
K = 0xffffffff81000000
KALLSYMS = (f"{K:016x} T _stext\n"
            f"{K + 0x100:016x} t alpha\n"
            f"{K + 0x100:016x} D data_alias\n"
            f"{K + 0x200:016x} T beta\n"
            f"{K + 0x280:016x} r not_text\n"
            f"{K + 0x400:016x} T gamma\t[mod]\n"
            f"{K + 0x800:016x} T _etext\n").encode()


def test_kernel_starts_are_the_text_symbols_q_view_names_addresses_by():
    ks = KernelStarts.from_text(KALLSYMS)
    assert ks.start(K + 0x150) == K + 0x100
    assert ks.start(K + 0x2ff) == K + 0x200  # a data symbol is no start
    assert ks.start(K + 0x7ff) == K + 0x400
    assert ks.start(K + 0x800) == K + 0x800  # the last symbol: its own address only
    assert ks.start(K + 0x801) is None and ks.start(K - 1) is None
    hidden = b"".join(b"0" * 16 + line[16:] for line in KALLSYMS.splitlines(True))
    assert KernelStarts.from_text(hidden).start(0x150) is None  # kptr_restrict: no starts


def test_kernel_starts_agree_with_q_view_on_this_machines_kallsyms():
    data = Path("/proc/kallsyms").read_bytes()
    text = read_plain(data)
    ks = KernelStarts.from_text(data)
    starts = sorted({int(line[:16], 16) for line in data.splitlines()
                     if line[17:18] in (b"t", b"T", b"w", b"W")} - {0})
    if text is None or text.restricted or not starts:
        pytest.skip("kallsyms addresses are hidden here (kptr_restrict)")
    rng = random.Random(7)
    lo, hi = starts[0], starts[-1]
    probes = [rng.randrange(lo - 64, hi + 64) for _ in range(3000)]
    probes += [s + d for s in rng.sample(starts, 500) for d in (0, 1, -1)]
    for a in probes:
        named = text.symbol(a)
        assert ks.start(a) == (named[1] if named else None), hex(a)


def test_kernel_starts_of_a_copy_out_of_order_or_of_a_32_bit_kernel():
    lines = KALLSYMS.splitlines(True)
    shuffled = KernelStarts.from_text(b"".join(lines[3:] + lines[:3]))
    ks = KernelStarts.from_text(KALLSYMS)
    for a in range(K - 2, K + 0x802):
        assert shuffled.start(a) == ks.start(a), hex(a)
    narrow = b"".join(b"%08x" % (int(ln[:16], 16) - K + 0xc1000000) + ln[16:] for ln in lines)
    ks32 = KernelStarts.from_text(narrow)
    assert ks32.start(0xc1000150) == 0xc1000100
    assert ks32.start(0xc10007ff) == 0xc1000400
    assert ks32.start(0xc1000801) is None and ks32.start(K + 0x150) is None
    assert KernelStarts.from_text(b"not kallsyms\n").start(K) is None


def _starts(hist: dict[int, int], starts: KernelStarts) -> dict[int, int]:
    by: dict[int, int] = {}
    for a, w in hist.items():
        f = starts.start(a)
        by[f] = by.get(f, 0) + w
    return by


def test_rare_kernel_addresses_move_to_their_function_and_the_flat_profile_stays():
    ks = KernelStarts.from_text(KALLSYMS)
    tally = SampleTally(min_share=0.01)
    user = (0x401000, 0x401100)
    hot = (K + 0x110, 0x401000, 0x401100)
    rare = [K + 0x204 + 4 * i for i in range(20)] + [K + 0x404 + 4 * i for i in range(20)]
    # the rare addresses come before the first fold, and once only
    for a in rare:
        tally.add(a, PERIOD, (a, 0x401000, 0x401100), (), 1)
    tally.kernel_from = K + 0x110
    for _ in range(1000):
        tally.add(hot[0], PERIOD, hot, (), 1)
        tally.add(user[0], PERIOD, user, (), 1)
    before = dict(tally.hist)
    start_of = start_finder(ks.start, K)
    tally.fold_rare(start_of)  # the first fold only notes what it met
    assert tally.hist == before
    for _ in range(2000):
        tally.add(hot[0], PERIOD, hot, (), 1)
        tally.add(user[0], PERIOD, user, (), 1)
    after_first = dict(tally.hist)
    tally.fold_rare(start_of)
    assert tally.total == sum(after_first.values())
    assert _starts(tally.hist, ks) == _starts(after_first, ks)  # per function: exact
    assert not any(a in tally.hist for a in rare)
    assert tally.hist[K + 0x200] == 20 * PERIOD and tally.hist[K + 0x400] == 20 * PERIOD
    assert tally.hist[hot[0]] == 3000 * PERIOD and tally.hist[user[0]] == 3000 * PERIOD
    assert tally.moved_weight == 40 * PERIOD
    assert tally.kernel_from == K + 0x110  # the starts lie above it already
    assert sum(tally.stacks.values()) + tally.folded_weight == tally.total


def test_an_address_a_kept_stack_ends_at_is_never_moved():
    """An address met long ago whose stack went, then a young stack ending
    there: rare by weight, but the `.stack` needs its `.hist` line."""
    ks = KernelStarts.from_text(KALLSYMS)
    tally = SampleTally(min_share=0.01)
    x = K + 0x208
    tally.add(x, PERIOD, (x, 0x401000), (), 1)
    for _ in range(300):
        tally.add(0x401000, PERIOD, (0x401000,), (), 1)
    tally.fold_rare(start_finder(ks.start, K))
    tally.add(x, PERIOD, (x, 0x401100), (), 1)
    for _ in range(300):
        tally.add(0x401000, PERIOD, (0x401000,), (), 1)
    tally.fold_rare(start_finder(ks.start, K))
    assert (x, 0x401000) not in tally.stacks and (x, 0x401100) in tally.stacks
    assert tally.hist[x] == 2 * PERIOD and tally.moved_weight == 0
    for leaf in {s[0] for s in tally.stacks}:
        assert sum(w for s, w in tally.stacks.items() if s[0] == leaf) <= tally.hist[leaf]


def test_a_kernel_start_below_the_lowest_kernel_address_lowers_kernel_from():
    ks = KernelStarts.from_text(KALLSYMS)
    tally = SampleTally(min_share=0.05)
    tally.add(K + 0x404, PERIOD, None, (), 1)
    tally.kernel_from = K + 0x404
    tally.fold_rare(start_finder(ks.start, tally.kernel_from))
    for _ in range(100):
        tally.add(0x401000, PERIOD, None, (), 1)
    tally.fold_rare(start_finder(ks.start, tally.kernel_from))
    assert dict(tally.hist) == {0x401000: 100 * PERIOD, K + 0x400: PERIOD}
    assert tally.kernel_from == K + 0x400


def test_without_a_start_or_a_share_addresses_stay():
    tally = SampleTally(min_share=0.01)
    for i in range(50):
        tally.add(0x401000 + i, PERIOD, None, (), 1)
    for _ in range(3):
        for _ in range(1000):
            tally.add(0x402000, PERIOD, None, (), 1)
        tally.fold_rare(start_finder(None, NO_KERNEL, lambda a: None))
    assert len(tally.hist) == 51 and tally.moved_weight == 0
    plain = SampleTally()
    plain.add(K + 0x204, PERIOD, None, (), 1)
    assert plain.fold_rare(start_finder(KernelStarts.from_text(KALLSYMS).start, K)) == 0
    assert dict(plain.hist) == {K + 0x204: PERIOD}


def test_the_thread_lines_of_a_run_without_stacks_follow_their_pcs():
    ks = KernelStarts.from_text(KALLSYMS)
    tally = SampleTally(min_share=0.01)
    tally.add(K + 0x204, PERIOD, None, (), 2)
    tally.kernel_from = K + 0x204  # as the collector keeps it
    for k in range(200):
        tally.add(0x401000, PERIOD, None, (), 1 + k % 2)
    tally.fold_rare(start_finder(ks.start, K))
    for k in range(200):
        tally.add(0x401000, PERIOD, None, (), 1 + k % 2)
    tally.fold_rare(start_finder(ks.start, K))
    lines = tally.thread_stacks
    assert ("cpu", 2, (K + 0x204,)) not in lines and lines[("cpu", 2, (K + 0x200,))] == PERIOD


@pytest.mark.parametrize("threads", [1, 2])
def test_the_collectors_own_sets_are_kept_by_function(threads):
    """by_function (the collector's own sets, whose stacks are all of one
    frame): each address goes to its function's first address at the
    first fold after it was met, recurring or not, and its stack and its
    thread's line with it. Per function and per thread the weights stay
    exact; a pc whose start is not known stays where it is."""
    ks = KernelStarts.from_text(KALLSYMS)
    user = {0x401234: 0x401200, 0x401238: 0x401200}
    tally = SampleTally(min_share=0.001)
    pcs = [K + 0x204, K + 0x208, K + 0x404, K + 0x110, 0x401234, 0x401238, 0x402000]
    per_thread: dict[int, int] = {}
    for i, a in enumerate(pcs * 30):
        tid = 1 + i % threads
        tally.add(a, PERIOD, (a,), (), tid)
        per_thread[tid] = per_thread.get(tid, 0) + PERIOD
    by_function = {K + 0x200: 60, K + 0x400: 30, K + 0x100: 30, 0x401200: 60, 0x402000: 30}
    tally.fold_rare(start_finder(ks.start, K, user.get), by_function=True)
    assert dict(tally.hist) == {a: n * PERIOD for a, n in by_function.items()}
    assert dict(tally.stacks) == {(a,): n * PERIOD for a, n in by_function.items()}
    assert tally.moved_weight == 6 * 30 * PERIOD  # all but 0x402000, whose start is unknown
    lines = tally.thread_stacks
    assert {s for (_k, _t, s) in lines} == {(a,) for a in by_function}
    got: dict[int, int] = {}
    for (_kind, tid, _s), w in lines.items():
        got[tid] = got.get(tid, 0) + w
    assert got == per_thread
    # later samples at a function's start or inside it join its line
    tally.add(K + 0x20c, PERIOD, (K + 0x20c,), (), 1)
    tally.fold_rare(start_finder(ks.start, K, user.get), by_function=True)
    assert tally.hist[K + 0x200] == tally.stacks[(K + 0x200,)] == 61 * PERIOD
    assert K + 0x20c not in tally.hist


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("fde") / "p-fan"
    src = Path(__file__).resolve().parents[1] / "workloads" / "p-fan.c"
    subprocess.run(["cc", "-O2", "-fno-inline", "-o", str(out), str(src), "-lm"], check=True)
    return out


def test_an_fde_start_is_its_functions_symbol(program):
    base = 0x5555_5555_0000
    with open(program, "rb") as f:
        elf = ELFFile(f)
        funcs = [(s.entry.st_value, s.entry.st_size) for s in elf.get_section_by_name(".symtab")
                 .iter_symbols() if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 8]
    cfi = ObjectCFI.from_path(program)
    loads = cfi.loads
    size = program.stat().st_size
    m = Mapping(base, base + size, 0, ObjectKey(str(program)))
    assert len(funcs) >= 5
    for value, length in funcs:
        start = base + offset_of(loads, value)
        for inside in (start, start + length // 2, start + length - 1):
            assert fde_start(cfi, m, inside) == start, (hex(value), hex(inside))
    assert fde_start(cfi, m, base + size - 1) is None  # past the code: no FDE


def _functions(program: Path) -> list[tuple[int, int]]:
    """(file offset, size) of the program's functions of more than 8 bytes."""
    with open(program, "rb") as f:
        elf = ELFFile(f)
        values = [(s.entry.st_value, s.entry.st_size) for s in elf.get_section_by_name(".symtab")
                  .iter_symbols() if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] > 8]
    loads = ObjectCFI.from_path(program).loads
    return sorted((offset_of(loads, v), n) for v, n in values)


def test_a_programs_rare_user_addresses_go_to_their_fde_and_its_busy_ones_stay(program, tmp_path):
    """Short runs of one program (mapped elsewhere each time, folded into
    its aggregate): an instruction met once goes to its function's first
    address once it has gone a minute without recurring, in the canonical
    layout, by the unwind tables the collector holds. Instructions of a
    busy function, each under the share but met every round, stay where
    they are for --annotate. Per function the weights stay exact."""
    obj = ObjectKey(str(program), (0, 1), 2)
    cfi = ObjectCFI.from_path(program)
    size = program.stat().st_size
    funcs = _functions(program)
    busy, rest = funcs[0], funcs[1:]
    clock = Ticking()
    book = SetBook(cpu=0, min_samples=10**6, clock=clock, min_stack_share=0.2)
    starts = FunctionStarts(QDir.open(tmp_path), 1 << 20, {obj: cfi}.get)
    table = TaskTable()
    rng = random.Random(3)
    once = [(f, f + k) for f, n in rest for k in range(1, n)]  # instructions met once each
    rng.shuffle(once)
    fed: dict[int, int] = {}  # file offset of the function -> weight
    late: set[int] = set()  # rare offsets of the last two rounds
    moved = 0
    pid = 100
    for r in range(12):
        for _ in range(2):
            pid += 1
            base = 0x7f00_0000_0000 + rng.randrange(1 << 20) * 0x1000
            table.apply(Comm(pid, pid, "fan", True, SampleId(time=pid)))
            table.apply(Mmap(pid, pid, base, size, 0, obj.path, 0, 1, 2, sid=SampleId(time=pid)))
            proc = table.get(pid)
            ts = book.process_set(proc)
            ts.data.tally.mappings.add(proc.maps.find(base))
            picks = [(busy[0], busy[0] + 4 * (i % 6)) for i in range(36)]  # 6 instructions
            picks += [once.pop() for _ in range(3)]
            for i, (f, at) in enumerate(picks):
                ts.data.tally.add(base + at, PERIOD, (base + at,), (), pid)
                fed[f] = fed.get(f, 0) + PERIOD
                if i >= 36 and r >= 10:
                    late.add(at)
                elif i >= 36:
                    moved += PERIOD
            table.apply(Task(False, pid, 1, pid, 1, pid))
        book.plan(final=False, starts=lambda ts: starts.for_set(
            None, ts.data.tally.mappings, ts.data.tally.kernel_from))
        clock.now += 25  # a minute is between two and three rounds: no ties
    (agg,) = book.aggregates.values()
    tally = agg.data.tally
    (m,) = tally.mappings
    hist = {a - m.start: w for a, w in tally.hist.items()}
    by_function: dict[int, int] = {}
    for at, w in hist.items():
        f = max(s for s, _n in funcs if s <= at)
        by_function[f] = by_function.get(f, 0) + w
    assert by_function == fed
    assert all(hist.get(busy[0] + 4 * i) == 6 * 12 * 2 * PERIOD for i in range(6))
    # an instruction met once is judged at the fold after it, and goes
    # once a minute has passed since the fold before it: two folds on
    starts_at = {f for f, _n in funcs}
    strays = {at for at in hist if at not in starts_at and not busy[0] <= at < busy[0] + 24}
    assert strays <= late, sorted(strays - late)
    assert tally.moved_weight == moved


def test_user_starts_know_only_the_addresses_of_one_mapping():
    cfi = ObjectCFI.from_path("/proc/self/exe")
    obj, other = ObjectKey("/a", (0, 1), 1), ObjectKey("/b", (0, 1), 2)
    one = Mapping(0x10000, 0x20000, 0, obj)
    over = [Mapping(0x40000, 0x60000, 0, obj), Mapping(0x50000, 0x58000, 0, other)]
    seen: list[ObjectKey] = []

    def cfi_of(m: Mapping) -> ObjectCFI | None:
        seen.append(m.obj)
        return cfi if m.obj == obj else None
    start = user_starts([one, *over], cfi_of)
    assert start(0x8000) is None and start(0x30000) is None and not seen  # in no mapping
    assert start(0x45000) is None and start(0x51000) is None and not seen  # two objects were there
    start(0x10400)
    assert seen == [obj]
    assert user_starts([Mapping(0x10000, 0x20000, 0, other)], cfi_of)(0x10400) is None  # no tables


def test_the_collectors_own_objects_tables_are_loaded_for_their_starts(program, tmp_path):
    """Another process's user address is moved only by the tables its
    unwinding loaded; the collector's own samples are never unwound, so
    the tables of its objects are loaded for their starts."""
    obj = ObjectKey(str(program), (0, 1), 2)
    base = 0x5555_5555_0000
    m = Mapping(base, base + program.stat().st_size, 0, obj)
    f, n = _functions(program)[0]
    own = Process(7, "q-syscollect", since=0, threads={7})
    own.own = True
    loads: list[Process] = []

    def load(proc: Process, mapping: Mapping) -> ObjectCFI | None:
        loads.append(proc)
        return ObjectCFI.from_path(mapping.obj.path)
    starts = FunctionStarts(QDir.open(tmp_path), 1 << 20, {}.get, load)
    other = starts.for_set(None, [m], K)
    assert other is not None and other(base + f + n // 2) is None and not loads
    mine = starts.for_set(None, [m], K, own)
    assert mine is not None and mine(base + f + n // 2) == base + f and loads == [own]
    assert FunctionStarts(QDir.open(tmp_path), 1 << 20, None).for_set(None, [m], K, own) is None


def test_a_functions_first_address_is_looked_up_once():
    """What a fold found to be a start (or moved to one) is not asked again:
    a long run's `.hist` holds thousands of them, rare at every fold."""
    ks = KernelStarts.from_text(KALLSYMS)
    asked: list[int] = []

    def start_of(a: int) -> int | None:
        asked.append(a)
        return ks.start(a)
    tally = SampleTally(min_share=0.01)
    tally.kernel_from = K + 0x100
    for a in (K + 0x100, K + 0x204, K + 0x208):
        tally.add(a, PERIOD, None, (), 1)
    for _ in range(5):
        for _ in range(1000):
            tally.add(0x401000, PERIOD, None, (), 1)
        tally.fold_rare(start_of)
    assert dict(tally.hist) == {0x401000: 5000 * PERIOD, K + 0x100: PERIOD, K + 0x200: 2 * PERIOD}
    assert sorted(asked) == [K + 0x100, K + 0x204, K + 0x208]


def test_the_collectors_rare_functions_go_to_one_line_per_object():
    """A set kept by function (the collector's own) would hold every
    function its code ever met. A function rare by the rule of the stacks
    goes on to one line for its object: the first address of the mapping
    that holds it, or the kernel's first text symbol. Per object the weight
    stays exact; a function met all the time keeps its line, and one that
    comes back often gets its line again. An aggregate that the set is
    folded into keeps those lines as they are."""
    ks = KernelStarts.from_text(KALLSYMS)
    a = Mapping(0x400000, 0x410000, 0x1000, ObjectKey("/a", (0, 1), 1))
    b = Mapping(0x7F00_0000_0000, 0x7F00_0010_0000, 0, ObjectKey("/b", (0, 1), 2))
    start_of = start_finder(ks.start, K, lambda x: x & ~0xFF)  # user functions: 256 bytes
    line_of = object_lines(ks.first, K, [a, b])
    clock, tally = Ticking(), SampleTally(min_share=0.001)
    hot, back = 0x401234, 0x40F0F4
    added: dict[int, int] = {}  # object line (or the kernel's) -> weight added

    def add(pc: int, n: int = 1) -> None:
        for _ in range(n):
            tally.add(pc, PERIOD, (pc,), (), 1)
        key = K if pc >= K else a.start if pc < b.start else b.start
        added[key] = added.get(key, 0) + n * PERIOD
    met_once: list[int] = []
    for r in range(12):
        add(hot, 1000)
        for pc in (0x402004 + 0x100 * r, b.start + 0x1008 + 0x100 * r):
            add(pc)
            met_once.append(pc)
        if r == 0:
            add(K + 0x204)
            tally.kernel_from = K + 0x204
            met_once.append(K + 0x204)
        if r in (1, 7, 8, 9, 10, 11):
            add(back, 1 if r == 1 else 300)  # rare at first, then met all the time
        clock.now += 25
        tally.fold_rare(start_of, clock.now, True, line_of)
    by_object: dict[int, int] = {}
    for pc, w in tally.hist.items():
        key = K if pc >= K else a.start if pc < b.start else b.start
        by_object[key] = by_object.get(key, 0) + w
    assert by_object == added  # exact, object by object
    assert tally.object_lines == {a.start, b.start, K}
    assert tally.kernel_from == K  # the kernel's line lies below every kernel pc met
    recent = {pc & ~0xFF for pc in met_once[-2:]}  # the last round's: not judged yet
    assert set(tally.hist) == {hot & ~0xFF, back & ~0xFF, a.start, b.start, K} | recent
    assert tally.hist[hot & ~0xFF] == 12_000 * PERIOD
    assert tally.hist[back & ~0xFF] == 1500 * PERIOD  # its first sample went to A's line
    assert tally.hist[K] == PERIOD
    assert sum(tally.stacks.values()) + tally.folded_weight == tally.total
    # folded into an aggregate (kept by address), the lines stay where they are
    agg = SampleTally(min_share=0.001)
    agg.merge(tally)
    lines = {pc: agg.hist[pc] for pc in tally.object_lines}
    for _ in range(3):
        clock.now += 25
        agg.fold_rare(start_finder(ks.start, K, lambda x: x & ~0xFF), clock.now)
    assert agg.object_lines == tally.object_lines
    assert {pc: agg.hist[pc] for pc in agg.object_lines} == lines


def test_object_lines_are_a_mappings_first_address_or_the_kernels(tmp_path):
    obj, other = ObjectKey("/a", (0, 1), 1), ObjectKey("/b", (0, 1), 2)
    one = Mapping(0x10000, 0x20000, 0, obj)
    over = [Mapping(0x40000, 0x60000, 0, obj), Mapping(0x50000, 0x58000, 0, other)]
    line = object_lines(lambda: K, K, [one, *over])
    assert line(0x10400) == 0x10000 and line(K + 0x204) == K
    assert line(0x8000) is None and line(0x30000) is None  # in no mapping
    assert line(0x45000) is None and line(0x51000) is None  # two objects were there
    with QDir.open(tmp_path) as q:
        q.atomic_write(".kallsyms.crc32.1", KALLSYMS)
        starts = FunctionStarts(q, 1 << 20, None)
        assert starts.object_lines(".kallsyms.crc32.1", [one], K)(K + 0x404) == K
        assert starts.object_lines(None, [one], K)(K + 0x404) is None
        assert starts.object_lines(".kallsyms.crc32.1", [one], K)(0x10400) == 0x10000
