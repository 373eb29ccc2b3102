"""C++ and Rust symbol demangling, falling back to the raw name.

C++ goes through ``cxxfilt`` (libstdc++'s own ``__cxa_demangle`` over
ctypes), Rust through ``rust-demangler`` (legacy ``_ZN...17h<hash>E`` and v0
``_R`` manglings). Both are imported on first need: most profiles of C
programs never pay for loading libstdc++.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable

# A legacy Rust symbol is an Itanium-style _ZN path ending in a 17-character
# hash element; rust-demangler would also accept plain C++ _ZN names, so
# tell them apart before choosing a demangler.
_RUST_LEGACY = re.compile(r"_ZN.*17h[0-9a-f]{16}E(\.llvm\.\d+)?\Z")
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}\Z")
_SUFFIX = re.compile(r"(@plt|@@?[A-Za-z0-9_.]+)\Z")
# Compiler clones (GCC's .isra.N, .constprop.N, .part.N, .cold, LTO's
# .lto_priv.N, LLVM's .llvm.N): perf shows them as "f(int) [clone .isra.0]".
_CLONE = re.compile(r"\.(?:isra|constprop|part|cold|lto_priv|localalias|llvm|clone|"
                    r"specialized|str)(?:\.\d+)*\Z")


def _load_cxx() -> Callable[[str], str] | None:
    try:
        import cxxfilt
        cxxfilt.demangle("_Z1fv")  # fails here if libstdc++ cannot be loaded
    except Exception:  # any failure to load means: no C++ demangling, raw names
        return None
    return cxxfilt.demangle  # type: ignore[no-any-return]


def _load_rust() -> Callable[[str], str] | None:
    try:
        import rust_demangler
    except Exception:
        return None
    return rust_demangler.demangle  # type: ignore[no-any-return]


_cxx: list[Callable[[str], str] | None] = []
_rust: list[Callable[[str], str] | None] = []


def _cxx_demangler() -> Callable[[str], str] | None:
    if not _cxx:
        _cxx.append(_load_cxx())
    return _cxx[0]


def _rust_demangler() -> Callable[[str], str] | None:
    if not _rust:
        _rust.append(_load_rust())
    return _rust[0]


@lru_cache(maxsize=1 << 16)
def demangle(name: str) -> str:
    """The readable form of a symbol name; the name itself when not mangled
    or when demangling fails. A ``@plt`` or version suffix is kept."""
    suffix_match = _SUFFIX.search(name)
    suffix = suffix_match.group(0) if suffix_match else ""
    core = name[: len(name) - len(suffix)] if suffix else name
    if not core.startswith(("_Z", "_R", "__Z")):
        return name
    text = _demangle_core(core)
    return name if text is None else text + suffix


def _demangle_core(core: str) -> str | None:
    if core.startswith("_R") or _RUST_LEGACY.match(core):
        rust = _rust_demangler()
        if rust is not None:
            try:
                return _RUST_HASH.sub("", rust(core))
            except Exception:  # a malformed name is shown as it is
                pass
    if core.startswith("__Z"):  # Mach-O style extra underscore, seen in JIT maps
        core = core[1:]
    if core.startswith("_Z"):
        cxx = _cxx_demangler()
        if cxx is not None:
            text = _cxx_or_none(cxx, core)
            return text if text is not None else _cxx_clone(cxx, core)
    return None


def _cxx_or_none(cxx: Callable[[str], str], core: str) -> str | None:
    try:
        text = cxx(core)
    except Exception:
        return None
    return text if text and text != core else None


def _cxx_clone(cxx: Callable[[str], str], core: str) -> str | None:
    """Where the demangler refuses a name with clone suffixes, demangle the
    name without them and add them back the way c++filt and perf show them."""
    clones: list[str] = []
    while (m := _CLONE.search(core)) and m.start() > 0:
        clones.insert(0, m.group(0))
        core = core[: m.start()]
    if not clones:
        return None
    text = _cxx_or_none(cxx, core)
    if text is None:
        return None
    return text + "".join(f" [clone {c}]" for c in clones)
