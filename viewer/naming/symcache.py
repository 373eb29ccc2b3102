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
import stat
import struct
import sys
import zlib
from array import array
from typing import Any

from qtools.common.cachedir import cache_dir as qtools_cache_dir
from qtools.common.cachedir import open_cache_dir

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
    """Load and store ``(SymbolTable, metadata)`` by key; never raises.

    The directory is reached without following a symlink and made only
    under a directory of this user's (``cachedir.open_cache_dir``); entries
    are opened in it by descriptor, never through a link."""

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.enabled = directory is not None
        self._fd: int | None = None
        self._looked = False  # not there when loads looked: made by the first store

    def _dir(self, create: bool) -> int | None:
        """The directory's descriptor, opened once (another user's: none)."""
        if self._fd is None and self.enabled and (create or not self._looked):
            assert self.directory is not None
            self._fd = open_cache_dir(self.directory, create, private=False)
            self._looked = True
        return self._fd

    def load(self, key: str) -> tuple[SymbolTable, dict[str, Any]] | None:
        dir_fd = self._dir(create=False)
        if dir_fd is None:
            return None
        try:
            fd = os.open(key + ".sym", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    return None
                data = f.read()
        except OSError:
            return None
        return decode(data, key)

    def store(self, key: str, table: SymbolTable, meta: dict[str, Any]) -> None:
        if not self.enabled:
            return
        dir_fd = self._dir(create=True)
        if dir_fd is None:
            self.enabled = False  # unwritable: carry on without a cache, quietly
            return
        tmp = f".tmp-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(encode(key, table, meta))
                os.replace(tmp, key + ".sym", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                os.unlink(tmp, dir_fd=dir_fd)
                raise
        except OSError:
            self.enabled = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
