"""Numbers in the original q-view style: three significant digits, SI suffixes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qtools.viewer.model.numfmt import calls, si


@pytest.mark.parametrize("value, text", [
    # the original's own figures (001_a3359b43f242fd75.txt)
    (120e6, "120M"), (29.3e6, "29.3M"), (61.2e-9, "61.2n"), (1.00057e-3, "1.00m"),
    (7.33, "7.33"), (0.663, "0.663"), (0.035, "35.0m"), (17.0, "17.0"), (1.37e6, "1.37M"),
    (208e3, "208k"), (183e-9, "183n"), (6.59e-9, "6.59n"), (1.2e-9, "1.20n"),
    # rounding at the edges of a range moves to the next suffix
    (999.4, "999"), (999.5, "1.00k"), (999_999, "1.00M"), (0.0999, "99.9m"),
    (0.09996, "0.100"), (0.00099996, "1.00m"), (0.1, "0.100"), (1.0, "1.00"),
    (1e-6, "1.00u"), (1e-12, "1.00p"), (1e-15, "1.00f"), (1e18, "1.00E"),
    (0, "0.00"), (-0.5, "-0.500"), (-1500, "-1.50k"), (None, "-"),
])
def test_si(value, text):
    assert si(value) == text


def test_si_oddities_do_not_crash():
    assert si(math.inf) == "inf"
    assert si(-math.inf) == "-inf"
    assert si(math.nan) == "-"
    for extreme in (1.7976931348623157e308, 1.795e308, -1.795e308, 5e-324):  # no rounding left
        assert si(extreme)


@given(st.floats(min_value=1e-15, max_value=1e20, allow_nan=False))
def test_si_keeps_three_significant_digits(x):
    text = si(x)
    digits = [c for c in text if c.isdigit()]
    mantissa = text.rstrip("kMGTPEmunpf")
    assert len(mantissa.replace(".", "").lstrip("0")) == 3 or mantissa.startswith("0.")
    assert len(digits) in (3, 4)  # 0.xyz has a leading zero
    suffix = text[len(mantissa):]
    scale = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12, "f": 1e-15}[suffix]
    assert math.isclose(float(mantissa) * scale, x, rel_tol=6e-3)


@pytest.mark.parametrize("value, text", [
    (None, "-"), (0, "-"), (1, "1"), (999, "999"), (1000, "1.00k"), (2.5, "2.50"),
    (29.6e6, "29.6M"),
])
def test_calls(value, text):
    assert calls(value) == text
