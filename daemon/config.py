"""What a q-syscollect run was asked to do, and parsers for its option values."""

from __future__ import annotations

import re
from typing import NamedTuple, Sequence

from .sets.tally import MAX_STACKS

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\Z", re.I)
_AGE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)\Z", re.I)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_AGE_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_size(text: str) -> int:
    """'500M' -> bytes (binary multiples: K, M, G, T)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r} (e.g. 800M, 2G)")
    return int(float(m[1]) * _SIZE_UNITS[m[2].lower()])


def parse_age(text: str) -> float:
    """'14d' -> seconds (s, m, h, d, w; plain numbers are seconds)."""
    m = _AGE.match(text.strip())
    if not m:
        raise ValueError(f"not an age: {text!r} (e.g. 90m, 12h, 14d)")
    return float(m[1]) * _AGE_UNITS[m[2].lower()]


class Config(NamedTuple):
    """What q-syscollect was asked to do (cli.parse_args)."""

    directory: str
    cpus: list[int]
    command: Sequence[str] = ()
    duration: float | None = None
    verbose: bool = False
    quiet: bool = False  # no start and summary lines
    kernel_only: bool = False
    user_only: bool = False
    frequency: int = 997
    event: str | None = None
    inherit_only: bool = False
    attach: tuple[int, ...] = ()  # -p: processes that already run
    children: bool = False  # --children: also what the attached processes start
    checkpoint: float = 10.0
    call_graph: str = "dwarf"  # user stacks: "dwarf", "fp" or "none"
    stack_size: int = 16384  # bytes of user stack copied per sample for dwarf
    min_samples: int = 100
    max_stacks: int = MAX_STACKS  # distinct stacks per set and slice
    min_stack_share: float = 0.0  # fold stacks rarer than this share at checkpoints; 0: never
    symlink: bool = False
    ring_pages: int | None = None
    rotate: float | None = None
    max_size: int | None = None
    max_age: float | None = None
    compress: bool | None = None  # None: compress closed slices when rotating
    stuck_after: float = 120.0  # kill and restart a collector silent this long
    max_object_size: int = 512 << 20  # refuse to copy a larger object
    max_map_size: int = 64 << 20  # keep only this much of a perf map
    off_cpu: bool = False  # sched_switch/sched_waking: off-CPU and wait-for-CPU time
    off_cpu_min_ns: int = 1_000_000  # shorter waits are counted without their stack
    switch_stack_size: int = 8192  # bytes of user stack copied per switch (dwarf)
    push: str | None = None  # a Pyroscope-compatible server: q-push sends closed slices
    argv: Sequence[str] = ()

    @property
    def compress_closed(self) -> bool:
        return self.compress if self.compress is not None else self.rotate is not None

    @property
    def upkeep(self) -> bool:
        """Does the parent tend the directory (compress, retention)?"""
        return self.compress_closed or self.max_size is not None or self.max_age is not None

    @property
    def stale_after(self) -> float:
        """An open set not rewritten for this long has lost its writer."""
        return 3 * self.checkpoint + (self.rotate or 0) + 60

    @property
    def copy_grace(self) -> float:
        """A copy no set names is kept this long after it appeared: a set
        names the copies made for it at its next write, within three
        checkpoints (an idle CPU's kernel set), whatever --rotate is."""
        return 3 * self.checkpoint + 60


class Options(NamedTuple):
    """How one CPU's collector works (q-syscollect's options for it)."""

    cpu: int
    kernel_only: bool = False
    checkpoint_interval: float = 10.0
    run_seconds: float | None = None  # -t: the run ends this long after the loop starts, or later
    verbose: bool = False
    min_samples: int = 100
    stacks: bool = True
    rotate: float | None = None  # seconds per time slice; None: one slice for the run
    compress: bool = False  # write data files of closed sets gzip-compressed
    cpu_stats: bool = True  # keep the CPU's busy share and clock in kernel-cpuN
    max_stacks: int = MAX_STACKS  # distinct stacks per set and slice; the rest: one remainder
    min_stack_share: float = 0.0  # a rarer stack is folded at a checkpoint (tally.fold_rare)
    off_cpu: bool = False  # sched_switch/sched_waking come: account waits (sets/offcpu.py)
    off_cpu_min_ns: int = 0
