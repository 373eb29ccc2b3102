"""Numbers as the original q-view printed them: three significant digits
with SI suffixes (``120M``, ``29.3M``, ``61.2n``, ``1.00m``, ``7.33``,
``0.663``), and ``-`` where there is no number."""

from __future__ import annotations

import math

# Values from 0.1 up to 1000 print plainly (0.663, 7.33, 17.0, 120), as the
# original's call graph did; smaller ones take m/u/n/p/f, larger k/M/G/T/P/E.
_BIG = ("k", "M", "G", "T", "P", "E")
_SMALL = ("m", "u", "n", "p", "f")
DASH = "-"


def _mantissa(m: float) -> str:
    """Three significant digits of ``1 <= m < 1000`` (or a plain 0.1 <= m < 1)."""
    if m >= 100:
        return f"{m:.0f}"
    if m >= 10:
        return f"{m:.1f}"
    if m >= 1:
        return f"{m:.2f}"
    return f"{m:.3f}"


def _round3(x: float) -> float:
    """``x`` rounded to three significant digits (so 999.6 becomes 1000)."""
    exponent = math.floor(math.log10(x))
    try:
        return round(x, 2 - exponent)
    except OverflowError:  # within a rounding of the largest float: no digit to round
        return x


def si(value: float | None) -> str:
    """Three significant digits with an SI suffix; ``-`` for None."""
    if value is None or math.isnan(value):
        return DASH
    if value == 0:
        return "0.00"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    sign = "-" if value < 0 else ""
    x = _round3(abs(value))
    if 0.1 <= x < 1000:
        return sign + _mantissa(x)
    group = math.floor(math.log10(x) / 3)  # 1 for k, -1 for m, ...
    group = max(-len(_SMALL), min(len(_BIG), group))
    scaled = x / 10.0 ** (3 * group)
    text = _mantissa(scaled)
    if text == "1000" and group < len(_BIG):  # float noise: 999.99...k is 1.00M
        group += 1
        text = _mantissa(scaled / 1000)
    suffix = _BIG[group - 1] if group > 0 else _SMALL[-group - 1]
    return f"{sign}{text}{suffix}"


def calls(value: float | None) -> str:
    """A call count: whole numbers below 1000 print as integers, others as ``si``."""
    if value is None or value == 0:
        return DASH
    if value < 1000 and float(value).is_integer():
        return str(int(value))
    return si(value)


def percent(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0
