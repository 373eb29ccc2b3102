"""Fitting reports in a terminal (``--watch``): the top rows of each table.

A report that scrolls past the screen hides its head, the part that
matters; so each table keeps its first rows, cut tables say how many rows
they left out, and no line is wider than the terminal.
"""

from __future__ import annotations


def share(needs: list[int], budget: int) -> list[int]:
    """Lines for each table: none gets more than it needs, and what is short
    is shared evenly among those that need more (small tables stay whole)."""
    alloc = [0] * len(needs)
    left = max(0, budget)
    order = sorted(range(len(needs)), key=lambda i: (needs[i], -i))  # ties: top gets more
    for k, i in enumerate(order):
        alloc[i] = min(needs[i], left // (len(needs) - k))
        left -= alloc[i]
    for i in range(len(needs)):  # the remainder of the division, to the top tables
        extra = min(left, needs[i] - alloc[i])
        alloc[i] += extra
        left -= extra
    return alloc


def cut(lines: list[str], room: int, what: str = "rows") -> list[str]:
    """The first lines of a table that fit in ``room`` lines, the last of
    them saying how many were left out."""
    if len(lines) <= room:
        return lines
    if room <= 0:
        return []
    kept = lines[:room - 1]
    return kept + [f"... {len(lines) - len(kept)} more {what}"]


def fit_text(text: str, rows: int, columns: int) -> str:
    """``text`` cut to ``rows`` lines of at most ``columns`` characters.

    Tables are runs of lines between blank lines; each keeps its top rows.
    When there are more tables than rows, the last tables go whole."""
    lines = [line[:columns] for line in text.splitlines()]
    if len(lines) <= rows:
        return "".join(line + "\n" for line in lines)
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    blocks = [b for b in blocks if b]
    dropped = 0

    def least() -> int:  # a line or two of each table, blank lines between, a note
        return sum(min(len(b), 2) for b in blocks) + len(blocks) - 1 + (1 if dropped else 0)

    while blocks and least() > rows:
        dropped += len(blocks.pop())
    room = rows - (len(blocks) - 1) - (1 if dropped else 0)
    parts = [cut(b, n) for b, n in zip(blocks, share([len(b) for b in blocks], room))]
    out = "\n\n".join("\n".join(p) for p in parts).splitlines()
    if dropped:
        out.append(f"... {dropped} more lines")
    return "".join(line[:columns] + "\n" for line in out)
