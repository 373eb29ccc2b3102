"""The one-pass `.info` reader against an independent s-expression reader.

sexpdata (a test dependency only) reads the plain subset of the syntax the
same way any Lisp reader does: lists, decimal numbers, strings with \\" and
\\\\ escapes, symbols, quotes. On that subset qformat.sexp must agree with it
exactly, form by form; q-tools' own extensions (#x hex, alists of dotted
pairs, limits) are tested in test_info.py.
"""

from __future__ import annotations

import math
from typing import Any

import sexpdata
from hypothesis import given, settings
from hypothesis import strategies as st

from qtools.qformat.sexp import Symbol, parse_forms

SYMBOLS = st.from_regex(r"[a-z][a-z0-9:_-]{0,8}", fullmatch=True)
STRINGS = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64).filter(
    lambda f: f != 0.0 or math.copysign(1, f) > 0)


def _text(x: Any) -> str:
    if isinstance(x, tuple):  # a quoted value
        return "'" + _text(x[0])
    if isinstance(x, list):
        return "(" + " ".join(_text(e) for e in x) + ")"
    if isinstance(x, Symbol):
        return str(x)
    if isinstance(x, str):
        return '"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(x)


ATOMS = st.one_of(st.integers(-2**64 + 1, 2**64 - 1), FLOATS, STRINGS, SYMBOLS.map(Symbol))
VALUES = st.recursive(ATOMS, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.lists(inner, max_size=5).map(lambda v: (v,))),
    max_leaves=30)
FORMS = st.lists(st.tuples(SYMBOLS, st.lists(VALUES, max_size=4)), min_size=1, max_size=4)


def _ours(v: Any) -> Any:
    if isinstance(v, list):
        return [_ours(e) for e in v]
    if isinstance(v, Symbol):
        return ("symbol", str(v))
    return v


def _theirs(v: Any) -> Any:
    if isinstance(v, sexpdata.Quoted):
        return _theirs(v.x)
    if isinstance(v, list):
        return [_theirs(e) for e in v]
    if isinstance(v, sexpdata.Symbol):
        return ("symbol", str(v))
    return v


@settings(max_examples=300)
@given(FORMS)
def test_the_reader_agrees_with_sexpdata_on_the_plain_syntax(forms):
    text = "\n".join("(" + " ".join([tag, *(_text(a) for a in args)]) + ")"
                     for tag, args in forms)
    ours = parse_forms(text)
    theirs = [sexpdata.loads(line, nil=None, true=None) for line in text.split("\n")]
    assert [f.tag for f in ours] == [str(t[0]) for t in theirs]
    assert [_ours(f.args) for f in ours] == [_theirs(t[1:]) for t in theirs]
