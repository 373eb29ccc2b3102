"""The unwinder's exceptions. None of them escapes `Unwinder.unwind` or
`ObjectCFI.from_fd`/`from_bytes`: they mark malformed unwind data internally
and are turned into "no rules" or a clean stop."""

from __future__ import annotations

# malformed CFI (a ValueError): the shared parser's
from qtools.qformat.objects.ehframe import CfiError

__all__ = ["CfiError", "ElfError", "UnwindError"]


class UnwindError(Exception):
    """Base of the unwinder's exceptions."""


class ElfError(UnwindError):
    """The object is not an ELF file this unwinder understands."""
