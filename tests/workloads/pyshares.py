"""A Python program with known shares: outer() calls f1, f2 and f4, whose
work is 1:2:4 (loop steps, not time, so the shares hold on a busy machine).
Every step costs the same: the running total stays a one-digit int (below
2**30), where a sum of ``i`` would pass it in f2 and f4 and make their steps
dearer than f1's by however much the CPU charges for two-digit ints.

    python3 -X perf_jit pyshares.py ROUNDS
"""

import sys


def f1() -> int:
    total = 0
    for i in range(40000):
        total += i & 1
    return total


def f2() -> int:
    total = 0
    for i in range(80000):
        total += i & 1
    return total


def f4() -> int:
    total = 0
    for i in range(160000):
        total += i & 1
    return total


def outer(rounds: int) -> None:
    for _ in range(rounds):
        f1()
        f2()
        f4()


if __name__ == "__main__":
    outer(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
