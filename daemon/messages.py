"""What q-syscollect tells its user, and what each collector tells its parent.

A collector talks to the supervisor over its status pipe, one line at a time:

    ok | error MESSAGE        once: the collector started, or why it could not
    beat KEY=N ...            about once a second: its running totals
    end KEY=N ...             after its final checkpoint: its last totals

so the parent can tell a stuck collector from a busy one, and still knows
the totals of one that was killed (its last ``beat``).
"""

from __future__ import annotations

import os
from typing import NamedTuple, TextIO

from .config import Config

# The exit status of a run that lost data (sets it could not write, a
# collector that died for good), whatever the profiled command did.
EXIT_LOST = 3


class Tally(NamedTuple):
    """One collector's running totals (all since it started)."""

    samples: int = 0
    lost: int = 0  # samples the kernel dropped (ring full)
    damaged: int = 0  # records too short or malformed to decode, skipped
    sets: int = 0  # sets it created in .q
    given_up: int = 0  # sets it had to drop without writing them

    def plus(self, other: Tally) -> Tally:
        return Tally(*(a + b for a, b in zip(self, other)))

    def line(self, kind: str) -> bytes:
        values = " ".join(f"{name}={value}" for name, value in zip(self._fields, self))
        return f"{kind} {values}\n".encode()


_KEYS = frozenset(Tally._fields)


def parse_line(line: bytes) -> tuple[str, Tally | None]:
    """(kind, totals) of one status line; totals None for ``ok``/``error``
    or a line that is not well formed (the writer is our own child, but a
    garbled line must not stop the parent)."""
    kind, _, rest = line.decode(errors="replace").strip().partition(" ")
    if kind not in ("beat", "end"):
        return kind, None
    values: dict[str, int] = {}
    for item in rest.split():
        key, _, number = item.partition("=")
        if key in _KEYS and number.isdigit():
            values[key] = int(number)
    return kind, Tally(**values)


def split_lines(pending: bytes, data: bytes) -> tuple[bytes, list[bytes]]:
    """Complete lines of ``pending + data``, and the unfinished rest."""
    *lines, rest = (pending + data).split(b"\n")
    return rest[-4096:], lines


def tell(out: TextIO, text: str) -> None:
    """One line for the user; a closed stderr (the terminal or journal gone)
    must not stop a collection."""
    try:
        write_line(out, f"q-syscollect: {text}")
    except (OSError, ValueError):
        pass


def say(out: TextIO, text: str) -> None:
    """One line of this process's own (-v, a recovery), its pid first; a
    closed stderr must not stop a collection."""
    try:
        write_line(out, f"[{os.getpid()}] {text}")
    except (OSError, ValueError):
        pass


def write_line(out: TextIO, line: str) -> None:
    """``line`` and its newline in one write: the collectors share the
    supervisor's stderr, and print's two writes (text, then newline) from
    two of them at once came out as one line of both and an empty one."""
    out.write(line + "\n")
    out.flush()


# ---------------------------------------------------------------- the two lines


def _stacks(cfg: Config, exclude_kernel: bool) -> str:
    if cfg.call_graph == "none":
        stacks = "no stacks"
    elif cfg.kernel_only:
        stacks = "kernel callchains"
    elif cfg.call_graph == "dwarf":
        stacks = f"DWARF user stacks ({cfg.stack_size}-byte copies)"
    else:
        stacks = "frame-pointer stacks"
    if cfg.kernel_only:
        return f"kernel only, {stacks}"
    if cfg.user_only or exclude_kernel:
        return f"user space only, {stacks}"
    return stacks


def _ending(cfg: Config) -> str:
    name = os.path.basename(cfg.command[0]) if cfg.command else ""
    if cfg.attach:
        until = "until it exits" if len(cfg.attach) == 1 else "until the last of them exits"
        return f"{until} or {cfg.duration:g} s have passed" if cfg.duration else until
    if cfg.command and cfg.duration:
        return f"until {name} exits or {cfg.duration:g} s have passed"
    if cfg.command:
        return f"until {name} exits"
    if cfg.duration:
        return f"for {cfg.duration:g} s"
    return "until Ctrl-C or SIGTERM"


def _attached(cfg: Config) -> str:
    """-p: "pid 12 and its threads on ", "pids 12, 34, their threads and
    the processes they start on "."""
    if not cfg.attach:
        return ""
    one = len(cfg.attach) == 1
    pids = ", ".join(map(str, cfg.attach))
    whose = "its" if one else "their"
    if cfg.children:
        return (f"pid{'' if one else 's'} {pids}, {whose} threads and the processes "
                f"{'it starts' if one else 'they start'} on ")
    return f"pid{'' if one else 's'} {pids} and {whose} threads on "


def start_line(cfg: Config, event: str, frequency: int, exclude_kernel: bool) -> str:
    """Say what the run does: where, what, how, into where, until when."""
    cpus = len(cfg.cpus)
    what = (f"{os.path.basename(cfg.command[0])} and its children on " if cfg.inherit_only
            else _attached(cfg)) + f"{cpus} CPU{'s' if cpus != 1 else ''}"
    return (f"sampling {what} with {event} at {frequency} Hz, "
            f"{_stacks(cfg, exclude_kernel)}, into {os.path.abspath(cfg.directory)}, "
            f"{_ending(cfg)}")


def summary_line(total: Tally, seconds: float, size: int | None) -> str:
    """Like perf record's "Captured and wrote": what the run got."""
    text = (f"captured {total.samples} samples ({total.lost} lost) in {seconds:.1f} s; "
            f"wrote {total.sets} set{'s' if total.sets != 1 else ''}")
    if size is not None:
        text += f", .q now {_megabytes(size)}"
    if total.damaged:
        text += f"; skipped {total.damaged} damaged records"
    return text


def loss_line(losses: list[str]) -> str:
    return "lost data: " + "; ".join(losses)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size / 1e3:.1f} kB"
