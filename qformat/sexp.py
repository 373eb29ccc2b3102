"""S-expressions of `.info` files, as plain Python data.

The reader is built on sexpdata; around it sits a small scanner that splits
the text into top-level forms, so every error can name its line, and that
refuses what sexpdata would choke on (unbalanced parentheses, runaway
nesting) before sexpdata sees it.

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
from dataclasses import dataclass, field
from typing import Any, Iterator

import sexpdata

from .errors import QFormatError

MAX_DEPTH = 64
"""Deepest nesting accepted. Real `.info` files nest four or five levels."""

MAX_INFO_BYTES = 64 << 20


class Symbol(str):
    """A bare symbol used as a value (``t``, ``nil``, ``q:whatever``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"


@dataclass
class Form:
    """One top-level form ``(TAG ARG...)``; ``line`` is where it starts."""

    tag: str
    args: list[Any]
    line: int | None = field(default=None, compare=False)

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

_SPECIAL = re.compile(r'[\n;"()\[\]{}]')
_IN_STRING = re.compile(r'["\\\n]')


def _scan_top_level(text: str) -> Iterator[tuple[int, int, int]]:
    """Yield (start, end, line) of each top-level parenthesised form.

    Checks balance, string termination and depth, raising QFormatError with
    the line of the offending character (or of the unclosed opening). Jumps
    from one special character to the next: a character-by-character loop
    was the largest cost of reading a directory of thousands of `.info`s.
    """
    depth = 0
    line = 1
    i = 0
    n = len(text)
    start = start_line = 0
    open_lines: list[int] = []
    search, in_string = _SPECIAL.search, _IN_STRING.search
    while True:
        m = search(text, i)
        j = m.start() if m else n
        if depth == 0 and j > i and not text[i:j].isspace():
            k = i
            while text[k].isspace():
                k += 1
            raise QFormatError(f"unexpected {text[k]!r} outside a form",
                               line=line + text.count("\n", i, k))
        if m is None:
            break
        c = text[j]
        i = j + 1
        if c == "\n":
            line += 1
        elif c == ";":
            k = text.find("\n", j)
            i = n if k < 0 else k
        elif c == '"':
            string_line = line
            while True:
                sm = in_string(text, i)
                if sm is None:
                    raise QFormatError("unterminated string", line=string_line)
                i = sm.end()
                ch = sm.group()
                if ch == '"':
                    break
                if ch == "\n":
                    line += 1
                else:  # a backslash escapes the next character, a newline too
                    if i < n and text[i] == "\n":
                        line += 1
                    i += 1
        elif c == "(":
            if depth == 0:
                start, start_line = j, line
            depth += 1
            if depth > MAX_DEPTH:
                raise QFormatError(f"nesting deeper than {MAX_DEPTH} levels", line=line)
            open_lines.append(line)
        elif c == ")":
            if depth == 0:
                raise QFormatError("unbalanced ')'", line=line)
            depth -= 1
            open_lines.pop()
            if depth == 0:
                yield start, j + 1, start_line
        else:
            raise QFormatError(f"unexpected {c!r}", line=line)
    if depth:
        raise QFormatError("unclosed '(' (file truncated?)", line=open_lines[0])


def _is_pair(x: Any) -> bool:
    return (isinstance(x, list) and len(x) >= 3 and isinstance(x[0], sexpdata.Symbol)
            and x[1] == sexpdata.Symbol("."))


def _convert(x: Any, line: int) -> Any:
    if isinstance(x, sexpdata.Quoted):
        return _convert(x.x, line)
    if isinstance(x, str) and not isinstance(x, sexpdata.Symbol):
        return str(x)
    if isinstance(x, bool) or x is None:
        raise QFormatError(f"unexpected value {x!r}", line=line)
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        if not math.isfinite(x):
            raise QFormatError("number out of range", line=line)
        return x
    if isinstance(x, sexpdata.Symbol):
        s = str(x)
        if s.startswith("#"):
            m = _HEX.match(s)
            if not m:
                raise QFormatError(f"bad hex integer {s!r}", line=line)
            v = int(m.group(2), 16)
            return -v if m.group(1) == "-" else v
        if s == ".":
            raise QFormatError("misplaced '.'", line=line)
        if _NUMBERLIKE.match(s):
            raise QFormatError(f"bad number {s!r}", line=line)
        return Symbol(s)
    if isinstance(x, list):
        if x and all(_is_pair(e) for e in x):
            alist: dict[str, Any] = {}
            for pair in x:
                key = str(pair[0])
                if key in alist:
                    raise QFormatError(f"duplicate key {key}", line=line)
                rest = [_convert(e, line) for e in pair[2:]]
                alist[key] = rest[0] if len(rest) == 1 else rest
            return alist
        if _is_pair(x):
            # A lone dotted pair that is not inside an alist: (key . value).
            raise QFormatError(f"dotted pair ({x[0]} . ...) outside an alist", line=line)
        return [_convert(e, line) for e in x]
    raise QFormatError(f"unexpected {type(x).__name__} in s-expression", line=line)


def _parse_one(source: str, line: int) -> Form:
    try:
        parsed = sexpdata.loads(source, nil=None, true=None)
    except RecursionError:
        raise QFormatError("nesting too deep", line=line) from None
    except Exception as e:  # sexpdata raises assorted types for bad syntax
        raise QFormatError(f"bad s-expression: {e}", line=line) from None
    if not isinstance(parsed, list) or not parsed:
        raise QFormatError("empty form", line=line)
    tag = parsed[0]
    if not isinstance(tag, sexpdata.Symbol) or str(tag).startswith("#") or str(tag) == ".":
        raise QFormatError("a form must start with a symbol such as q:info", line=line)
    return Form(str(tag), [_convert(a, line) for a in parsed[1:]], line)


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
        spans = _scan_top_level(text)
        if skip:
            spans = (span for span in spans if _tag_of(text, span[0]) not in skip)
        return [_parse_one(text[s:e], line) for s, e, line in spans]
    except QFormatError as e:
        raise e.located(path) from None


_TAG = re.compile(r"\(\s*([^\s()\"';]+)")


def _tag_of(text: str, start: int) -> str | None:
    m = _TAG.match(text, start)
    return m.group(1) if m else None


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
        float(s)  # sexpdata would read "nan", "inf", ... as floats
    except ValueError:
        return True
    return False


def _dump_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


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
            if isinstance(val, int) and not isinstance(val, bool) and key in hex_keys:
                text = f"#x{val:x}" if val >= 0 else f"#x-{-val:x}"
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
