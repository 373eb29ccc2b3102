"""The call graph: samples in, functions, arcs and cycles out.

Two stages, as in gprof2dot and pyinstrument:

- ``Samples``: symbolized call stacks of frames (innermost first) with their
  weight in output units, plus call counts where `.edge` data exists:
  what a report groups a profile into (``profile.group``).
- ``CallGraph``: the call graph computed from Samples (``callgraph.analyze``):
  ``Function``, ``Arc`` and ``Cycle`` with exclusive, inclusive and
  attributed times. ``CallGraph.self_check`` checks the sums hold.
"""

from __future__ import annotations

import math
from typing import Any

from .frames import Frame, SetSummary
from .quality import StackQuality


# Plain classes below, not dataclasses: ``@dataclass`` compiles each class's
# methods from source text when the module is imported, which every q-view
# run would pay before reading anything. Nothing compares or hashes them.

class Samples:
    """Symbolized call stacks of the selected task sets, merged."""

    def __init__(self, event: str, unit: str, granularities: list[float], count_unit: float,
                 lost_samples: int, tasks: list[SetSummary], frames: list[Frame],
                 stacks: dict[tuple[int, ...], float], has_stacks: bool,
                 calls: dict[tuple[int, int], float] | None,
                 quality: StackQuality | None = None, whole: float | None = None,
                 filters: tuple[str, ...] = (), by: str = "function",
                 unnamed: frozenset[int] = frozenset(), programs: tuple[str, ...] = (),
                 stack_programs: dict[tuple[int, ...], int] | None = None,
                 call_programs: dict[tuple[int, int], int] | None = None,
                 lost_share: float | None = None) -> None:
        self.event = event
        self.unit = unit
        self.granularities = granularities
        # output units per event count (of the first set), for raw counts
        self.count_unit = count_unit
        # records lost on the CPUs and in the times of the sets, each once
        # (model/lost.py), and the share of the samples they could have been
        self.lost_samples = lost_samples
        self.lost_share = lost_share
        self.tasks = tasks
        self.frames = frames  # frame id -> Frame
        self.stacks = stacks  # frame ids, innermost first -> weight
        self.has_stacks = has_stacks  # False: only `.hist` data, every stack is its leaf alone
        self.calls = calls  # (caller id, callee id) -> calls; None: no `.edge`
        self.quality = StackQuality() if quality is None else quality
        # The total of the whole selection before --focus/--ignore/--hide took
        # stacks or frames away (None: nothing was filtered): percentages stay
        # shares of it, so a filtered report never inflates a share.
        self.whole = whole
        self.filters = filters  # the filters applied, as the user wrote them
        self.by = by  # what a frame is (--by)
        self.unnamed = unnamed  # frame ids of single addresses with no function
        # The programs the stacks come from (their sets' comm, or idle/kernel),
        # and where there are several, which of them each stack (and call
        # pair) was met in: a bit per program, ``1 << programs.index(name)``
        self.programs = programs
        self.stack_programs = stack_programs
        self.call_programs = call_programs

    def replace(self, **changes: Any) -> Samples:
        """A copy with the fields in ``changes`` replaced, the others shared. The
        attributes are the constructor's parameters: an unknown name is a TypeError."""
        return Samples(**{**vars(self), **changes})

    @property
    def total(self) -> float:
        return math.fsum(self.stacks.values())

    @property
    def base(self) -> float:
        """What percentages are of: the whole selection."""
        return self.total if self.whole is None else self.whole


class Function:
    # slots: a large profile has tens of thousands of functions and arcs
    __slots__ = ("frame", "self", "inclusive", "spontaneous", "calls", "recursive_calls",
                 "cycle")

    def __init__(self, frame: Frame, self_: float = 0.0, inclusive: float = 0.0,
                 spontaneous: float = 0.0, calls: float | None = None,
                 recursive_calls: float | None = None) -> None:
        self.frame = frame
        self.self = self_  # exclusive time (``self_``: ``self`` is the instance here)
        self.inclusive = inclusive
        self.spontaneous = spontaneous  # weight of stacks in which it is the outermost frame
        self.calls = calls  # estimated calls into it from other functions
        self.recursive_calls = recursive_calls  # calls from itself
        self.cycle: int | None = None

    @property
    def children(self) -> float:
        return self.inclusive - self.self


class Arc:
    """caller -> callee: the callee's time attributed to this caller.

    The weight of the stacks in which the caller directly calls the callee,
    each stack counted once however often the pair repeats in it; ``self`` is
    the part whose leaf is the callee, ``children`` the rest.
    """

    __slots__ = ("caller", "callee", "self", "children", "calls", "programs")

    def __init__(self, caller: Frame, callee: Frame, self_: float = 0.0,
                 children: float = 0.0, calls: float | None = None) -> None:
        self.caller = caller
        self.callee = callee
        self.self = self_
        self.children = children
        self.calls = calls
        # the programs whose stacks (or call counts) hold this call, where
        # the report's samples come from several (None: from one)
        self.programs: tuple[str, ...] | None = None

    @property
    def total(self) -> float:
        return self.self + self.children


