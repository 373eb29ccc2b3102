"""The collector's memory under churn stays bounded: what it keeps follows
the code that ran and the processes alive, not the number of processes
that came and went or of stacks they took (README: Limits).

Retained memory is measured with tracemalloc after a garbage collection at
each checkpoint: deterministic for a seeded stream, unlike RSS."""

from __future__ import annotations

import gc
import os
import shutil
import tracemalloc

from churn import Churn, ChurnRun

from qtools.daemon.frames.dwarf import CfiTables
from qtools.daemon.machine.host import StaticHost
from qtools.daemon.machine.tasks import Mapping, ObjectKey, Process
from qtools.daemon.sets.aggregate import MAX_FOLDED_THREADS
from qtools.daemon.sets.objects import ObjectCopier
from qtools.daemon.sets.tally import SampleTally
from qtools.daemon.unwind import ObjectCFI
from qtools.qformat import QDir, read_info

ROUNDS = 18
WARM_UP = 6  # rounds in which each program's repertoire of stacks is met
GROWTH = 0.1
"""Of what the warm-up left: room for the aggregates' pid lists (up to 1024
pids each) and the repertoires' last stacks; before aggregates bounded
their threads, these rounds grew it by 180%."""


def _retained() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_memory_after_rounds_of_churn_stays_where_the_warm_up_left_it(tmp_path):
    churn = Churn(procs=64, big_every=32, big_samples=300)
    run = ChurnRun(tmp_path, churn)
    c = run.collector
    rounds = [run.records() for _ in range(ROUNDS)]  # made first: only the collector is traced
    tracemalloc.start()
    try:
        after = []
        for records in rounds:
            run.round(records)
            after.append(_retained())
    finally:
        tracemalloc.stop()
    # thousands of processes, tens of thousands of distinct stacks
    assert run.processes == ROUNDS * churn.procs >= 1000
    assert run.distinct_new >= 10_000
    # ended processes are forgotten once their sets are written or folded
    assert len(c.table.procs) == 0 and len(c.book.by_process) == 0
    assert set(c.book.aggregates) == {f"prog{i}" for i in range(churn.programs)}
    for agg in c.book.aggregates.values():
        tally = agg.data.tally
        assert len(tally.threads) <= MAX_FOLDED_THREADS
        assert len(tally.thread_names) <= MAX_FOLDED_THREADS + 1
        assert tally.thread_names[0] == "other-tasks"  # TID 0: the threads of the others
        # a program's stacks: its repertoire, each once under TID 0 and under a few named TIDs
        assert len(tally.stacks) <= churn.repertoire
        assert len(tally.thread_stacks) <= churn.repertoire * 2 + MAX_FOLDED_THREADS * \
            churn.small[1]
    base = after[WARM_UP - 1]
    growth = after[-1] - base
    assert growth <= GROWTH * base, (
        f"retained memory grew by {growth} bytes over {ROUNDS - WARM_UP} rounds of "
        f"{churn.procs} processes, from {base}: "
        f"{[round(a / 1024) for a in after]} KiB after each round")
    run.close()
    assert run.out.getvalue() == ""
    # the big processes got sets of their own; the rest were folded, all of them counted
    infos = [read_info(tmp_path / "churn.q" / n) for n in os.listdir(tmp_path / "churn.q")
             if ".info#" in n]
    own = [i for i in infos if i.task.pid is not None]
    assert len(own) == run.processes // churn.big_every
    assert sum(i.task.samples for i in infos) == run.samples


def test_unwind_tables_of_new_objects_push_out_the_first_loaded(tmp_path):
    files = []
    for i in range(10):  # a build loop's fresh binaries: each its own inode
        path = tmp_path / f"built{i}"
        shutil.copy(shutil.which("true"), path)
        files.append(str(path))
    host = StaticHost(files=set(files))
    with QDir.open(tmp_path / "q", create=True) as qdir:
        tables = CfiTables(qdir, ObjectCopier(qdir, host=host), None, limit=4)
        proc = Process(77, "make")
        loaded = []
        for path in files:
            st = os.stat(path)
            m = Mapping(0x400000, 0x410000, 0, ObjectKey(path, (os.major(st.st_dev),
                                                                os.minor(st.st_dev)), st.st_ino))
            cfi = tables.cfi_for(proc, m)
            assert cfi is not None and tables.cfi_for(proc, m) is cfi  # kept while in use
            loaded.append((m, cfi))
            assert len(tables) <= 4
        m, cfi = loaded[0]
        again = tables.cfi_for(proc, m)  # let go: loaded anew, the same rules
        assert again is not cfi and again is not None
        assert again.fde_count == cfi.fde_count > 0


def test_unwind_tables_past_the_byte_limit_push_out_the_first_loaded(tmp_path):
    """Each object's call-frame sections are read into memory: past the
    collector's byte limit the first loaded are let go, whatever the count."""
    files = []
    for i in range(10):
        path = tmp_path / f"big{i}"
        shutil.copy(shutil.which("true"), path)
        files.append(str(path))
    host = StaticHost(files=set(files))
    with QDir.open(tmp_path / "q", create=True) as qdir:
        one = ObjectCFI.from_path(files[0]).bytes_read
        assert one > 0
        limit = 3 * one + one // 2
        tables = CfiTables(qdir, ObjectCopier(qdir, host=host), None, byte_limit=limit)
        proc = Process(77, "make")
        for path in files:
            st = os.stat(path)
            m = Mapping(0x400000, 0x410000, 0, ObjectKey(path, (os.major(st.st_dev),
                                                                os.minor(st.st_dev)), st.st_ino))
            cfi = tables.cfi_for(proc, m)
            assert cfi is not None and cfi.fde_count > 0 and cfi.bytes_read == one
            assert tables.kept <= limit + one and tables.kept == one * len(tables)
        assert len(tables) < 5  # the count limit (1,024) is far


def test_threads_past_the_cap_share_tid_0_by_stack():
    # -k: every task's samples land in the kernel set, thousands of threads
    tally = SampleTally(max_threads=4)
    stacks = [(0xffff_0000 + i, 0xffff_1000) for i in range(3)]
    for tid in range(1, 1001):
        for stack in stacks:
            tally.add(stack[0], 10, stack, (), tid)
    assert len(tally.threads) == 4 and tally.other_threads == [3 * 996, 3 * 996 * 10]
    assert len(tally.thread_stacks) == 4 * 3 + 3
    assert {s: w for (kind, tid, s), w in tally.thread_stacks.items() if tid == 0} == {
        s: 996 * 10 for s in stacks}
    assert sum(tally.thread_stacks.values()) == tally.total == 1000 * 3 * 10


def test_programs_past_the_bound_fold_into_one_set(monkeypatch):
    from qtools.daemon.sets import aggregate
    from qtools.daemon.sets.aggregate import OTHER_PROGRAMS, SetBook

    monkeypatch.setattr(aggregate, "MAX_AGGREGATES", 8)
    book = SetBook(cpu=0)
    for pid in range(100, 120):  # one program run under 20 names (a symlink each)
        proc = Process(pid, f"name{pid}")
        book.process_set(proc).data.tally.add(0x1000, 5, (0x1000, 0x2000), (), pid)
        proc.ended = True
    sets, folded = book.plan(final=False)
    assert len(folded) == 20 and len(book.aggregates) == 9
    other = book.aggregates[OTHER_PROGRAMS]
    assert other.data.pids == list(range(108, 120)) and other.data.tally.total == 12 * 5
    assert sum(a.data.tally.samples for a in book.aggregates.values()) == 20
