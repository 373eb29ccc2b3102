"""What a view keeps of a stack of frames: the kernel's, Python's, and the
name filters, in the order they apply.

- ``--no-kernel`` keeps what ran in user mode: a stack whose leaf is in the
  kernel is left out, as if only user time had been sampled, and the other
  stacks lose their kernel frames. Of time off the CPU (``--metric
  off-cpu``...), where every stack starts in the scheduler, the kernel
  frames go and the time stays with the user code that entered the
  kernel; a stack of kernel frames only (a kernel thread) keeps its
  outermost one;
- ``--kernel-only`` keeps the stacks whose leaf is in the kernel, with
  their kernel frames only;
- ``--python`` keeps Python frames alone, as py-spy shows them
  (``pyview``);
- ``--focus RE`` keeps only the stacks that pass through a function whose
  name matches RE, ``--ignore RE`` drops them, and ``--hide RE`` drops the
  matching frames from every stack (a stack left with no frame is
  dropped), so their time goes to their callers: pprof's meanings, in
  pprof's order.

A process frame at the root of folded stacks stays whatever the kernel
options. Each decision is made once per distinct stack of frames.
"""

from __future__ import annotations

import re
from typing import Callable

from ..model.frames import Frame, FrameTable
from ..model.profile import View
from .pyview import NOT_PYTHON, PYTHON_OBJECT, display_name, is_python

PROCESS_OBJECT = "[process]"  # the root frame of whole-machine folded stacks

Stack = tuple[int, ...]
# A stack of locations (None: no location, a frame of the view's own), each
# with its frames, innermost first
Located = list[tuple[int | None, Stack]]


class Processing:
    """A view's processing of the stacks of frames of one frame table."""

    def __init__(self, view: View, table: FrameTable, in_time: bool = False) -> None:
        self.view = view
        self.table = table
        self.frames = table.frames  # grows as frames are added: read, never copied
        self.kernel = view.kernel
        self.strip = in_time and view.kernel == "user"
        self.python = view.python
        self.filters = bool(view.focus or view.ignore or view.hide)
        self._python: dict[int, int | None] = {}  # frame -> its Python frame (None: none)
        # --focus, --ignore, --hide: in the order given, pprof's
        self._filters = [_focus(_matcher(self.frames, p)) for p in view.focus] \
            + [_ignore(_matcher(self.frames, p)) for p in view.ignore] \
            + [_hide(_matcher(self.frames, p)) for p in view.hide]

    def stages(self) -> list[tuple[str, Callable[[Located], Located | None]]]:
        """The steps in the order they apply, each named: "kernel", "python",
        then one "filter" per --focus, --ignore or --hide."""
        steps: list[tuple[str, Callable[[Located], Located | None]]] = []
        if self.strip or self.kernel is not None:
            steps.append(("kernel", self._kernel))
        if self.python:
            steps.append(("python", self._python_only))
        steps += [("filter", step) for step in self._filters]
        return steps

    def stage(self, step: Callable[[Located], Located | None]
              ) -> Callable[[Stack], Stack | None]:
        """One step on stacks of frames (each frame a location of its own)."""
        memo: dict[Stack, Stack | None] = {}

        def on_frames(stack: Stack) -> Stack | None:
            done = memo.get(stack, ())
            if done == ():
                kept = step([(None, (f,)) for f in stack])
                done = memo[stack] = None if kept is None else \
                    tuple(f for _lid, fs in kept for f in fs)
            return done
        return on_frames

    def located(self, stack: Located) -> Located | None:
        """A stack of locations, each with its frames, as the view keeps it:
        each location with the frames that stay (none, where all went), or
        None where nothing of the stack stays."""
        for _name, step in self.stages():
            kept = step(stack)
            if kept is None:
                return None
            stack = kept
        return stack

    def _kernel(self, stack: Located) -> Located | None:
        frames = self.frames
        if self.strip:
            out = [(lid, tuple(f for f in fs if not frames[f].kernel)) for lid, fs in stack]
            if not any(fs for _lid, fs in out):  # a kernel thread: its outermost frame
                lid, fs = stack[-1]
                out = [(lid, fs[-1:])]
            return out
        kernel = self.kernel == "kernel"
        if frames[_first(stack)].kernel != kernel:
            return None
        return [(lid, tuple(f for f in fs if frames[f].kernel == kernel
                            or frames[f].object == PROCESS_OBJECT)) for lid, fs in stack]

    def _python_only(self, stack: Located) -> Located | None:
        out = [(lid, tuple(m for f in fs if (m := self._python_frame(f)) is not None))
               for lid, fs in stack]
        if not any(fs for _lid, fs in out):
            return [(None, (self.table.id(NOT_PYTHON),))]
        return out

    def _python_frame(self, fid: int) -> int | None:
        found = self._python.get(fid, -1)
        if found == -1:
            frame = self.frames[fid]
            found = self._python[fid] = self.table.id(
                Frame(display_name(frame.name), PYTHON_OBJECT, False)) \
                if is_python(frame.name) else None
        return found

    def calls(self, calls: dict[tuple[int, int], float],
              stacks: dict[Stack, float]) -> dict[tuple[int, int], float] | None:
        """The call counts that stay: between frames the kernel options keep,
        none in the Python view (its frames are not where calls were
        counted), and only between functions still in some stack after the
        name filters (a function a filter took away would come back as a row
        of calls)."""
        if self.python:
            return None
        frames = self.frames
        if self.strip:
            calls = {pair: n for pair, n in calls.items()
                     if not frames[pair[0]].kernel and not frames[pair[1]].kernel}
        elif self.kernel is not None:
            kernel = self.kernel == "kernel"
            calls = {pair: n for pair, n in calls.items()
                     if frames[pair[0]].kernel == kernel and frames[pair[1]].kernel == kernel}
        if self.filters:
            present = {f for stack in stacks for f in stack}
            calls = {pair: n for pair, n in calls.items()
                     if pair[0] in present and pair[1] in present}
        return calls


def _matcher(frames: list[Frame], pattern: re.Pattern[str]) -> Callable[[int], bool]:
    memo: dict[int, bool] = {}

    def match(fid: int) -> bool:
        hit = memo.get(fid)
        if hit is None:
            hit = memo[fid] = pattern.search(frames[fid].name) is not None
        return hit
    return match


def _first(stack: Located) -> int:
    """The innermost frame of a stack."""
    return next(f for _lid, fs in stack for f in fs)


def _focus(match: Callable[[int], bool]) -> Callable[[Located], Located | None]:
    def focus(stack: Located) -> Located | None:
        return stack if any(match(f) for _lid, fs in stack for f in fs) else None
    return focus


def _ignore(match: Callable[[int], bool]) -> Callable[[Located], Located | None]:
    def ignore(stack: Located) -> Located | None:
        return None if any(match(f) for _lid, fs in stack for f in fs) else stack
    return ignore


def _hide(match: Callable[[int], bool]) -> Callable[[Located], Located | None]:
    def hide(stack: Located) -> Located | None:
        out = [(lid, tuple(f for f in fs if not match(f))) for lid, fs in stack]
        return out if any(fs for _lid, fs in out) else None
    return hide

