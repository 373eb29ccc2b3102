"""The task table and the per-CPU set book, driven by synthetic records."""

from __future__ import annotations

from qtools.daemon.machine import synthesize
from qtools.daemon.sets.aggregate import MAX_PIDS, SYNTHETIC_BASE, SetBook
from qtools.daemon.machine.host import HostProcess, StaticHost
from qtools.daemon.machine.procfs import MapsLine, parse_cpu_list, parse_maps
from qtools.daemon.decode.records import Comm, Mmap, SampleId, Task
from qtools.daemon.machine.tasks import MAX_THREADS, AddressMap, Mapping, ObjectKey, Process, TaskTable

LIBC = ObjectKey("/lib/libc.so.6", (254, 0), 11)
APP = ObjectKey("/usr/bin/app", (254, 0), 22)


def at(t: int) -> SampleId:
    return SampleId(time=t)


def mmap(pid: int, start: int, size: int, obj: ObjectKey, t: int, pgoff: int = 0) -> Mmap:
    return Mmap(pid, pid, start, size, pgoff, obj.path, obj.dev[0], obj.dev[1], obj.ino,
                sid=at(t))


def test_address_map_replaces_overlaps_like_mmap():
    m = AddressMap([Mapping(0x1000, 0x5000, 0, APP)])
    m.add(Mapping(0x2000, 0x3000, 0, LIBC))
    assert [(x.start, x.end, x.pgoff, x.obj) for x in m] == [
        (0x1000, 0x2000, 0, APP), (0x2000, 0x3000, 0, LIBC), (0x3000, 0x5000, 0x2000, APP)]
    assert m.find(0x2fff).obj == LIBC and m.find(0x4fff).obj == APP
    assert m.find(0x5000) is None and m.find(0xfff) is None


def test_fork_copies_maps_exec_starts_a_new_incarnation():
    ended = []
    table = TaskTable(on_end=ended.append)
    table.apply(Comm(10, 10, "sh", True, at(1)))
    table.apply(mmap(10, 0x400000, 0x1000, APP, 2))
    sh = table.get(10)
    table.apply(Task(True, 11, 10, 11, 10, 3))
    child = table.get(11)
    assert child.comm == "sh" and child.maps.find(0x400800).obj == APP
    table.apply(Comm(11, 11, "ls", True, at(4)))
    ls = table.get(11)
    assert ls is not child and child.ended and ended == [child]
    assert ls.comm == "ls" and ls.maps.find(0x400800) is None  # exec empties the space
    table.apply(mmap(11, 0x7f0000, 0x2000, LIBC, 5))
    assert ls.maps.find(0x7f0100).obj == LIBC
    assert sh.maps.find(0x7f0100) is None  # the parent is untouched


def test_threads_belong_to_their_process():
    table = TaskTable()
    table.apply(Comm(10, 10, "app", True, at(1)))
    table.apply(Task(True, 10, 10, 12, 10, 2))  # new thread 12
    assert table.get(10).live_threads == {10, 12}
    table.apply(Task(False, 10, 10, 12, 10, 3))  # thread exits
    assert not table.get(10).ended and table.get(10).live_threads == {10}
    table.apply(Task(False, 10, 1, 10, 1, 4))  # main thread: the process
    assert table.get(10).ended


def test_records_older_than_the_seed_are_ignored():
    table = TaskTable()
    host = StaticHost({50: HostProcess("daemon", (MapsLine(0x400000, 0x401000, "r-xp", 0, 254, 0,
                                                           22, "/usr/bin/app", False),))})
    for rec in synthesize.process(host, 50, 1000):
        table.apply(rec)
    proc = table.get(50)
    assert proc.since == 1000 and proc.maps.find(0x400800).obj == APP
    table.apply(Comm(50, 50, "daemon", True, at(900)))  # exec that the seed already shows
    assert table.get(50) is proc and not proc.ended
    table.apply(Comm(50, 50, "other", True, at(1100)))  # a real, later exec
    assert table.get(50) is not proc and proc.ended


