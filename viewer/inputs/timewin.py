"""``--since`` / ``--until``: when, and which time slices fall in a window.

Accepted forms (local time unless a zone is given): ``2h ago``, ``90m ago``,
``3d ago`` (s, m, h, d, w); ``now``; ``today``, ``yesterday``; ``03:00``
(today); ``2026-11-22``, ``2026-11-22 03:00[:SS]``, ISO 8601 with ``T`` and
an offset; ``@1763800000`` (Unix seconds).
"""

from __future__ import annotations

import re
import time

from ..model.viewerrors import UsageError

_AGO = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hour|d|day|w|week)s?\s+ago\Z", re.I)
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400,
          "day": 86400, "w": 604800, "week": 604800}
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\Z")


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds for ``text`` (see the module docstring for the forms)."""
    now = time.time() if now is None else now
    t = text.strip()
    if m := _AGO.match(t):
        return now - float(m[1]) * _UNITS[m[2].lower()]
    lowered = t.lower()
    if lowered == "now":
        return now
    from datetime import datetime, timedelta  # for --since/--until only: 1 ms of start-up
    midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    if lowered == "today":
        return midnight.timestamp()
    if lowered == "yesterday":
        return (midnight - timedelta(days=1)).timestamp()
    if t.startswith("@"):
        try:
            return float(t[1:])
        except ValueError:
            raise UsageError(f"not a time: {text!r}") from None
    if m := _CLOCK.match(t):
        hour, minute, second = int(m[1]), int(m[2]), int(m[3] or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise UsageError(f"not a time of day: {text!r}")
        return midnight.replace(hour=hour, minute=minute, second=second).timestamp()
    try:
        return datetime.fromisoformat(t).timestamp()
    except ValueError:
        raise UsageError(f"not a time: {text!r} (try '2h ago', '03:00', "
                         "'2026-11-22 03:00' or '@UNIXSECONDS')") from None


def overlaps(start: float | None, end: float | None, since: float | None,
             until: float | None) -> bool:
    """Does a slice [start, end] share time with the window [since, until]?

    A slice that does not say when it began or ended is kept (it cannot be
    placed, and leaving data out silently is worse).
    """
    if start is None and end is None:
        return True
    begin = start if start is not None else end
    finish = end if end is not None else start
    assert begin is not None and finish is not None
    if since is not None and finish < since:
        return False
    if until is not None and begin > until:
        return False
    return True
