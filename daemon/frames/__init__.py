"""A sample's user frames: DWARF unwinding through the unwind package, and the
code JIT compilers describe (perf maps, jitdumps)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

if TYPE_CHECKING:
    from ..decode.records import Sample
    from ..machine.tasks import Process


class UserFrames(Protocol):
    """The seam for user-stack unwinding: frame pointers or DWARF CFI."""

    name: str

    def frames(self, proc: Process, sample: Sample, fp_user: Sequence[int]) -> Sequence[int]: ...

    def recall(self, proc: Process, sample: Sample) -> tuple[int, ...] | None:
        """A sample's user frames where known without work (a walk
        remembered), else None: ``frames`` takes it."""
        ...


class FramePointerFrames:
    """User frames as the kernel's frame-pointer walk found them."""

    name = "fp"

    def frames(self, proc: Process, sample: Sample, fp_user: Sequence[int]) -> Sequence[int]:
        return fp_user

    def recall(self, proc: Process, sample: Sample) -> tuple[int, ...] | None:
        return None  # the kernel's walk is in the callchain, which only _sample splits
