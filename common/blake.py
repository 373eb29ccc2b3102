"""BLAKE2b without hashlib: importing hashlib loads OpenSSL (about 3 ms
of every start), and BLAKE2 is CPython's own module, never OpenSSL's."""

from __future__ import annotations

try:
    from _blake2 import blake2b
except ImportError:  # an interpreter without it: hashlib's is the same function
    from hashlib import blake2b

__all__ = ["blake2b"]
