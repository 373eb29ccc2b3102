"""Synthetic addresses of JIT code (see jitdump): the arithmetic alone, so
that a reader which only asks "is this JIT code?" need not load the
jitdump decoder."""

from __future__ import annotations

JIT_BASE = 0x7A00_0000_0000_0000
JIT_STRIDE = 1 << 24  # code larger than this is cut to it
JIT_END = 0x8000_0000_0000_0000
MAX_ORDINAL = (JIT_END - JIT_BASE) // JIT_STRIDE


def synthetic_address(ordinal: int, offset: int) -> int:
    return JIT_BASE + ordinal * JIT_STRIDE + offset


def is_synthetic(address: int) -> bool:
    return JIT_BASE <= address < JIT_END


def split_synthetic(address: int) -> tuple[int, int]:
    """(ordinal, offset) of a synthetic address."""
    return divmod(address - JIT_BASE, JIT_STRIDE)