def test_a_process_knows_when_its_program_began_only_from_the_rings():
    """A fork or exec read from a ring dates the program; a process made up
    from /proc at start (synthesize.py) began at some unknown time before:
    the perf map check (objects.py) must not take the seed's time for it."""
    table = TaskTable()
    host = StaticHost({50: HostProcess("daemon", ())})
    for rec in synthesize.process(host, 50, 1000):
        table.apply(rec)
    assert table.get(50).began == 0
    table.apply(Task(True, 51, 50, 51, 50, 1200))
    assert table.get(51).began == 1200
    table.apply(Comm(51, 51, "ls", True, at(1300)))
    assert table.get(51).began == 1300
    table.apply(Comm(51, 51, "renamed", False, at(1400)))  # prctl: the same program
    assert table.get(51).began == 1300


def test_parse_maps_and_cpu_lists():
    text = ("55d4c0000000-55d4c0001000 r--p 00000000 fe:00 260601   /usr/bin/ls\n"
            "55d4c0001000-55d4c0016000 r-xp 00001000 fe:00 260601   /usr/bin/ls\n"
            "7f0000000000-7f0000001000 r-xp 00000000 00:00 0 \n"
            "7ffd1000-7ffd3000 r-xp 00000000 00:00 0                  [vdso]\n"
            "7f2000000000-7f2000010000 r-xp 00002000 fe:00 99 /tmp/x (deleted)\n")
    lines = parse_maps(text)
    assert [ln.executable for ln in lines] == [False, True, True, True, True]
    assert lines[1].offset == 0x1000 and (lines[1].maj, lines[1].min) == (0xfe, 0)
    assert lines[3].path == "[vdso]" and lines[4].path == "/tmp/x" and lines[4].deleted
    assert parse_cpu_list("0-3,5,7-8\n") == [0, 1, 2, 3, 5, 7, 8]


def _proc(table: TaskTable, pid: int, base: int, comm: str = "true"):
    table.apply(Comm(pid, pid, comm, True, at(pid)))
    table.apply(mmap(pid, base, 0x10000, LIBC, pid + 1, pgoff=0x1000))
    return table.get(pid)


def test_short_lived_tasks_fold_into_one_rebased_program_set():
    table = TaskTable()
    book = SetBook(cpu=0, min_samples=10)
    a = _proc(table, 100, 0x7f0000000000)
    b = _proc(table, 101, 0x7f5500000000)  # same object elsewhere (ASLR)
    for proc, base in ((a, 0x7f0000000000), (b, 0x7f5500000000)):
        ts = book.process_set(proc)
        ts.data.tally.add(base + 0x123, 1000, (base + 0x123, base + 0x456))
        ts.data.tally.mappings.add(proc.maps.find(base))
        table.apply(Task(False, proc.pid, 1, proc.pid, 1, 500))
    sets, folded = book.plan(final=False)
    assert folded == [a, b] and book.by_process == {}
    (agg,) = sets
    assert str(agg.data.name) == "true-cpu0" and agg.data.pids == [100, 101]
    # both processes' samples land on the same canonical address
    assert dict(agg.data.tally.hist) == {0x7f0000000123: 2000}
    assert dict(agg.data.tally.stacks) == {(0x7f0000000123, 0x7f0000000456): 2000}
    assert [(m.start, m.pgoff) for m in agg.data.tally.mappings] == [(0x7f0000000000, 0x1000)]


def test_an_aggregate_lists_its_first_pids_and_counts_the_rest():
    """q:pids is bounded (MAX_PIDS): a fork-heavy machine's aggregate lists
    its first pids, counts the others (q:pids-not-listed), and a pid folded
    again is not counted twice."""
    table = TaskTable()
    book = SetBook(cpu=0, min_samples=10)
    n = MAX_PIDS + 40
    for pid in range(1000, 1000 + n):
        base = 0x7f0000000000 + (pid % 7) * 0x100000
        proc = _proc(table, pid, base)
        ts = book.process_set(proc)
        ts.data.tally.add(base + 0x123, 1000, None)
        ts.data.tally.mappings.add(proc.maps.find(base))
        table.apply(Task(False, pid, 1, pid, 1, pid + 5))
        book.plan(final=False)
    (agg,) = book.aggregates.values()
    assert agg.data.pids == list(range(1000, 1000 + MAX_PIDS))
    assert agg.data.pids_dropped == 40
    agg.data.add_pid(1000)
    assert len(agg.data.pids) == MAX_PIDS and agg.data.pids_dropped == 40
    assert sum(agg.data.tally.hist.values()) == 1000 * n


