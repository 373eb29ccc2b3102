"""Errors that say what to do next: where the task sets are, which names
and versions exist.

Looking around is bounded (a few dozen subdirectories, a few thousand
entries each): a hint must never cost more than the failed command.
"""

from __future__ import annotations

import os
import shlex
from typing import Iterable

from ..model.viewerrors import ViewError

SUBDIRS_LOOKED_AT = 64
ENTRIES_LOOKED_AT = 5000
NAMES_LISTED = 8
COLLECT = "sudo q-syscollect -t 20"  # the README's first example


def holds_sets(directory: str) -> bool:
    """Does ``directory`` hold an `.info#N` among its first entries?"""
    try:
        with os.scandir(directory) as it:
            for i, entry in enumerate(it):
                if i >= ENTRIES_LOOKED_AT:
                    return False
                if ".info#" in entry.name and not entry.name.startswith("."):
                    return True
    except OSError:
        pass
    return False


def sets_below(directory: str) -> str | None:
    """A subdirectory of ``directory`` that holds task sets (``.q`` first)."""
    names = [".q"]
    try:
        with os.scandir(directory) as it:
            for i, entry in enumerate(it):
                if i >= ENTRIES_LOOKED_AT or len(names) > SUBDIRS_LOOKED_AT:
                    break
                if entry.name != ".q" and entry.is_dir():
                    names.append(entry.name)
    except OSError:
        return None
    for name in names[:1] + sorted(names[1:]):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and holds_sets(path):
            return os.path.normpath(path)
    return None


def _command(path: str) -> str:
    return f"q-view {shlex.quote(path)}"


def no_sets(directory: str) -> ViewError:
    """A directory without task sets; says where some are, if nearby."""
    below = sets_below(directory)
    if below:
        return ViewError(f"no task sets here, but {below} has: {_command(below)}", directory)
    return ViewError("no task sets (*.info#N) in this directory", directory)


def no_directory(directory: str, given_by: str) -> ViewError:
    """The directory to show does not exist. ``given_by``: "-d", "Q_DIR" or ""."""
    if given_by == "-d":
        return ViewError(f"no such directory (collect into it with: {COLLECT} -d "
                         f"{shlex.quote(directory)})", directory)
    if given_by == "Q_DIR":
        return ViewError(f"$Q_DIR names {directory}, which is not a directory; "
                         "set it to a .q directory, or name one with -d DIR")
    here = os.getcwd()
    if holds_sets("."):
        return ViewError(f"no .q directory in {here}, but this directory holds task sets: "
                         "q-view .")
    below = sets_below(".")
    where = f"; {below} has task sets: {_command(below)}" if below else ""
    return ViewError(f"no .q directory in {here}: name one with -d DIR or $Q_DIR, or "
                     f"collect one first: {COLLECT}{where}")


def nearest(word: str, names: Iterable[str]) -> str:
    """`` (nearest: a, b)``, or the names there are when none is near."""
    known = sorted({n for n in names if n})
    if not known or word in known:  # the name exists: something else excluded it
        return ""
    import difflib  # for a name not found only: 2 ms of start-up
    close = difflib.get_close_matches(word, known, n=NAMES_LISTED, cutoff=0.5)
    if close:
        return f"; nearest: {', '.join(close)}"
    shown = ", ".join(known[:NAMES_LISTED])
    more = f" and {len(known) - NAMES_LISTED} more" if len(known) > NAMES_LISTED else ""
    return f"; the names there: {shown}{more}"


def versions_text(versions: list[int]) -> str:
    """``#0-#3, #5``: consecutive versions folded; only the latest spans of many."""
    spans: list[list[int]] = []
    for v in sorted(set(versions)):
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    text = ", ".join(f"#{a}" if a == b else f"#{a}-#{b}" for a, b in spans[-NAMES_LISTED:])
    return ("..., " if len(spans) > NAMES_LISTED else "") + text


def missing_version(path: str, version: int, versions: list[int]) -> ViewError:
    base = os.path.basename(path).rsplit("#", 1)[0]
    if not versions:
        return ViewError(f"no such file, nor any version of {base}", path)
    return ViewError(f"no version #{version} of {base}; versions here: "
                     f"{versions_text(versions)}", path)
