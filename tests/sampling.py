"""Tolerances for sampled numbers, from the samples' own counts.

A share p (of the samples that land in a function, say) estimated from n
independent samples has the binomial standard deviation sqrt(p(1-p)/n); the
difference of two independent estimates from n1 and n2 samples has
sqrt(p(1-p)(1/n1 + 1/n2)). Two profilers sampling the same run are, if
anything, positively correlated, which only makes their difference smaller.

A count of timer samples that land in a task which ran T seconds is, per
stretch the task ran, a whole number of periods plus at most one sample
more or less; its variance is at most its mean, so sqrt(n) samples bounds
its standard deviation (Poisson).

A comparison fails beyond SIGMAS standard deviations, or beyond a floor
where that is larger (small shares, where a few samples of systematic
difference -- process start, the kernel's entry code -- outweigh sigma).
At 4.5 sigma a comparison fails falsely with probability
erfc(4.5 / sqrt(2)) = 6.8e-6 (two-sided); a test that makes m comparisons
whose tolerance is sigma-bound fails falsely at most m times that. Each test
states its n, sigma and m.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping

from qtools.qformat import read_info

SIGMAS = 4.5
SHARE_FLOOR = 0.01  # one percentage point


def false_failure_rate(sigmas: float = SIGMAS) -> float:
    """Probability that a normal deviate lies beyond +-sigmas (two-sided)."""
    return math.erfc(sigmas / math.sqrt(2))


def share_sigma(p: float, *ns: int) -> float:
    """Standard deviation of a share p estimated from n samples; with two
    counts, of the difference of two independent estimates."""
    if not ns or min(ns) <= 0:
        raise ValueError(f"sample counts must be positive: {ns}")
    p = min(max(p, 0.0), 1.0)
    return math.sqrt(p * (1 - p) * sum(1 / n for n in ns))


def share_tolerance(p: float, *ns: int, sigmas: float = SIGMAS,
                    floor: float = SHARE_FLOOR) -> float:
    """How far a share p from ns samples may stray: sigmas * sigma, at least floor."""
    return max(sigmas * share_sigma(p, *ns), floor)


def count_tolerance(n: int, sigmas: float = SIGMAS, floor: float = 0.0) -> float:
    """How far a count of n timer samples may stray from its expectation, in
    samples: sigmas * sqrt(n) (Poisson bound), at least floor."""
    return max(sigmas * math.sqrt(max(n, 1)), floor)


def pooled(a: float, n1: int, b: float, n2: int) -> float:
    """The common share two estimates measure, if they measure the same thing."""
    return (a * n1 + b * n2) / (n1 + n2)


def share_disagreements(ours: Mapping[str, float], n_ours: int, theirs: Mapping[str, float],
                        n_theirs: int, names: Iterable[str], sigmas: float = SIGMAS,
                        floor: float = SHARE_FLOOR) -> list[str]:
    """The names (absent counts as 0) whose two shares differ by more than
    their tolerance, each as a line with the numbers a reader needs."""
    bad = []
    for name in sorted(names):
        a, b = ours.get(name, 0.0), theirs.get(name, 0.0)
        p = pooled(a, n_ours, b, n_theirs)
        sigma = share_sigma(p, n_ours, n_theirs)
        tol = share_tolerance(p, n_ours, n_theirs, sigmas=sigmas, floor=floor)
        if abs(a - b) > tol:
            bad.append(f"{name}: {100 * a:.2f}% of {n_ours} vs {100 * b:.2f}% of {n_theirs} "
                       f"samples, off by {100 * abs(a - b):.2f} pp > {100 * tol:.2f} pp "
                       f"(sigma {100 * sigma:.2f} pp)")
    return bad


def sigma_bound(shares: Iterable[float], *ns: int, sigmas: float = SIGMAS,
                floor: float = SHARE_FLOOR) -> int:
    """How many of these shares get a tolerance from sigma rather than from
    the floor: the comparisons that count towards a test's false-failure rate."""
    return sum(sigmas * share_sigma(p, *ns) > floor for p in shares)


def q_samples(view: Mapping) -> int:
    """How many samples a `q-view --format json` document was made of: the
    q:samples of the `.info` files it names."""
    counts = [read_info(os.path.join(t["directory"], t["file"])).task.samples
              for t in view["tasks"]]
    if not counts or None in counts:
        raise AssertionError(f"no sample count in {[t['file'] for t in view['tasks']]}")
    return sum(counts)
