"""Counting distinct things in fixed memory (HyperLogLog).

Stacks beyond a set's cap are not kept, so how many distinct ones there
were cannot be counted exactly without the memory the cap exists to save.
1,024 one-byte registers estimate it within about 3% (one standard error),
however many there are, and two sketches merge exactly.
"""

from __future__ import annotations

import math

_P = 10
_M = 1 << _P
_MASK64 = (1 << 64) - 1
_ALPHA = 0.7213 / (1 + 1.079 / _M)


def _mix(h: int) -> int:
    """Spread Python's hash (small for small ints) over all 64 bits (splitmix64)."""
    z = (h + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class DistinctCount:
    """Estimated number of distinct hashable values added."""

    __slots__ = ("registers",)

    def __init__(self) -> None:
        self.registers = bytearray(_M)

    def add(self, value: object) -> None:
        h = _mix(hash(value) & _MASK64)
        index = h >> (64 - _P)
        rest = h & ((1 << (64 - _P)) - 1)
        rank = (64 - _P) - rest.bit_length() + 1
        if rank > self.registers[index]:
            self.registers[index] = rank

    def merge(self, other: DistinctCount) -> None:
        self.registers = bytearray(max(a, b) for a, b in zip(self.registers, other.registers))

    def estimate(self) -> int:
        zeros = self.registers.count(0)
        if zeros == _M:
            return 0
        raw = _ALPHA * _M * _M / sum(2.0 ** -r for r in self.registers)
        if raw <= 2.5 * _M:  # few values: linear counting is exact enough
            return round(_M * math.log(_M / zeros)) if zeros else round(raw)
        return round(raw)
