"""Synthetic task sets shared by the CLI tests: stacks of named functions of
programs compiled at test time, in milliseconds of cpu-clock."""

from __future__ import annotations

import io
from pathlib import Path

from qsynth import MS, Binary, Loaded, QBuilder
from qtools.viewer.commands.view import main

UNKNOWN = 0x10000  # in no object: prints as 0x10000<[unknown]>
EXE = "/opt/demo/calls"

KALLSYMS = """\
ffffffff81000000 T _stext
ffffffff81001000 T do_syscall_64
ffffffff81002000 T entry_SYSCALL_64_after_hwframe
ffffffff81004000 T vfs_read
ffffffff81005000 T asm_sysvec_apic_timer_interrupt
ffffffffc0001000 t ext4_file_read_iter\t[ext4]
ffffffffc0002000 T ext4_end\t[ext4]
"""


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def calls_stacks(o: Loaded, rooted: bool = True) -> list[tuple[int, list[int]]]:
    """The standard call graph: a tree, direct and mutual recursion, a PLT
    entry, an unknown address; most stacks reach _start."""
    def s(ms: int, *frames: str | int, root: bool = rooted) -> tuple[int, list[int]]:
        addrs = [f if isinstance(f, int) else (o.at(f) if i == 0 else o.ret(f))
                 for i, f in enumerate(frames)]
        if root:
            addrs.append(o.ret("_start"))
        return ms * MS, addrs

    return [
        s(2, "main"),
        s(5, "leaf1", "work", "helper", "main"),
        s(3, "leaf2", "work", "main"),
        s(4, "leaf1", "rec", "rec", "rec", "main"),
        s(1, "rec", "rec", "main"),
        s(6, "leaf2", "ping", "pong", "ping", "main"),
        s(1, "pong", "ping", "main", root=False),
        (1 * MS, [o.link(o.binary.plt("sin")) + 4, o.ret("trig"), o.ret("main"),
                  o.ret("_start")]),
        s(1, UNKNOWN, "main", root=False),
    ]


def calls_dir(tmp: Path, binary: Binary, **task_args: object) -> tuple[QBuilder, Loaded, str]:
    q = QBuilder(tmp / ".q")
    o = q.load(binary, base=0x55D4C0000000)
    name = q.task("calls", 1234, 0, stacks=calls_stacks(o), cmdline=["./calls", "3"], exe=EXE,
                  **task_args)  # type: ignore[arg-type]
    return q, o, name


def with_threads(q: QBuilder, name: str, names: dict[int, str], weights: dict) -> None:
    """Give the set ``name`` a `.threads` file of these thread names and
    (kind, tid, frames) -> nanoseconds, as q-syscollect --off-cpu writes it."""
    q.threads(name, names, weights)


def threads_setup(tmp_path: Path, calls_pie: Binary) -> tuple[QBuilder, str]:
    """A set of two threads, with CPU, S, D and W stacks (one S wait without
    a stack); main is in all but that one."""
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    work = (o.at("leaf1"), o.ret("work"), o.ret("main"))
    sleep = (o.at("leaf2"), o.ret("main"))
    name = q.task("calls", 40, 0, stacks=[(30 * MS, list(work)), (10 * MS, list(sleep))])
    with_threads(q, name, {40: "calls", 41: "io worker"}, {
        ("cpu", 40, work): 30 * MS, ("cpu", 41, sleep): 10 * MS,
        ("S", 40, sleep): 600 * MS, ("D", 41, work): 300 * MS, ("S", 41, ()): 7 * MS,
        ("W", 41, sleep): 50 * MS})
    return q, name
