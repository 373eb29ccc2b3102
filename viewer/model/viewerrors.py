"""The one exception type of q-view (format errors come as QFormatError)."""

from __future__ import annotations


class ViewError(Exception):
    """Something the user asked for cannot be done; says which file, where known."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.line = line

    def __str__(self) -> str:
        if self.path is None:
            return self.message
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


class UsageError(ViewError):
    """The command line asks for something malformed: exit status 2."""
