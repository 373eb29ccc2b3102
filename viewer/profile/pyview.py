"""The Python view (``q-view --python``): Python frames only, as py-spy shows them.

CPython names the code it lets native profilers see ``py::NAME:FILE`` (perf
maps of ``-X perf``, jitdumps of ``-X perf_jit``). In this view a stack keeps
its Python frames alone, shown as ``NAME (FILE)``; the native and kernel
frames above the innermost Python frame fold into it (time in
``_PyObject_Free`` under ``py::f4`` is ``f4``'s self time), and those
between two Python frames (the interpreter's own) disappear. A stack without
any Python frame (start-up, other threads in C) becomes one frame,
``NOT_PYTHON``, so the totals stay those of the mixed view.
"""

from __future__ import annotations

from ..model.frames import Frame

PY_PREFIX = "py::"
PYTHON_OBJECT = "[python]"
NOT_PYTHON = Frame("(no Python frame)", "[native]", False)


def is_python(name: str) -> bool:
    return name.startswith(PY_PREFIX)


def display_name(name: str) -> str:
    """``py::NAME:FILE`` as ``NAME (FILE)`` (a qualified name has no colon)."""
    func, sep, file = name[len(PY_PREFIX):].partition(":")
    return f"{func} ({file})" if sep else func
