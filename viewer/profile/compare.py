"""Two profiles compared, function by function (``q-view --diff``).

``compare`` matches the two sides' call graphs' functions by frame and is
pure. As ``perf diff`` and ``pprof -diff_base -normalize`` do, the default
compares shares (each side's times as percent of its own total, the change
in percentage points), so a longer or busier day does not make everything
look slower; ``absolute`` compares times in the profile's unit, as ``pprof
-diff_base`` does without ``-normalize``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from ..inputs.select import Selection
from ..model.viewerrors import ViewError
from ..model.frames import Frame
from ..model.graph import CallGraph
from ..model.numfmt import percent

BASE, NEW = "base", "new"
IN_BOTH, ONLY_NEW, ONLY_BASE = "both", "new", "gone"


class Side(NamedTuple):
    """One side of a comparison: its input as given, its selection, its graph."""

    label: str  # BASE or NEW
    input: str
    selection: Selection
    profile: CallGraph


class Row(NamedTuple):
    """One function (object, address: ``--by``) of either side. Times are in
    the profile's unit, shares in percent of that side's total; a function
    that a side does not have has 0 there."""

    frame: Frame
    status: str  # IN_BOTH, ONLY_NEW or ONLY_BASE
    base_self: float
    new_self: float
    base_inclusive: float
    new_inclusive: float
    base_self_share: float
    new_self_share: float
    base_inclusive_share: float
    new_inclusive_share: float

    @property
    def self_points(self) -> float:
        return _change(self.base_self_share, self.new_self_share)

    @property
    def inclusive_points(self) -> float:
        return _change(self.base_inclusive_share, self.new_inclusive_share)

    @property
    def self_change(self) -> float:
        return _change(self.base_self, self.new_self)

    @property
    def inclusive_change(self) -> float:
        return _change(self.base_inclusive, self.new_inclusive)


def _change(base: float, new: float) -> float:
    """new - base, where a difference in the last bits of two sums is none
    (100% of one side and 99.99999999999999% of the other are the same)."""
    change = new - base
    return 0.0 if abs(change) <= 1e-9 * max(abs(base), abs(new)) else change


class Comparison(NamedTuple):
    base: Side
    new: Side
    rows: tuple[Row, ...]  # shown, largest change first
    left_out: int  # rows --min-percent left out
    absolute: bool  # ordered (and, in text, shown) by time, not by share
    has_stacks: bool  # both sides have call stacks: inclusive times mean something
    min_percent: float = 0.0


def compare(base: Side, new: Side, absolute: bool = False,
            min_percent: float = 0.0) -> Comparison:
    """The rows of two sides' call graphs, matched by frame, largest change
    first: in percentage points of the shares, or with ``absolute`` in time.
    ``min_percent`` leaves out the rows whose self and inclusive changes are
    both smaller (points; with ``absolute``, percent of the base's total)."""
    b, n = base.profile, new.profile
    if b.samples.unit != n.samples.unit:
        raise ViewError(f"cannot compare {b.samples.unit} (base) with {n.samples.unit} (new): "
                        "select sets of one event on both sides")
    has_stacks = b.has_stacks and n.has_stacks
    b_base, n_base = b.base, n.base
    rows = []
    for frame in dict.fromkeys([*b.functions, *n.functions]):
        bf, nf = b.functions.get(frame), n.functions.get(frame)
        bs, bi = (bf.self, bf.inclusive) if bf else (0.0, 0.0)
        ns, ni = (nf.self, nf.inclusive) if nf else (0.0, 0.0)
        if not has_stacks:  # a leaf-only side's inclusive is only its self
            bi, ni = bs, ns
        in_base, in_new = bs > 0 or bi > 0, ns > 0 or ni > 0
        if not (in_base or in_new):  # called (.edge data) but never sampled
            continue
        status = IN_BOTH if in_base and in_new else ONLY_NEW if in_new else ONLY_BASE
        rows.append(Row(frame, status, bs, ns, bi, ni, percent(bs, b_base), percent(ns, n_base),
                        percent(bi, b_base), percent(ni, n_base)))
    size = _size(absolute, b_base)
    rows.sort(key=lambda r: (-round(size(r.self_change, r.self_points), 9),
                             -round(size(r.inclusive_change, r.inclusive_points), 9),
                             r.frame.name, r.frame.object, r.frame.kernel))
    shown = [r for r in rows if not min_percent
             or max(size(r.self_change, r.self_points),
                    size(r.inclusive_change, r.inclusive_points)) >= min_percent]
    return Comparison(base, new, tuple(shown), len(rows) - len(shown), absolute, has_stacks,
                      min_percent)


def _size(absolute: bool, base_total: float) -> Callable[[float, float], float]:
    """How big a change is, in percent: the points between the shares, or
    with ``absolute`` the time changed as percent of the base's total (as
    pprof's -diff_base percentages are)."""
    if absolute:
        return lambda change, _points: abs(percent(change, base_total)) if base_total \
            else abs(change)
    return lambda _change, points: abs(points)
