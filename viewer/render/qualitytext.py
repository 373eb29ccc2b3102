"""The stack-quality section: how many user stacks are complete.

A stack is complete (rooted) when its outermost frame is where the
object's own call-frame information says a stack ends (the return address
is undefined: ``_start``, the first frame of a thread in ``clone3``) or in
the function of an entry point: decided by the stack, not by a name, so a
stripped program is judged like any other. A stack cut short (by
``--stack-size``, or where unwinding failed) ends anywhere else.
"""

from __future__ import annotations

from typing import TextIO

from ..model.numfmt import si
from ..model.graph import CallGraph

RULE = ("the outermost frame is code whose unwind information marks the return address "
        "undefined (_start, clone3), or the function of an entry point")


def render(profile: CallGraph, out: TextIO) -> None:
    q = profile.samples.quality
    out.write("\nStack quality: ")
    share = q.overall.share
    if not profile.has_stacks:
        out.write("no call-stack data\n")
        return
    if share is None:
        out.write("no user stacks\n")
        return
    out.write(f"{100 * share:.1f}% of user stacks reach a root frame "
              "(their unwind information ends there: _start, clone3)\n")
    whole = profile.samples.base
    if q.unkept and whole:
        out.write(f"{100 * q.unkept / whole:.1f}% of the samples came without their "
                  "stacks (rare ones the collector folded, or past --max-stacks): their time "
                  "is in the flat profile, under no caller\n")
    if q.moved and whole:
        out.write(f"{100 * q.moved / whole:.1f}% of the samples are counted at the first "
                  "instruction of their function (rare addresses the collector folded): the "
                  "flat profile is whole, instruction-level counts are not\n")
    out.write(f"{'% rooted':>9} {'stacks':>8}  object of the innermost user frame\n")
    for obj, c in sorted(q.by_object.items(), key=lambda kv: (-kv[1].stacks, kv[0])):
        out.write(f"{100 * (c.share or 0):9.1f} {si(c.stacks):>8}  {obj}\n")


def render_interpreters(profile: CallGraph, out: TextIO) -> None:
    """Per process with Python frames or JIT information: the share of its user
    stacks that went through Python frames to a root, and what was found."""
    rows = [(key, q) for key, q in profile.samples.quality.by_process.items()
            if q.python or q.sources]
    if not rows or not profile.has_stacks:
        return
    out.write("\nPython stacks: share of each process's user stacks that pass through "
              "Python frames and reach a root\n")
    out.write(f"{'% rooted':>9} {'stacks':>8}  process: JIT information found\n")
    for key, q in sorted(rows, key=lambda kv: (-kv[1].stacks, kv[0])):
        found = "; ".join(q.sources) if q.sources else "no perf map or jitdump"
        out.write(f"{100 * (q.share or 0):9.1f} {si(q.stacks):>8}  {key}: {found}\n")