class Cycle:
    """Functions that call each other (a strongly connected component).

    Times are exact: a stack counts once toward the cycle, however many of
    its members it contains.
    """

    def __init__(self, number: int, members: list[Frame], self_: float,
                 inclusive: float) -> None:
        self.number = number
        self.members = members
        self.self = self_
        self.inclusive = inclusive
        self.calls: float | None = None  # calls into the cycle from outside
        self.internal_calls: float | None = None  # calls between members
        self.callers: dict[Frame, Arc] = {}  # callee field: a member, nominal

    @property
    def name(self) -> str:
        return f"<cycle {self.number}>"

    @property
    def children(self) -> float:
        return self.inclusive - self.self


class CallGraph:
    """Functions, arcs and cycles of some Samples."""

    def __init__(self, samples: Samples, total: float, functions: dict[Frame, Function],
                 arcs: dict[tuple[Frame, Frame], Arc], cycles: list[Cycle],
                 min_percent: float = 0.0) -> None:
        self.samples = samples
        self.total = total
        self.functions = functions
        self.arcs = arcs
        self.cycles = cycles
        # --min-percent: rows below this share of the whole selection are summed
        # in one row, judged by the column a table is sorted by.
        self.min_percent = min_percent
        self._adj: tuple[dict[Frame, list[Arc]], dict[Frame, list[Arc]]] | None = None

    @property
    def has_stacks(self) -> bool:
        return self.samples.has_stacks

    @property
    def has_calls(self) -> bool:
        return self.samples.calls is not None

    @property
    def base(self) -> float:
        """What percentages are of (the whole selection, before --focus and co.).
        ``total`` is the samples' total, summed once: a renderer asks for this
        once per row, and summing every stack each time made a call graph of
        many functions quadratic."""
        whole = self.samples.whole
        return self.total if whole is None else whole

    @property
    def limit(self) -> float:
        """The smallest time a row needs under --min-percent."""
        return self.base * self.min_percent / 100.0 if self.min_percent > 0 else 0.0

    def shown(self, frame: Frame) -> bool:
        """In the call graph (sorted by inclusive time): inclusive at the limit."""
        if not self.min_percent:
            return True
        fn = self.functions.get(frame)
        if fn is None:
            return False
        return (fn.inclusive if self.has_stacks else fn.self) >= self.limit

    def shown_flat(self, fn: Function) -> bool:
        """In the flat profile (sorted by self time): self time at the limit."""
        return not self.min_percent or fn.self >= self.limit

    def callers(self, frame: Frame) -> list[Arc]:
        return self._adjacency()[0].get(frame, [])

    def callees(self, frame: Frame) -> list[Arc]:
        return self._adjacency()[1].get(frame, [])

    def _adjacency(self) -> tuple[dict[Frame, list[Arc]], dict[Frame, list[Arc]]]:
        if self._adj is None:
            into: dict[Frame, list[Arc]] = {}
            out: dict[Frame, list[Arc]] = {}
            for (caller, callee), arc in self.arcs.items():
                into.setdefault(callee, []).append(arc)
                out.setdefault(caller, []).append(arc)
            self._adj = (into, out)
        return self._adj

    def cycle_of(self, frame: Frame) -> Cycle | None:
        fn = self.functions.get(frame)
        if fn is None or fn.cycle is None:
            return None
        return next((c for c in self.cycles if c.number == fn.cycle), None)

    def self_check(self) -> None:
        """Check the sums a correct call graph satisfies (pyinstrument's
        habit); ``InconsistentGraph`` names the first that fails. Explicit
        checks, not ``assert``: ``python -O`` must not turn them off."""
        def close(a: float, b: float) -> bool:
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9 * max(1.0, abs(self.total)))

        def at_most(a: float, b: float) -> bool:
            return a <= b or close(a, b)

        def require(holds: bool, what: str) -> None:
            if not holds:
                raise InconsistentGraph(what)

        self_sum = math.fsum(f.self for f in self.functions.values())
        require(close(self_sum, self.total), f"sum of self {self_sum} != total {self.total}")
        for f in self.functions.values():
            require(f.self >= 0, f"{f.frame.name}: negative self")
            require(at_most(f.self, f.inclusive),
                    f"{f.frame.name}: inclusive {f.inclusive} < self {f.self}")
            require(at_most(f.inclusive, self.total),
                    f"{f.frame.name}: inclusive {f.inclusive} > total {self.total}")
        for a in self.arcs.values():
            callee = self.functions.get(a.callee)
            if callee is None:
                raise InconsistentGraph(f"arc {a.caller.name}->{a.callee.name}: no such callee")
            require(a.self >= 0 and a.children >= 0, "negative arc time")
            require(at_most(a.total, callee.inclusive),
                    f"arc {a.caller.name}->{a.callee.name} exceeds the callee's inclusive time")
            require(at_most(a.self, callee.self),
                    f"arc {a.caller.name}->{a.callee.name} self exceeds the callee's self time")
        for c in self.cycles:
            members = [self.functions[m] for m in c.members]
            require(close(c.self, math.fsum(m.self for m in members)), "cycle self != sum")
            require(at_most(max(m.inclusive for m in members), c.inclusive),
                    "cycle inclusive too small")
            require(at_most(c.inclusive, self.total), "cycle inclusive > total")


class InconsistentGraph(Exception):
    """A call graph whose sums do not hold: a bug in q-view, not in the input."""
