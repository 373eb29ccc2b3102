"""Demangling with compiler clone suffixes kept, as perf and c++filt show them."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from qtools.viewer.naming import demangle as dm

BASES = [
    "_Z1fi",
    "_ZNSt6vectorIiSaIiEE17_M_realloc_insertIJRKiEEEvN9__gnu_cxx17__normal_iteratorIPiS1_EEDpOT_",
    "_ZNSt8_Rb_treeINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt4pairIKS5_St6vectorI"
    "S5_SaIS5_EEESt10_Select1stISB_ESt4lessIS5_ESaISB_EE8_M_eraseEPSt13_Rb_tree_nodeISB_E",
]
SUFFIXES = [".isra.0", ".constprop.0", ".part.0", ".cold", ".constprop.0.isra.0",
            ".part.3.cold", ".lto_priv.0"]


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="c++filt is not installed")
@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("base", BASES)
def test_clone_suffixes_demangle_as_cxxfilt_shows_them(base, suffix):
    name = base + suffix
    expected = subprocess.run(["c++filt", name], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert "[clone " in expected
    assert dm.demangle(name) == expected


def test_a_demangler_that_refuses_clones_still_gets_the_base(monkeypatch):
    real = dm._cxx_demangler()
    assert real is not None

    def strict(name: str) -> str:  # like a demangler without clone support
        if "." in name:
            raise ValueError(name)
        return real(name)

    monkeypatch.setattr(dm, "_cxx", [strict])
    dm.demangle.cache_clear()
    try:
        assert dm.demangle("_Z1fi.constprop.0.isra.0") == \
            "f(int) [clone .constprop.0] [clone .isra.0]"
        assert dm.demangle("_Z1fi.isra.0@plt") == "f(int) [clone .isra.0]@plt"
        assert dm.demangle("_Z1fi.notaclone") == "_Z1fi.notaclone"
    finally:
        dm.demangle.cache_clear()
