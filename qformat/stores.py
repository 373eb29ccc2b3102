"""Where a reader finds a `.q`: a directory, or a directory inside a tar.

A ``Store`` is what the viewer's loading asks for files: the names it
holds, a member's time, a member opened for reading (regular files only,
no link followed), an `.info` parsed within the limits, an object copy
checked against its crc. ``DirStore`` does it with the rules of
``files.open_in_directory``; ``archive.TarStore`` does the same inside a
tar read in place. The rest of the viewer does not know which it has.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from typing import IO

from .errors import QFormatError
from .info import Info, Wanted, read_info
from .limits import DEFAULT_LIMITS, Limits
from .files import open_in_directory
from .store import CopyProblem, QDir

#: identifies the directory an `.info` was read from (None: cannot change)
Identity = tuple[int, int] | None


class Store(ABC):
    """A read-only `.q`: a directory, or one inside an archive."""

    #: what messages and reports name it by: a path, or ``ARCHIVE:DIR``
    label: str

    def path(self, name: str) -> str:
        """A member's name as messages show it."""
        return os.path.join(self.label, name)

    @abstractmethod
    def names(self) -> list[str]:
        """Every file name the store holds (data, `.info`, copies)."""

    @abstractmethod
    def exists(self, name: str) -> bool: ...

    @abstractmethod
    def mtime(self, name: str) -> float:
        """When ``name`` was last written (math.inf where that cannot be told)."""

    @abstractmethod
    def open_member(self, name: str, expect: Identity = None) -> IO[bytes]:
        """The regular file ``name`` for reading; ``files.MissingFile`` where
        it is not there. ``expect``: the identity ``read_info`` returned, so
        that an `.info` and its data come from one directory."""

    @abstractmethod
    def read_info(self, name: str, objects: bool = True, limits: Limits = DEFAULT_LIMITS,
                  wanted: Wanted | None = None) -> tuple[Info, Identity]:
        """The parsed `.info` ``name`` (at most ``limits.info_size`` bytes);
        ``Unwanted`` where ``wanted`` turns its text down."""

    @abstractmethod
    def open_copy(self, name: str, max_size: int | None = None
                  ) -> tuple[int, None] | tuple[None, CopyProblem]:
        """An fd of the object copy ``name`` whose content has the crc its
        name says (see ``QDir.open_copy``), or why there is none."""

    def close(self) -> None:  # noqa: B027 (nothing to release, unless a store says so)
        """Release what the store holds open."""

    @property
    def is_archive(self) -> bool:
        return False


class DirStore(Store):
    """A `.q` directory. Every open goes through the directory's fd with
    O_NOFOLLOW (``files.open_in_directory``): nothing here follows a link."""

    def __init__(self, directory: str) -> None:
        self.label = directory
        self._qdir: QDir | None = None

    def names(self) -> list[str]:
        try:
            return os.listdir(self.label or ".")
        except OSError as e:
            raise QFormatError(f"cannot list directory: {e.strerror}", self.label) from None

    def exists(self, name: str) -> bool:
        return os.path.lexists(self.path(name))

    def mtime(self, name: str) -> float:
        try:
            return os.stat(self.path(name)).st_mtime
        except OSError:
            return math.inf  # let read_info say what is wrong with it

    def open_member(self, name: str, expect: Identity = None) -> IO[bytes]:
        fd, _dir = open_in_directory(self.label, name, expect)
        return os.fdopen(fd, "rb")

    def read_info(self, name: str, objects: bool = True, limits: Limits = DEFAULT_LIMITS,
                  wanted: Wanted | None = None) -> tuple[Info, Identity]:
        fd, identity = open_in_directory(self.label, name)
        return read_info(self.path(name), objects, limits, fd=fd, wanted=wanted), identity

    def open_copy(self, name: str, max_size: int | None = None
                  ) -> tuple[int, None] | tuple[None, CopyProblem]:
        if self._qdir is None:
            self._qdir = QDir.open(self.label or ".", reader=True)
        return self._qdir.open_copy(name, max_size)

    def close(self) -> None:
        if self._qdir is not None:
            self._qdir.close()
            self._qdir = None
