"""The q file format, version 1: names, `.info` s-expressions, data files,
the `.q` directory and its object copies (described in docs/q-format.md).

This package knows files, not perf: the collector writes through it and the
viewer reads through it.
"""

from .data import Arc, Stack, edge_lines, hist_lines, iter_lines, read_edges, read_hist, \
    read_stacks, stack_lines
from .errors import QFormatError
from .info import FORMAT_VERSION, CallCounts, CallStacks, Histogram, Info, MapRange, \
    ObjectRef, TaskInfo, data_expected, dump_info, parse_info, read_info, require_complete
from .limits import DEFAULT_LIMITS, LimitExceeded, Limits, parse_limits
from .names import QName, SetName, check_plain_name, copy_name, info_versions, parse_copy_name, \
    parse_name, parse_set, sanitize, sanitize_prog
from .threads import (ThreadName, ThreadWeight, read_threads, rest_thread, thread_lines,
                      with_cpu_rest)
from .copies import CopyJob, NoRoom, Room, Stored, TooLarge
from .sexp import Form, Symbol
from .files import MissingFile, crc32_of_fd, open_in_directory, open_regular
from .store import CopyProblem, QDir, UnsafeDirectory, resolve_info

__all__ = [
    "Arc", "CallCounts", "CallStacks", "CopyJob", "CopyProblem", "FORMAT_VERSION", "Form",
    "Histogram", "Info", "MapRange", "ObjectRef", "QDir", "QFormatError", "QName", "SetName",
    "NoRoom", "Room", "Stack", "Stored", "Symbol", "TaskInfo", "TooLarge", "UnsafeDirectory",
    "check_plain_name", "copy_name", "crc32_of_fd", "dump_info", "edge_lines", "hist_lines",
    "info_versions", "iter_lines", "open_regular", "parse_copy_name", "parse_info", "parse_name",
    "parse_set", "read_edges", "read_hist", "read_info", "read_stacks", "resolve_info",
    "sanitize", "sanitize_prog", "stack_lines",
]
__all__ += [  # reading untrusted input: caps, and files that must be there
    "DEFAULT_LIMITS", "LimitExceeded", "Limits", "MissingFile", "data_expected",
    "open_in_directory", "parse_limits", "require_complete",
]
__all__ += ["ThreadName", "ThreadWeight", "read_threads", "rest_thread", "thread_lines",
            "with_cpu_rest"]
