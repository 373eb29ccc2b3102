"""S-expressions of `.info` files, as plain Python data.

The reader is one tokenizer that reads the text once and builds each list
as it closes: no recursion, so no input can exhaust the stack, and every
error names its line. It reads what sexpdata, its predecessor, read, with the
same values (docs/q-format.md, section 3), but refuses a backslash outside a
string and a string between forms, which sexpdata took in odd ways.

Mapping to Python:

- strings -> ``str``; integers, including ``#x1f`` hex -> ``int``; floats
  -> ``float``; other symbols -> ``Symbol``;
- an alist, a non-empty list of dotted pairs ``(key . value)`` with symbol
  keys -> ``dict`` (insertion-ordered);
- any other list -> ``list``;
- a quote (``'x``) is syntax only: it is dropped on reading and written back
  where the original style has it (before list values of top-level forms).

A dotted pair with more than one element after the dot, the "loose" form
``(q:maps . (a) (b))`` of the original example, reads as the list of those
elements, the same as ``(q:maps . ((a) (b)))``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .errors import QFormatError

MAX_DEPTH = 64
"""Deepest nesting accepted. Real `.info` files nest four or five levels."""

MAX_INFO_BYTES = 64 << 20

INT_LIMIT = 1 << 64
"""Integers are read and written within -INT_LIMIT < n < INT_LIMIT: every
integer the format holds (an address, a size, a count, an id) fits 64
bits, and a larger one is no value but a way to make a reader build a
number of megabytes (which Python then refuses to print)."""


class Symbol(str):
    """A bare symbol used as a value (``t``, ``nil``, ``q:whatever``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


class Form:
    """One top-level form ``(TAG ARG...)``; ``line`` is where it starts
    (not compared: the same form read from another place is equal)."""

    __slots__ = ("tag", "args", "line")

    def __init__(self, tag: str, args: list[Any], line: int | None = None) -> None:
        self.tag = tag
        self.args = args
        self.line = line

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Form:
            return NotImplemented
        return (self.tag, self.args) == (other.tag, other.args)  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Form(tag={self.tag!r}, args={self.args!r}, line={self.line!r})"

    @property
    def value(self) -> Any:
        """The single argument of a ``(q:TAG VALUE)`` form."""
        if len(self.args) != 1:
            raise QFormatError(f"form ({self.tag} ...) takes one value, has {len(self.args)}",
                               line=self.line)
        return self.args[0]


_HEX = re.compile(r"#x([+-]?)([0-9a-fA-F]+)\Z")
_SYMBOL_TEXT = re.compile(r"[A-Za-z_:*+!?<>=/&%$~^-][A-Za-z0-9_:*+!?<>=/&%$~^.#-]*\Z")
_NUMBERLIKE = re.compile(r"[+-]?(\d|\.\d)")


# ---------------------------------------------------------------- reading

# One token at a time, in one pass over the text: each list is built as it
# closes, so a file is read once (no separate scan for balance) and without
# recursion, however deep the input (depth is checked as it grows).
_WHITESPACE = " \t\n\r\x0b\x0c"  # what separates atoms; other spaces are atoms' text
_ATOM, _OPEN, _CLOSE, _STRING, _QUOTE, _COMMENT, _OTHER = range(1, 8)
_TOKEN = re.compile(r"""[%s]*(?:
    ([^%s()\[\]{}";\\'][^%s()\[\]{}";\\]*)  # atom
  | (\()
  | (\))
  | "([^"\\]*(?:\\.[^"\\]*)*)"          # string, escapes kept
  | (')
  | (;[^\n]*)
  | ([^%s]))                          # anything else is an error
""" % ((_WHITESPACE,) * 4), re.VERBOSE | re.DOTALL)
_BETWEEN = re.compile(r"(?:\s+|;[^\n]*)*")
_SKIP = re.compile(r'[();"\[\]{}\\]')
_STRING_END = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_ESCAPED = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_PLAIN_SYMBOL = frozenset("abcdefghjklmopqrstuvwxyzABCDEFGHJKLMOPQRSTUVWXYZ:_")
"""First characters of an atom that cannot be a number: not a digit, sign,
dot or space, nor the i and n of inf and nan."""


class _Bad:
    """A value that is an error, raised when its form is complete, so that
    a syntax error later in the same form is the one reported."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class _Pair:
    """``(KEY . VALUE...)``: an alist's element, an error anywhere else."""

    __slots__ = ("key", "rest")

    def __init__(self, key: str, rest: list[Any]) -> None:
        self.key = key
        self.rest = rest


def _error(value: Any) -> _Bad | None:
    if type(value) is _Bad:
        return value
    if type(value) is _Pair:
        return _Bad(f"dotted pair ({value.key} . ...) outside an alist")
    return None


def _list_value(items: list[Any]) -> Any:
    """A closed list: an alist if every element is a pair, else a list; or
    its first error, in the order the elements are written."""
    if items and type(items[0]) is _Pair and all(type(e) is _Pair for e in items):
        alist: dict[str, Any] = {}
        for pair in items:
            if pair.key in alist:
                return _Bad(f"duplicate key {pair.key}")
            for e in pair.rest:
                bad = _error(e)
                if bad is not None:
                    return bad
            alist[pair.key] = pair.rest[0] if len(pair.rest) == 1 else pair.rest
        return alist
    for e in items:
        if type(e) is _Bad or type(e) is _Pair:
            return _error(e)
    return items


def _number(s: str) -> int | float | None:
    """What Python reads as a number (``+4``, ``1_0``, ``.5``, ``nan``), as
    the original reader did; None for anything else."""
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return None


def _atom(s: str) -> Any:
    """The value of an atom, or _Bad."""
    if s[0] in _PLAIN_SYMBOL:
        return Symbol(s)
    if s[0] == "#":
        m = _HEX.match(s)
        if not m:
            return _Bad(f"bad hex integer {s[:40]!r}")
        digits = m.group(2).lstrip("0") or "0"
        if len(digits) > 16:  # checked before a number of that size is made
            return _Bad(_too_large(s))
        v = int(digits, 16)
        return -v if m.group(1) == "-" else v
    n = _number(s)
    if isinstance(n, float) and not math.isfinite(n):
        return _Bad("number out of range")
    if isinstance(n, int) and not -INT_LIMIT < n < INT_LIMIT:
        return _Bad(_too_large(s))
    if n is not None:
        return n
    if s == ".":
        return _Bad("misplaced '.'")  # unless it makes its list a pair
    if _NUMBERLIKE.match(s):
        return _Bad(f"bad number {s!r}")
    return Symbol(s)


def _too_large(s: str) -> str:
    shown = s if len(s) <= 24 else f"{s[:20]}... ({len(s)} characters)"
    return f"integer out of range (beyond 64 bits): {shown}"


def _string(body: str) -> str:
    if "\\" not in body:
        return body
    return _ESCAPE.sub(lambda m: _ESCAPED.get(m.group(1), m.group()), body)


class _List:
    """A list being read: its elements so far, and what tells a form's tag
    or a dotted pair (the text of its first element when that is an
    unquoted symbol; whether its second is an unquoted dot)."""

    __slots__ = ("items", "key", "dot", "quoted", "line")

    def __init__(self, quoted: bool, line: int) -> None:
        self.items: list[Any] = []
        self.key: str | None = None
        self.dot = False
        self.quoted = quoted
        self.line = line


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _read(text: str, skip: frozenset[str]) -> list[Form]:
    """The forms of ``text`` (see parse_forms)."""
    forms: list[Form] = []
    line, line_pos, pos, n = 1, 0, 0, len(text)
    between = _BETWEEN.match
    while True:
        gap = between(text, pos)  # matches, if only the empty string
        pos = gap.end() if gap else pos
        if pos >= n:
            return forms
        c = text[pos]
        if c == "(":
            line += text.count("\n", line_pos, pos)
            line_pos = pos
            pos, form = _read_form(text, pos + 1, line, skip)
            if form is not None:
                forms.append(form)
            continue
        if c == ")":
            raise QFormatError("unbalanced ')'", line=_line(text, pos))
        where = "" if c in "[]{}" else " outside a form"
        raise QFormatError(f"unexpected {c!r}{where}", line=_line(text, pos))


def _read_form(text: str, pos: int, line: int, skip: frozenset[str]) -> tuple[int, Form | None]:
    """Read the form whose ``(`` is just before ``pos``; return the position
    after it and the form (None if its tag is in ``skip``)."""
    stack = [_List(False, line)]
    quote = False  # a quote waits for the next element
    error: str | None = None  # raised when the form is whole: a later syntax error goes first
    for m in _TOKEN.finditer(text, pos):
        kind = m.lastindex
        top = stack[-1]
        if kind == _ATOM:
            atom = m.group(_ATOM)
            items = top.items
            if not quote:
                if not items and _is_symbol(atom):
                    top.key = atom
                    if len(stack) == 1 and atom in skip:
                        return _skip_form(text, m.end(), line), None
                elif len(items) == 1 and atom == ".":
                    top.dot = True
            items.append(_atom(atom))
            quote = False
        elif kind == _OPEN:
            if len(stack) >= MAX_DEPTH:
                raise QFormatError(f"nesting deeper than {MAX_DEPTH} levels",
                                   line=_line(text, m.start(_OPEN)))
            stack.append(_List(quote, 0))
            quote = False
        elif kind == _CLOSE:
            stack.pop()
            if quote and error is None:
                error = "a quote (') with nothing after it"
            quote = False
            if not stack:
                return m.end(), _form(top, error)
            items = top.items
            value: Any
            if top.dot and top.key is not None and len(items) >= 3:
                value = _Pair(top.key, items[2:])
                if top.quoted:  # '(a . b) is a quoted value, never an alist's pair
                    value = _error(value)
            else:
                value = _list_value(items)
            stack[-1].items.append(value)
        elif kind == _STRING:
            top.items.append(_string(m.group(_STRING)))
            quote = False
        elif kind == _QUOTE:
            quote = True
        elif kind == _OTHER:
            c = m.group(_OTHER)
            where = m.start(_OTHER)
            if c == '"':
                raise QFormatError("unterminated string", line=_line(text, where))
            raise QFormatError(f"unexpected {c!r}", line=_line(text, where))
    raise QFormatError("unclosed '(' (file truncated?)", line=line)


def _skip_form(text: str, pos: int, line: int) -> int:
    """The position after the form ``pos`` is in (at depth 1), checked for
    balance, depth, strings and stray characters only: jumps from one
    special character to the next, for a listing that skips thousands of
    q:object forms."""
    depth = 1
    search = _SKIP.search
    while True:
        m = search(text, pos)
        if m is None:
            raise QFormatError("unclosed '(' (file truncated?)", line=line)
        c = m.group()
        pos = m.end()
        if c == "(":
            depth += 1
            if depth > MAX_DEPTH:
                raise QFormatError(f"nesting deeper than {MAX_DEPTH} levels",
                                   line=_line(text, m.start()))
        elif c == ")":
            depth -= 1
            if depth == 0:
                return pos
        elif c == ";":
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end
        elif c == '"':
            sm = _STRING_END.match(text, pos)
            if sm is None:
                raise QFormatError("unterminated string", line=_line(text, m.start()))
            pos = sm.end()
        else:
            raise QFormatError(f"unexpected {c!r}", line=_line(text, m.start()))


def _is_symbol(atom: str) -> bool:
    """True if ``atom`` is a symbol (a key or a tag may be one): whatever is no number."""
    return atom[0] in _PLAIN_SYMBOL or atom[0] == "#" or _number(atom) is None


def _form(top: _List, syntax_error: str | None) -> Form:
    line = top.line
    if syntax_error is not None:
        raise QFormatError(syntax_error, line=line)
    if not top.items:
        raise QFormatError("empty form", line=line)
    tag = top.key
    if tag is None or tag.startswith("#") or tag == ".":
        raise QFormatError("a form must start with a symbol such as q:info", line=line)
    args = top.items[1:]
    for a in args:
        bad = _error(a)
        if bad is not None:
            raise QFormatError(bad.message, line=line)
    return Form(tag, args, line)


def parse_forms(data: str | bytes, path: str | None = None,
                skip: frozenset[str] = frozenset(), max_bytes: int = MAX_INFO_BYTES) -> list[Form]:
    """Parse the text of an `.info` file into its top-level forms; forms
    tagged with a name in ``skip`` are only checked for balance."""
    try:
        if isinstance(data, bytes):
            if len(data) > max_bytes:
                raise QFormatError(f"larger than {max_bytes} bytes")
            text = _decode(data)
        else:
            text = data
        return _read(text, skip)
    except QFormatError as e:
        raise e.located(path) from None


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise QFormatError("not valid UTF-8", line=line) from None


# ---------------------------------------------------------------- writing

def _writable_symbol(s: str) -> bool:
    """True if ``s`` reads back as the same symbol (not a number, not syntax)."""
    if not _SYMBOL_TEXT.match(s) or _NUMBERLIKE.match(s):
        return False
    try:
        float(s)  # "nan", "inf", ... read as floats
    except ValueError:
        return True
    return False


def _dump_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _hex(v: int) -> str:
    if not -INT_LIMIT < v < INT_LIMIT:
        raise ValueError(f"integer beyond 64 bits: {v:#x}")
    return f"#x{v:x}" if v >= 0 else f"#x-{-v:x}"


def dump_value(v: Any, indent: int = 0, hex_keys: frozenset[str] = frozenset()) -> str:
    """Write one value. Alists are broken over lines at ``indent``."""
    if isinstance(v, Symbol):
        if not _writable_symbol(v):
            raise ValueError(f"not writable as a symbol: {v!r}")
        return str(v)
    if isinstance(v, str):
        return _dump_string(v)
    if isinstance(v, bool) or v is None:
        raise TypeError(f"no s-expression for {v!r}")
    if isinstance(v, int):
        if not -INT_LIMIT < v < INT_LIMIT:
            raise ValueError(f"integer beyond 64 bits: {v:#x}")
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"no s-expression for {v!r}")
        return repr(v)
    if isinstance(v, dict):
        if not v:
            raise ValueError("an empty alist cannot be told from an empty list")
        sep = "\n" + " " * (indent + 1) if indent >= 0 else " "
        parts = []
        for key, val in v.items():
            if not isinstance(key, str) or not _writable_symbol(key):
                raise ValueError(f"not writable as a key: {key!r}")
            if key in hex_keys and _is_int(val):
                text = _hex(val)
            elif key in hex_keys and isinstance(val, list) and val and all(map(_is_int, val)):
                text = "(" + " ".join(map(_hex, val)) + ")"
            elif indent >= 0 and isinstance(val, list) and len(val) > 1 \
                    and all(isinstance(e, dict) for e in val):
                # A list of alists (an object's maps): one element a line.
                column = indent + 1 + len(f"({key} . (")
                text = "(" + ("\n" + " " * column).join(
                    dump_value(e, -1, hex_keys) for e in val) + ")"
            else:
                text = dump_value(val, -1, hex_keys)
            parts.append(f"({key} . {text})")
        return "(" + sep.join(parts) + ")"
    if isinstance(v, (list, tuple)):
        return "(" + " ".join(dump_value(e, -1, hex_keys) for e in v) + ")"
    raise TypeError(f"no s-expression for {type(v).__name__}")


def dump_form(form: Form, hex_keys: frozenset[str] = frozenset()) -> str:
    """Write a top-level form in the original's style: list values quoted."""
    head = f"({form.tag} "
    parts = []
    for a in form.args:
        quote = "'" if isinstance(a, (dict, list, tuple)) else ""
        parts.append(quote + dump_value(a, len(head) + len(quote) if isinstance(a, dict) else -1,
                                        hex_keys))
    return head + " ".join(parts) + ")"


def dump_forms(forms: list[Form], hex_keys: frozenset[str] = frozenset()) -> str:
    return "".join(dump_form(f, hex_keys) + "\n" for f in forms)
