"""On-disk cache of parsed symbol tables, keyed by the crc32 of the copy.

A `.q` copy is named by its crc32, so the same content seen again (the next
q-view of the same directory, another task that maps the same libc) is
parsed once. The cache is an optimisation only: it lives under
``$Q_CACHE_DIR``, else ``$XDG_CACHE_HOME/q-tools/symbols``, else
``~/.cache/q-tools/symbols``; when that cannot be written it is silently
not used. Entries are never trusted blindly: a versioned header, a crc32
over the whole entry and structural checks on load; anything wrong and the
entry is ignored (and rewritten after parsing).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import zlib
from array import array
from typing import Any

from qtools.qformat.cachedir import cache_dir as qtools_cache_dir

from .symtab import SymbolTable

MAGIC = b"QVSYMTAB"
VERSION = 3  # bump whenever what goes into a table changes
_HEADER = struct.Struct("<8sII")  # magic, version, length of the JSON metadata
_COUNTS = struct.Struct("<QQ")  # number of symbols, bytes of names


def cache_dir() -> str | None:
    """Where cache entries go, or None when no location is known."""
    explicit = os.environ.get("Q_CACHE_DIR")
    if explicit is not None:
        return explicit or None  # Q_CACHE_DIR= (empty) turns the cache off
    return qtools_cache_dir("symbols")


def fetch_dir() -> str | None:
    """Where files fetched from debuginfod servers go: beside the symbol
    tables (``$Q_CACHE_DIR/debuginfod``, else ``.../q-tools/debuginfod``)."""
    return qtools_cache_dir("debuginfod")


class SymbolCache:
    """Load and store ``(SymbolTable, metadata)`` by key; never raises."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.enabled = directory is not None

    def _path(self, key: str) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, key + ".sym")

    def load(self, key: str) -> tuple[SymbolTable, dict[str, Any]] | None:
        if not self.enabled:
            return None
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except OSError:
            return None
        return decode(data, key)

    def store(self, key: str, table: SymbolTable, meta: dict[str, Any]) -> None:
        if not self.enabled:
            return
        assert self.directory is not None
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(encode(key, table, meta))
                os.replace(tmp, self._path(key))
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            self.enabled = False  # unwritable: carry on without a cache, quietly


def encode(key: str, table: SymbolTable, meta: dict[str, Any]) -> bytes:
    meta_bytes = json.dumps({**meta, "key": key}, sort_keys=True).encode()
    names = "\0".join(table.names).encode("utf-8", "surrogatepass")
    starts, ends = _little(table.starts), _little(table.ends)
    body = b"".join([
        _HEADER.pack(MAGIC, VERSION, len(meta_bytes)), meta_bytes,
        _COUNTS.pack(len(table), len(names)), starts.tobytes(), ends.tobytes(), names,
    ])
    return body + struct.pack("<I", zlib.crc32(body))


def decode(data: bytes, key: str) -> tuple[SymbolTable, dict[str, Any]] | None:
    """The entry in ``data``, or None if it is not a valid entry for ``key``."""
    try:
        if len(data) < _HEADER.size + _COUNTS.size + 4:
            return None
        body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
        if zlib.crc32(body) != crc:
            return None
        magic, version, meta_len = _HEADER.unpack_from(body)
        if magic != MAGIC or version != VERSION:
            return None
        pos = _HEADER.size
        meta = json.loads(body[pos: pos + meta_len])
        if not isinstance(meta, dict) or meta.get("key") != key:
            return None
        pos += meta_len
        count, names_len = _COUNTS.unpack_from(body, pos)
        pos += _COUNTS.size
        if pos + 16 * count + names_len != len(body):
            return None
        starts = _from_little(body[pos: pos + 8 * count])
        ends = _from_little(body[pos + 8 * count: pos + 16 * count])
        blob = body[pos + 16 * count:]
        names = blob.decode("utf-8", "surrogatepass").split("\0") if count else []
        if len(names) != count:
            return None
        if any(starts[i] >= starts[i + 1] for i in range(count - 1)):
            return None  # lookups bisect: the starts must be strictly sorted
        return SymbolTable(starts, ends, names), meta
    except (ValueError, struct.error, UnicodeDecodeError, RecursionError):
        return None


def _little(values: array) -> array:
    if sys.byteorder == "little":
        return values
    copy = array("Q", values)
    copy.byteswap()
    return copy


def _from_little(data: bytes) -> array:
    values = array("Q")
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values
