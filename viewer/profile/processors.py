"""Processors: Samples -> Samples and CallGraph -> CallGraph (pyinstrument's shape).

- ``hide_kernel`` keeps what ran in user mode: samples whose leaf is in the
  kernel are left out, as if only user time had been sampled;
- ``kernel_only`` keeps the samples whose leaf is in the kernel, with their
  kernel frames only;
- ``threshold`` sets the share below which report rows are summed rather
  than shown: each table judges by the column it is sorted by (self in the
  flat profile, inclusive in the call graph); totals stay as they were.
"""

from __future__ import annotations

from ..model.graph import CallGraph, Samples

PROCESS_OBJECT = "[process]"  # processes.py: the root frame of whole-machine stacks


def _keep_frames(samples: Samples, kernel: bool) -> Samples:
    frames = samples.frames
    stacks: dict[tuple[int, ...], float] = {}
    for stack, w in samples.stacks.items():
        if frames[stack[0]].kernel != kernel:
            continue
        # the process frame at the root (processes.py) stays either way
        kept = tuple(f for f in stack if frames[f].kernel == kernel
                     or frames[f].object == PROCESS_OBJECT)
        stacks[kept] = stacks.get(kept, 0.0) + w
    calls = None
    if samples.calls is not None:
        calls = {pair: n for pair, n in samples.calls.items()
                 if frames[pair[0]].kernel == kernel and frames[pair[1]].kernel == kernel}
    return samples.replace(stacks=stacks, calls=calls)


def hide_kernel(samples: Samples) -> Samples:
    return _keep_frames(samples, kernel=False)


def strip_kernel(samples: Samples) -> Samples:
    """``--no-kernel`` of time off the CPU (``--event off-cpu``...): every
    stack starts in the scheduler, so the kernel frames are taken away and
    the time stays with the user code that entered the kernel; a stack of
    kernel frames only (a kernel thread) keeps its outermost one."""
    frames = samples.frames
    stacks: dict[tuple[int, ...], float] = {}
    for stack, w in samples.stacks.items():
        kept = tuple(f for f in stack if not frames[f].kernel) or stack[-1:]
        stacks[kept] = stacks.get(kept, 0.0) + w
    calls = None
    if samples.calls is not None:
        calls = {pair: n for pair, n in samples.calls.items()
                 if not frames[pair[0]].kernel and not frames[pair[1]].kernel}
    return samples.replace(stacks=stacks, calls=calls)


def kernel_only(samples: Samples) -> Samples:
    return _keep_frames(samples, kernel=True)


def threshold(profile: CallGraph, min_percent: float) -> CallGraph:
    if min_percent <= 0 or not profile.total:
        return profile
    return CallGraph(profile.samples, profile.total, profile.functions, profile.arcs,
                     profile.cycles, min_percent)
