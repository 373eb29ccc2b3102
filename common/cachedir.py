"""Where q-tools keeps what it may throw away: parsed symbol tables, files
fetched from debuginfod servers, copies of kallsyms. Each is an
optimisation only; a tool that cannot use its cache works without it."""

from __future__ import annotations

import os
import stat


def cache_dir(kind: str) -> str | None:
    """The directory for caches of ``kind``: ``$Q_CACHE_DIR/KIND``, else
    ``$XDG_CACHE_HOME/q-tools/KIND``, else ``~/.cache/q-tools/KIND``; None
    when ``Q_CACHE_DIR`` is set empty (caches off) or no absolute base is
    known."""
    explicit = os.environ.get("Q_CACHE_DIR")
    if explicit is not None:
        return os.path.join(explicit, kind) if explicit else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(base):
        return None
    return os.path.join(base, "q-tools", kind)


def open_cache_dir(path: str, create: bool, private: bool = True) -> int | None:
    """A descriptor of the directory ``path``, reached one component at a
    time; None where that fails, or where the directory is not this user's
    (with ``private``, also where anyone else may write in it). A symlink on
    the way is followed only if it is root's or this user's (``/home``
    pointing elsewhere, a user's own link in a run as that user), never
    another user's: a run as root must
    not be led anywhere by a link in someone's home (``sudo -E`` keeps
    HOME). With ``create`` the missing components are made (mode 0700),
    but only inside a directory this user owns, so a root run leaves no
    directories in another user's home."""
    parts = [p for p in os.path.normpath(os.path.abspath(path)).split("/") if p]
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    trusted = {0, os.geteuid()}
    try:
        fd = os.open("/", flags)
    except OSError:
        return None
    for part in parts:
        try:
            try:
                sub = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create or os.fstat(fd).st_uid != os.geteuid():
                    raise
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: opened below like any other
                sub = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
            except NotADirectoryError:
                st = os.lstat(part, dir_fd=fd)
                if not stat.S_ISLNK(st.st_mode) or st.st_uid not in trusted:
                    raise
                sub = os.open(part, flags, dir_fd=fd)  # a trusted link: followed
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = sub
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or (private and st.st_mode & 0o022):
        os.close(fd)
        return None
    return fd


def private_dir(path: str) -> bool:
    """Is ``path`` a directory (made now if missing, ``open_cache_dir``)
    that only this user, and root, can change, all the way up? A cache
    used by path (files handed to other code by name) must be: another
    user who may rename a parent could swap what a later path leads to."""
    fd = open_cache_dir(path, create=True)
    if fd is None:
        return False
    try:
        here = os.path.realpath(path)
        while True:
            parent = os.path.dirname(here)
            if parent == here:
                return True
            st = os.stat(parent)
            if st.st_uid not in (0, os.geteuid()) or \
                    (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
                return False  # someone else could rename what lies below
            here = parent
    except OSError:
        return False
    finally:
        os.close(fd)
