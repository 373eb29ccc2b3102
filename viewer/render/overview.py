"""``q-view DIR``: one row per task set, largest first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from ..numfmt import percent, si


@dataclass(frozen=True)
class Row:
    command: str
    pid: str
    cpu: str
    amount: float
    unit: str
    file: str


def render(rows: list[Row], directory: str, out: TextIO) -> None:
    ordered = sorted(rows, key=lambda r: (-r.amount, r.file))
    units = sorted({r.unit for r in rows})
    unit = units[0] if len(units) == 1 else None
    total = sum(r.amount for r in rows)
    out.write(f"Task sets in {directory} (latest version of each):\n")
    width = max([len("command")] + [len(r.command) for r in ordered])
    head = unit if unit else "amount"
    out.write(f"{'command':<{width}} {'pid':>8} {'cpu':>4} {head:>8} {'%':>6}  file\n")
    for r in ordered:
        amount = si(r.amount) + ("" if unit else f" {r.unit}")
        share = f"{percent(r.amount, total):6.2f}" if unit else f"{'-':>6}"
        out.write(f"{r.command:<{width}} {r.pid:>8} {r.cpu:>4} {amount:>8} {share}  {r.file}\n")
    if unit:
        whole = 100.0 if total else 0.0
        out.write(f"{'total':<{width}} {'':>8} {'':>4} {si(total):>8} {whole:6.2f}\n")
