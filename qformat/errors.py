"""The one exception type of the q file format."""

from __future__ import annotations

import os


class QFormatError(Exception):
    """A q file (or a name, or a directory) is not what the format allows.

    Carries the file and, where it makes sense, the 1-based line, so that a
    command-line tool can print ``FILE:LINE: message`` and exit.
    """

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None,
                 line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = os.fspath(path) if path is not None else None
        self.line = line

    def located(self, path: str | os.PathLike[str] | None = None,
                line: int | None = None) -> QFormatError:
        """Return this error with a file (and line) filled in where it had none."""
        if self.path is None and path is not None:
            self.path = os.fspath(path)
        if self.line is None and line is not None:
            self.line = line
        return self

    def __str__(self) -> str:
        where = self.path or "<input>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        return f"{where}: {self.message}"
