"""How complete a profile's user stacks are: per object of the innermost
user frame, and per process with Python frames or JIT information."""

from __future__ import annotations


# Plain classes below, not dataclasses: ``@dataclass`` compiles each class's
# methods from source text when the module is imported, which every q-view
# run would pay before reading anything. Nothing compares or hashes them.

class QualityCount:
    """User stacks seen and how many of them reached a root frame (by weight)."""

    def __init__(self) -> None:
        self.stacks = 0.0
        self.rooted = 0.0

    def add(self, weight: float, rooted: bool) -> None:
        self.stacks += weight
        if rooted:
            self.rooted += weight

    @property
    def share(self) -> float | None:
        return self.rooted / self.stacks if self.stacks else None


class InterpreterQuality:
    """One process's user stacks: how many went through Python frames to a root,
    and what JIT information (perf maps, jitdumps) its sets had."""

    def __init__(self) -> None:
        self.stacks = 0.0
        self.python = 0.0  # stacks with at least one Python frame
        self.python_rooted = 0.0  # ... that also reach a root frame
        self.sources: list[str] = []

    @property
    def share(self) -> float | None:
        return self.python_rooted / self.stacks if self.stacks else None


class StackQuality:
    """How complete the user stacks are, per object of the innermost user frame."""

    def __init__(self) -> None:
        self.overall = QualityCount()
        self.by_object: dict[str, QualityCount] = {}
        #: per process (``comm pid N``), where it had Python frames or JIT information
        self.by_process: dict[str, InterpreterQuality] = {}
        #: weight whose stacks the collector did not keep (its sets' remainder
        #: lines: stacks folded by --min-stack-share or past --max-stacks)
        self.unkept = 0.0
        #: weight the collector moved from rare addresses to their function's
        #: first address (q:hist-moved, --min-stack-share)
        self.moved = 0.0

    def add(self, innermost_object: str, weight: float, rooted: bool) -> None:
        """One user stack: the object of its innermost user frame, and whether
        its outermost frame is a root."""
        self.overall.add(weight, rooted)
        counts = self.by_object.get(innermost_object)
        if counts is None:
            counts = self.by_object[innermost_object] = QualityCount()
        counts.add(weight, rooted)
