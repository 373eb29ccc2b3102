"""Where q-tools keeps what it may throw away: parsed symbol tables, files
fetched from debuginfod servers, copies of kallsyms. Each is an
optimisation only; a tool that cannot use its cache works without it."""

from __future__ import annotations

import os


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


def open_cache_dir(path: str, create: bool) -> int | None:
    """A descriptor of the directory ``path``, reached one component at a
    time without following a symlink; None where that fails. With
    ``create`` the missing components are made (mode 0700), but only inside
    a directory this user owns: a run as root keeps no cache in another
    user's home (``sudo -E`` keeps HOME), where it would leave directories
    that user cannot write, and nothing reaches a directory through a link
    that user could point anywhere. Whether the directory itself is fit
    to trust is the caller's to check, on the descriptor."""
    parts = [p for p in os.path.normpath(os.path.abspath(path)).split("/") if p]
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open("/", flags)
    except OSError:
        return None
    for part in parts:
        try:
            try:
                sub = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create or os.fstat(fd).st_uid != os.geteuid():
                    raise
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile: opened below like any other
                sub = os.open(part, flags, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
        os.close(fd)
        fd = sub
    return fd
