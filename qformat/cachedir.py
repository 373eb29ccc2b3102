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
