"""What a q-view report is asked to be: the options the command line parses
into, and the only thing that crosses from it into the pipeline (as
pprof's ``report.Options`` does). A report can be made from Python with
these values alone, no argument list needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from qtools.qformat.limits import DEFAULT_LIMITS, Limits

from .profile import View

METRICS = ("cpu", "off-cpu", "cpu-wait", "wall")


@dataclass(frozen=True)
class SymbolOptions:
    """Where names and source lines come from."""

    debug_roots: tuple[str, ...] = ()  # --debug-root, before $Q_DEBUG_ROOT and /usr/lib/debug
    debuginfod: tuple[str, ...] = ()  # --debuginfod servers (else $DEBUGINFOD_URLS)
    cache: bool = True  # read and write the symbol cache (--no-cache: not)
    source_roots: tuple[str, ...] = ()  # --source-root, for --annotate


@dataclass(frozen=True)
class ProfileOptions:
    """Which samples a profile holds and how they read as frames: the same
    for every output format."""

    by: str = "function"  # a node is a function, object, address or source line
    by_thread: bool = False  # ... each stack under its thread
    inline: bool = False  # self time to the innermost inlined function
    metric: str = "cpu"  # METRICS: the samples, or time from the `.threads` files
    tids: frozenset[int] | None = None  # only these threads
    kernel: str | None = None  # "user" (--no-kernel), "kernel" (--kernel-only)
    python: bool = False  # Python frames only
    focus: tuple[re.Pattern[str], ...] = ()
    ignore: tuple[re.Pattern[str], ...] = ()
    hide: tuple[re.Pattern[str], ...] = ()
    per_pid: bool = False  # folded stacks: the root frame is comm-pid
    weight: str = "event"  # folded stacks: event counts or samples

    def view(self, escape: bool = True, roots: bool = False) -> View:
        """The profile's view for an output that escapes names (text) or not
        (JSON, exports), with process roots (folded stacks) or not."""
        return View(self.by, self.inline, escape, self.kernel, self.python, self.focus,
                    self.ignore, self.hide, roots, self.per_pid, self.weight)

    @property
    def threads_needed(self) -> bool:
        """Whether the profile comes from the sets' `.threads` files."""
        return self.metric != "cpu" or self.tids is not None or self.by_thread


@dataclass(frozen=True)
class ReportOptions:
    """What of a profile a report shows."""

    format: str = "text"
    flat: bool = False  # the flat profile (text: with --graph, both)
    graph: bool = False  # the call graph
    stack_quality: bool = False
    stacks: bool = False  # JSON: the weighted stacks too
    min_percent: float | None = None  # rows below this share summed (None: not given)
    metrics: tuple[str, ...] = ()  # several metrics side by side


@dataclass(frozen=True)
class Options:
    """A whole q-view report: its profile, its report, its names, its caps."""

    profile: ProfileOptions = field(default_factory=ProfileOptions)
    report: ReportOptions = field(default_factory=ReportOptions)
    symbols: SymbolOptions = field(default_factory=SymbolOptions)
    limits: Limits = DEFAULT_LIMITS

    def with_metric(self, metric: str) -> Options:
        """The same report of another metric."""
        return replace(self, profile=replace(self.profile, metric=metric))
