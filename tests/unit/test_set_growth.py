"""A `.q` under a steady load with short-lived processes stops growing
once the code that runs has been met (README: Running for weeks): what is
written follows the code, not the time or the number of processes, and
no CPU sample is written twice (docs/q-format.md 4.9, q:cpu-rest)."""

from __future__ import annotations

import os
from pathlib import Path

from churn import STEADY_PID, Churn, ChurnRun

from qtools.qformat import ThreadWeight, read_info
from qtools.viewer.inputs.load import open_info

ROUNDS = 20
WARM_UP = 5  # rounds in which each program's repertoire (and the steady one's) is met
GROWTH = 0.05  # room for the aggregates' pid lists (bounded: 256 pids each)


def _set_bytes(q: Path) -> dict[str, int]:
    """Bytes of the set files (object copies left out) by type."""
    out: dict[str, int] = {}
    for name in os.listdir(q):
        if not name.startswith("."):
            kind = name.rpartition("#")[0].rpartition(".")[2]
            out[kind] = out.get(kind, 0) + os.path.getsize(q / name)
    return out


def test_sets_stop_growing_once_the_code_is_met(tmp_path):
    churn = Churn(procs=64, big_every=10**9, steady_repertoire=300)  # no task of its own
    run = ChurnRun(tmp_path, churn)
    q = tmp_path / "churn.q"
    sizes = []
    for _ in range(ROUNDS):
        run.round()
        sizes.append(_set_bytes(q))
    base, last = sum(sizes[WARM_UP - 1].values()), sum(sizes[-1].values())
    assert last - base <= GROWTH * base, (
        f"the sets grew from {base} to {last} bytes over {ROUNDS - WARM_UP} rounds of "
        f"{churn.procs} processes: {sizes[WARM_UP - 1]} -> {sizes[-1]}")
    # a CPU sample is written once: the steady task's one thread is its
    # .stack (q:cpu-rest), an aggregate's .threads holds its named threads
    steady = [n for n in os.listdir(q) if n.startswith(f"steady-pid{STEADY_PID}-")]
    stack = next(n for n in steady if ".stack#" in n)
    threads = next(n for n in steady if ".threads#" in n)
    assert os.path.getsize(q / stack) > 10_000 and os.path.getsize(q / threads) < 100
    run.close()
    assert run.out.getvalue() == ""


def test_threads_read_back_as_the_collector_counted_them(tmp_path):
    churn = Churn(procs=32, big_every=8, big_samples=150, steady_repertoire=200)
    run = ChurnRun(tmp_path, churn)
    q = tmp_path / "churn.q"
    for _ in range(3):
        run.round()
    counted = {}  # set name -> what the collector holds, as .threads lines
    for ts in [*run.collector.book.by_process.values(), *run.collector.book.aggregates.values()]:
        tally = ts.data.tally
        counted[ts.data.name.file("info", ts.writer.version)] = {
            (k, t, f): w for (k, t, f), w in tally.thread_stacks.items() if w}
    assert any(ts.data.process and ts.data.process.pid == STEADY_PID
               for ts in run.collector.book.by_process.values())
    checked = left_out = 0
    for name, expected in counted.items():
        info = read_info(q / name)
        assert info.threads is not None and info.call_stacks is not None
        left_out += info.threads.cpu_rest is not None
        records = open_info(str(q / name)).threads()
        assert records is not None
        got = {(r.kind, r.tid, r.frames): r.weight for r in records
               if isinstance(r, ThreadWeight)}
        assert got == expected, name
        checked += 1
    assert checked >= 4 and left_out == checked
    run.close()


def test_a_thread_is_left_out_only_where_the_stack_gives_it_back_exactly():
    from qtools.qformat import Stack, ThreadName, rest_thread, with_cpu_rest

    a, b, c = (0x10, 0x20), (0x11, 0x20), (0x12,)
    stacks = {a: 50, b: 30}
    weights = {("cpu", 7, a): 40, ("cpu", 7, b): 30, ("cpu", 8, a): 10, ("S", 8, c): 99}
    assert rest_thread(stacks, 0, weights) == 7  # the thread with the most lines
    back = list(with_cpu_rest([ThreadName(8, "w"), *[
        r for r in _records(weights) if (r.kind, r.tid) != ("cpu", 7)]],
        [Stack(w, f) for f, w in stacks.items()], 7))
    assert {(r.kind, r.tid, r.frames): r.weight for r in back if hasattr(r, "kind")} == weights
    # a sample without its stack in .stack (no callchain: the thread line is its pc)
    assert rest_thread(stacks, 0, {**weights, ("cpu", 7, c): 5}) is None
    # the remainder line stands for the threads' lines without a stack
    assert rest_thread({a: 50}, 30, {("cpu", 7, a): 50, ("cpu", 7, ()): 25,
                                     ("cpu", 8, ()): 5}) == 7
    assert rest_thread({}, 0, {("S", 7, a): 5}) is None


def _records(weights):
    from qtools.qformat import ThreadWeight

    return [ThreadWeight(k, t, w, f) for (k, t, f), w in weights.items()]
