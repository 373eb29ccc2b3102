"""Files of this machine that an archive names: where q-view may read them.

An archive's line tables name source files, and its ``q:path`` and
``.gnu_debuglink`` name places to look for debug files. Whoever made the
archive chose those names, so a file is read on their word only below a
directory the user allowed (``inside``, ``open_within``), with symlinks
resolved before the check and the opened descriptor's own path checked
after it (``/proc/self/fd``: a directory swapped for a symlink in between
is caught), or where the file that names them is one of this machine's
that only the user or root can change (``same_file_here``): its names are
then no more the archive's than the user's own files are.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import stat

from qtools.qformat import open_regular

WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
CHUNK = 1 << 20


class OutsideRoots(OSError):
    """A path that leads (symlinks resolved) outside every allowed root."""

    def __init__(self, path: str, real: str) -> None:
        super().__init__(f"{path}: leads outside the allowed directories")
        self.path = path
        self.real = real  # where it leads


def inside(real: str, root: str) -> bool:
    """Whether the resolved path ``real`` is ``root`` or below it (both
    absolute and resolved: no ``..``, no symlink left to follow)."""
    return real == root or real.startswith(root.rstrip("/") + "/")


def resolved_roots(roots: list[str]) -> list[str]:
    """The allowed roots, symlinks resolved, each once, in order."""
    return list(dict.fromkeys(os.path.realpath(r) for r in roots))


def confined(path: str, root: str) -> str | None:
    """``path`` resolved, if it lies below ``root`` (resolved too); else None."""
    real = os.path.realpath(path)
    return real if inside(real, os.path.realpath(root)) else None


def open_within(path: str, roots: list[str]) -> int:
    """A read-only fd of the regular file ``path`` (relative: to the current
    directory), which must lie below one of ``roots`` (resolved) once its
    symlinks are resolved; ``OutsideRoots`` otherwise, ``OSError`` where it
    cannot be opened or is no regular file."""
    real = os.path.realpath(path)
    root = next((r for r in roots if inside(real, r)), None)
    if root is None:
        raise OutsideRoots(path, real)
    fd = open_regular(real, follow=False)
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: the resolved path was checked, not the fd
        opened = real
    if not inside(opened, root):
        os.close(fd)
        raise OutsideRoots(path, opened)
    return fd


def changeable_only_by_owner(st: os.stat_result) -> bool:
    """Whether only the user running q-view or root can change the file
    (owner; no group or other write bit, which with a POSIX ACL is its
    mask, so no named entry may write either)."""
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & WRITABLE_BY_OTHERS


def same_file_here(path: str | None, size: int, digest: str, limit: int) -> bool:
    """Whether ``path`` is, on this machine, a regular file that only the
    user or root can change, of ``size`` bytes (at most ``limit``) whose
    SHA-256 starts with ``digest``: the archive's copy is then that file,
    and what the copy names is what the user's own file names."""
    if not path or not os.path.isabs(path) or size > limit or not digest:
        return False
    try:
        with os.fdopen(open_regular(path), "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size != size or not changeable_only_by_owner(st):
                return False
            h = hashlib.sha256()
            left = size + 1  # a file that grew since is not the copy
            while left > 0 and (chunk := f.read(min(left, CHUNK))):
                h.update(chunk)
                left -= len(chunk)
            return left == 1 and h.hexdigest().startswith(digest)
    except OSError:
        return False


def only_owner_can_change(path: str) -> bool:
    """``changeable_only_by_owner`` of the file at ``path`` (symlinks followed)."""
    try:
        return changeable_only_by_owner(os.stat(path))
    except OSError:
        return False


def homes() -> list[str]:
    """The user's home directories: ``$HOME`` and the password entry's."""
    out = [os.environ.get("HOME", "")]
    try:
        out.append(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:
        pass
    return [os.path.realpath(h) for h in out if h and os.path.isabs(h)]


def default_root(cwd: str, home_dirs: list[str]) -> str | None:
    """The current directory as an allowed root, unless it is ``/`` or a home
    directory or above one: that would allow every file of the user's (a
    key in ``~/.ssh``) to any archive."""
    real = os.path.realpath(cwd)
    if real == "/" or any(inside(h, real) for h in home_dirs):
        return None
    return real