def test_rebasing_moves_an_object_whose_place_is_taken():
    table = TaskTable()
    book = SetBook(cpu=0, min_samples=10)
    a = _proc(table, 100, 0x7f0000000000)
    table.apply(Comm(101, 101, "true", True, at(101)))
    table.apply(mmap(101, 0x7f0000000000, 0x10000, APP, 102))  # another object at that place
    table.apply(mmap(101, 0x7f1000000000, 0x10000, LIBC, 103, pgoff=0x1000))
    b = table.get(101)
    for proc, addr in ((a, 0x7f0000000010), (b, 0x7f0000000020), (b, 0x7f1000000030)):
        book.process_set(proc).data.tally.add(addr, 1, None)
    for proc in (a, b):
        table.apply(Task(False, proc.pid, 1, proc.pid, 1, 500))
    (agg,), _ = book.plan(final=False)
    hist = dict(agg.data.tally.hist)
    assert hist[0x7f0000000010] == 1 and hist[0x7f0000000030] == 1  # libc: rebased by offset
    moved = [addr for addr in hist if addr >= SYNTHETIC_BASE]
    assert len(moved) == 1  # app had to move
    objs = {m.obj: m for m in agg.data.tally.mappings}
    assert objs[APP].start == moved[0] - 0x20


def test_busy_tasks_get_their_own_set_and_are_forgotten_after_exit():
    table = TaskTable()
    book = SetBook(cpu=1, min_samples=3)
    p = _proc(table, 200, 0x7f0000000000, comm="busy")
    ts = book.process_set(p)
    for _ in range(5):
        ts.data.tally.add(0x7f0000000100, 1, None)
    sets, folded = book.plan(final=False)
    assert sets == [ts] and ts.writer.promoted and not ts.writer.finished and not folded
    assert str(ts.data.name) == "busy-pid200-cpu1"
    assert book.written(ts) is None  # still running: kept
    table.apply(Task(False, 200, 1, 200, 1, 900))
    book.process_ended(p)
    sets, _ = book.plan(final=False)
    assert sets == [ts] and ts.writer.finished
    assert book.written(ts) is p and book.by_process == {}


def test_alive_quiet_tasks_wait_and_fold_at_the_end():
    table = TaskTable()
    book = SetBook(cpu=0, min_samples=100)
    p = _proc(table, 300, 0x7f0000000000, comm="idle")
    book.process_set(p).data.tally.add(0x7f0000000100, 1, None)
    assert book.plan(final=False) == ([], [])  # neither promoted nor folded yet
    sets, folded = book.plan(final=True)
    assert folded == [p] and [str(s.data.name) for s in sets] == ["idle-cpu0"]


def test_a_stub_is_completed_in_place_by_late_records():
    table = TaskTable()
    table.apply(Comm(10, 10, "make", True, at(1)))
    table.apply(mmap(10, 0x400000, 0x1000, APP, 2))
    stub = Process(77, "unknown", since=500, threads={77}, stub=True)
    table.procs[77] = stub  # sampled before its FORK, read later from another CPU
    table.apply(Task(True, 77, 10, 77, 10, 400))  # older than the sample, still applies
    assert table.get(77) is stub and not stub.stub
    assert stub.comm == "make" and stub.maps.find(0x400100).obj == APP
    book = SetBook(cpu=0, min_samples=1)
    book.process_set(stub).data.tally.add(0x400100, 1, None)
    (ts,), _ = book.plan(final=False)
    assert str(ts.data.name) == "make-pid77-cpu0"


