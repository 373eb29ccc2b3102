"""The tolerance arithmetic the sampled-number tests rely on (tests/sampling.py)."""

from __future__ import annotations

import math

import pytest

from tests.sampling import (count_tolerance, false_failure_rate, pooled, share_disagreements,
                            share_sigma, share_tolerance, sigma_bound)


def test_binomial_sigma_of_a_share_and_of_a_difference():
    assert share_sigma(0.25, 3000) == pytest.approx(math.sqrt(0.25 * 0.75 / 3000))
    # issue 11's example: about 2,600 samples per tool, one sigma of the difference ~1.4 pp
    assert share_sigma(0.5, 2600, 2600) == pytest.approx(0.0139, abs=1e-4)
    assert share_sigma(0.0, 100) == share_sigma(1.0, 100) == 0.0
    with pytest.raises(ValueError):
        share_sigma(0.5, 0)


def test_tolerance_is_sigmas_times_sigma_with_a_floor():
    assert share_tolerance(0.25, 5000, 5000) == pytest.approx(4.5 * share_sigma(0.25, 5000, 5000))
    assert share_tolerance(0.001, 5000, 5000) == 0.01
    assert count_tolerance(2500) == pytest.approx(4.5 * 50)
    assert count_tolerance(4, floor=20) == 20
    assert false_failure_rate(4) == pytest.approx(6.3e-5, rel=0.01)
    assert false_failure_rate() == pytest.approx(6.8e-6, rel=0.01)


def test_disagreements_name_the_numbers():
    assert pooled(0.2, 1000, 0.4, 3000) == pytest.approx(0.35)
    ours, theirs = {"a": 0.25, "b": 0.30, "c": 0.002}, {"a": 0.26, "b": 0.20}
    bad = share_disagreements(ours, 5000, theirs, 5000, set(ours) | set(theirs))
    assert len(bad) == 1 and bad[0].startswith("b: 30.00% of 5000 vs 20.00% of 5000 samples")
    assert sigma_bound([0.25, 0.30, 0.002], 5000, 5000) == 2
