"""The source text ``--annotate`` prints, and which files it may read for it.

A line table names its source files by whatever paths its compiler was
given (``#line 1 "/root/.ssh/id_rsa"`` is one), and an archive's copies
carry line tables their maker chose. So a source file is read only:

- below an allowed root: each ``--source-root DIR``, and the current
  directory unless it is ``/``, a home directory or above one
  (``localfiles.default_root``), with symlinks resolved before the check
  (``localfiles.open_within``): a ``..`` or a link that leads out is
  refused;
- anywhere the user can read, where the line table is that of a file of
  this machine's that only the user or root can change
  (``Symbols.lines_named_here``): its names are then the user's own;
- as fetched from the debuginfod servers the user named, by build-id.

A refused file is said once, with the way to allow it; its lines show
without text, and the instructions are annotated all the same.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator

from qtools.qformat import open_regular

from .debuginfod import Debuginfod
from .localfiles import OutsideRoots, default_root, homes, open_within, resolved_roots

MAX_SOURCE = 16 << 20  # bytes of one source file read

Warn = Callable[[str], None]


class Roots:
    """The directories below which any source file may be read: the
    ``--source-root`` ones, searched for the tails of a path, and the
    current directory, where a path may lead."""

    def __init__(self, source_roots: list[str], cwd: str | None = None,
                 home_dirs: list[str] | None = None) -> None:
        here = default_root(os.getcwd() if cwd is None else cwd,
                            homes() if home_dirs is None else home_dirs)
        self.cwd = here
        self.search = resolved_roots(source_roots)
        self.dirs = resolved_roots(([here] if here else []) + source_roots)
        self.given = bool(source_roots)

    def describe(self) -> str:
        """Where files may be read, for a message."""
        if self.cwd is None:
            where = "the --source-root directories" if self.given else "any allowed directory"
            return f"{where} (the current directory is / or holds a home directory: " \
                   "not searched)"
        return "the current directory and the --source-root directories" if self.given \
            else "the current directory"


class SourceFiles:
    """Source text by path, as the line table names it: below a
    --source-root (the path's longest tail that exists there), else at the
    path itself, each where it may be read (above)."""

    def __init__(self, roots: Roots, named_here: Callable[[], bool], warn: Warn,
                 fetcher: Debuginfod | None = None, build_id: str | None = None) -> None:
        self.roots = roots
        self._named_here = named_here  # the line table is a file of this machine's own
        self._here: bool | None = None
        self.warn = warn
        self.fetcher = fetcher  # sources not found here, by the object's build-id
        self.build_id = build_id
        self.files: dict[str, list[str] | None] = {}
        self.missing: list[str] = []
        self.refused: list[str] = []  # found, but not below an allowed root

    def line(self, path: str, number: int) -> str | None:
        text = self.files.get(path, False)
        if text is False:
            text = self.files[path] = self._read(path)
        if text is None or not 1 <= number <= len(text):  # type: ignore[arg-type]
            return None
        return text[number - 1]  # type: ignore[index]

    def named_here(self) -> bool:
        if self._here is None:
            self._here = self._named_here()
        return self._here

    def _candidates(self, path: str) -> Iterator[str]:
        """Below each --source-root, the path's tails from the longest; then
        the path."""
        parts = [p for p in path.split("/") if p and p not in (".", "..")]
        for root in self.roots.search:
            for i in range(len(parts)):
                yield os.path.join(root, *parts[i:])
        yield path

    def _open(self, path: str) -> int | None:
        """An fd of the source file ``path``, where it may be read."""
        refused = None
        for candidate in self._candidates(path):
            try:
                return open_within(candidate, self.roots.dirs)
            except OutsideRoots as e:
                if candidate == path and self.named_here():
                    try:
                        return open_regular(path)
                    except OSError:
                        continue
                if refused is None and os.path.isfile(e.real):
                    refused = candidate
            except OSError:
                continue
        if self.fetcher is not None and self.build_id:
            got = self.fetcher.source(self.build_id, path)
            if got:
                try:
                    return open_regular(got)
                except OSError:
                    pass
        (self.refused if refused is not None else self.missing).append(refused or path)
        return None

    def _read(self, path: str) -> list[str] | None:
        fd = self._open(path)
        if fd is None:
            return None
        # a regular file only (open_regular): a FIFO named by hostile DWARF must not block
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_SOURCE + 1)
        if len(data) > MAX_SOURCE:
            self.warn(f"{path}: larger than {MAX_SOURCE >> 20} MiB; not shown")
            return None
        return data.decode("utf-8", "replace").splitlines()

    def report(self, obj: str) -> None:
        """One warning for the source files refused, one for those not found;
        ``obj``: the object whose line table named them."""
        if self.refused:
            self.warn(f"{_some(self.refused)}: source file not read: outside "
                      f"{self.roots.describe()}, and named by the line table of {obj} in the "
                      "profile, not of a file of this machine's that only you or root can "
                      "change; its lines show without text (--source-root DIR allows the "
                      "files below DIR)")
        if self.missing:
            self.warn(f"{_some(self.missing)}: source file not found; their lines show "
                      "without text (--source-root DIR looks for them below DIR)")


def _some(paths: list[str]) -> str:
    more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""
    return f"{paths[0]}{more}"
