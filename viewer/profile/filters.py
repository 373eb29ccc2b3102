"""``--focus``, ``--ignore`` and ``--hide``: stacks and frames by function name.

The meanings are pprof's:

- ``--focus RE`` keeps only the stacks that pass through a function whose
  name matches RE;
- ``--ignore RE`` drops the stacks that pass through such a function;
- ``--hide RE`` drops the matching frames from every stack (a stack left
  with no frame is dropped), so their time goes to their callers.

Percentages stay shares of the whole selection (``Samples.whole``): a
filtered report shows less, never a larger share than the time had.
"""

from __future__ import annotations

import argparse
import re
from typing import Callable

from ..model.graph import Samples


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--focus", metavar="RE", action="append", type=_regex, default=[],
                       help="only stacks through a function whose name matches RE")
    group.add_argument("--ignore", metavar="RE", action="append", type=_regex, default=[],
                       help="leave out stacks through a function whose name matches RE")
    group.add_argument("--hide", metavar="RE", action="append", type=_regex, default=[],
                       help="leave matching functions out of stacks (their time goes to "
                            "their callers); percentages stay of the whole selection")


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r}: {e}") from None


def apply(samples: Samples, args: argparse.Namespace) -> Samples:
    """``samples`` with the filters of ``args`` applied, in pprof's order."""
    for pattern in args.focus:
        samples = _keep(samples, pattern, True, f"--focus {pattern.pattern}")
    for pattern in args.ignore:
        samples = _keep(samples, pattern, False, f"--ignore {pattern.pattern}")
    for pattern in args.hide:
        samples = hide(samples, pattern)
    return samples


def _matching(samples: Samples, pattern: re.Pattern[str]) -> Callable[[int], bool]:
    memo: dict[int, bool] = {}

    def match(fid: int) -> bool:
        hit = memo.get(fid)
        if hit is None:
            hit = memo[fid] = pattern.search(samples.frames[fid].name) is not None
        return hit
    return match


def _filtered(samples: Samples, stacks: dict[tuple[int, ...], float], what: str) -> Samples:
    # Call counts stay only between functions still in some stack: a
    # function the filter took away would come back as a row of calls.
    calls = samples.calls
    if calls is not None:
        present = {f for stack in stacks for f in stack}
        calls = {pair: n for pair, n in calls.items()
                 if pair[0] in present and pair[1] in present}
    return samples.replace(stacks=stacks, calls=calls, whole=samples.base,
                           filters=samples.filters + (what,))


def _keep(samples: Samples, pattern: re.Pattern[str], through: bool, what: str) -> Samples:
    """--focus (``through``) or --ignore: whole stacks, by whether a frame matches."""
    match = _matching(samples, pattern)
    stacks = {stack: w for stack, w in samples.stacks.items()
              if any(match(f) for f in stack) == through}
    return _filtered(samples, stacks, what)


def hide(samples: Samples, pattern: re.Pattern[str]) -> Samples:
    match = _matching(samples, pattern)
    stacks: dict[tuple[int, ...], float] = {}
    for stack, w in samples.stacks.items():
        kept = tuple(f for f in stack if not match(f))
        if kept:
            stacks[kept] = stacks.get(kept, 0.0) + w
    return _filtered(samples, stacks, f"--hide {pattern.pattern}")