def test_unwritable_q_keeps_memory_bounded_by_folding_ended_tasks():
    from qtools.daemon.sets.aggregate import MAX_UNWRITTEN
    table = TaskTable()
    book = SetBook(cpu=0, min_samples=1)
    for pid in range(1000, 1000 + 3 * MAX_UNWRITTEN):
        p = _proc(table, pid, 0x7f0000000000, comm="job")
        book.process_set(p).data.tally.add(0x7f0000000100, 1, None)
        table.apply(Task(False, pid, 1, pid, 1, 10_000 + pid))
        book.process_ended(p)
        book.plan(final=False)  # every write fails: nothing is ever marked written
    waiting = [ts for ts in book.by_process.values() if ts.writer.dirty]
    assert len(waiting) <= MAX_UNWRITTEN + 1
    agg = book.aggregates["job"]
    assert agg.data.tally.samples + sum(ts.data.tally.samples for ts in waiting) == 3 * MAX_UNWRITTEN


def test_anonymous_and_bracketed_mappings_have_no_file():
    assert ObjectKey("//anon").special and ObjectKey("[vdso]").special
    assert ObjectKey("[anon:v8]").special and not ObjectKey("/usr/lib/libc.so.6").special


def test_threads_beyond_the_bound_share_one_count():
    from qtools.daemon.sets.tally import MAX_THREADS, SampleTally
    tally, merged = SampleTally(), SampleTally()
    for tid in range(MAX_THREADS + 10):
        tally.add(0x1000, 7, None, (), tid)
    tally.count_thread(5, 3)  # a known thread keeps its own count
    assert len(tally.threads) == MAX_THREADS and tally.other_threads == [10, 70]
    assert tally.threads[5] == [2, 10]
    merged.add(0x1000, 1, None, (), -1)
    merged.merge(tally)
    assert len(merged.threads) == MAX_THREADS and merged.threads[-1] == [1, 1]
    assert sum(s for s, _ in merged.threads.values()) + merged.other_threads[0] == \
        merged.samples + 1  # + the count_thread sample, which add() did not count


def test_threads_have_names_kept_after_they_end():
    table = TaskTable()
    table.apply(Comm(10, 10, "app", True, at(1)))
    table.apply(Task(True, 10, 10, 12, 10, 2))  # a thread: its creator's name at first
    assert table.get(10).threads[12].name == "app"
    table.apply(Comm(10, 12, "worker", False, at(3)))  # names the thread, not the process
    proc = table.get(10)
    assert proc.comm == "app" and proc.threads[12].name == "worker"
    table.apply(Task(True, 10, 10, 13, 12, 4))  # made by the worker
    assert proc.threads[13].name == "worker"
    table.apply(Task(False, 10, 10, 12, 10, 5))
    assert proc.threads[12].ended and proc.threads[12].name == "worker"
    assert proc.live_threads == {10, 13}
    table.apply(Comm(10, 10, "app2", False, at(6)))  # the main thread's COMM: the process's
    assert proc.comm == "app2" and proc.threads[10].name == "app2"
    table.apply(Task(False, 10, 1, 10, 1, 7))
    assert proc.ended and proc.threads[10].ended and proc.threads[12].name == "worker"


def test_a_process_remembers_a_bounded_number_of_threads_ended_ones_go_first():
    proc = Process(10, "pool")
    for tid in range(11, 11 + MAX_THREADS - 1):
        proc.add_thread(tid, f"t{tid}")
    assert len(proc.threads) == MAX_THREADS
    proc.end_thread(20)
    proc.end_thread(15)
    proc.add_thread(100_000, "new")  # over the bound: the oldest ended (20) goes
    assert 20 not in proc.threads and 15 in proc.threads and len(proc.threads) == MAX_THREADS
    proc.add_thread(100_001, "new")
    assert 15 not in proc.threads
    proc.add_thread(100_002, "new")  # none ended: the oldest other than the main thread
    assert 11 not in proc.threads and 10 in proc.threads and len(proc.threads) == MAX_THREADS
