"""``q-view DIR``: one row per task set, largest first; then the CPUs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TextIO

from ..numfmt import percent, si


@dataclass
class Row:
    command: str
    pid: str
    cpu: str
    amount: float
    unit: str
    file: str
    slices: int = 1
    stats: dict[str, float] = field(default_factory=dict)  # q:task-stats, summed


@dataclass
class CpuRow:
    cpu: int
    busy: float | None  # share of the time the CPU was not idle
    mhz: float | None
    idle: float | None = None  # share of its time sampled in the idle task (pid 0)


STAT_COLUMNS = (("user-seconds", "user"), ("system-seconds", "sys"),
                ("voluntary-switches", "vcsw"), ("involuntary-switches", "ivcsw"),
                ("minor-faults", "minflt"), ("major-faults", "majflt"))


def render(rows: list[Row], directory: str, out: TextIO, cpus: list[CpuRow] | None = None,
           window: str | None = None) -> None:
    ordered = sorted(rows, key=lambda r: (-r.amount, r.file))
    units = sorted({r.unit for r in rows})
    unit = units[0] if len(units) == 1 else None
    total = sum(r.amount for r in rows)
    what = f"slices {window}" if window else "latest version of each"
    out.write(f"Task sets in {directory} ({what}; % of all samples listed):\n")
    width = max([len("command")] + [len(r.command) for r in ordered])
    head = unit if unit else "amount"
    stats = [(key, label) for key, label in STAT_COLUMNS if any(key in r.stats for r in rows)]
    extra = "".join(f" {label:>7}" for _key, label in stats)
    out.write(f"{'command':<{width}} {'pid':>8} {'cpu':>4} {head:>8} {'%':>6}{extra}  file\n")
    for r in ordered:
        amount = si(r.amount) + ("" if unit else f" {r.unit}")
        share = f"{percent(r.amount, total):6.2f}" if unit else f"{'-':>6}"
        values = "".join(f" {_stat(key, r.stats[key]) if key in r.stats else '-':>7}"
                         for key, _label in stats)
        more = f" (+{r.slices - 1} slices)" if r.slices > 1 else ""
        out.write(f"{r.command:<{width}} {r.pid:>8} {r.cpu:>4} {amount:>8} {share}{values}"
                  f"  {r.file}{more}\n")
    if unit:
        whole = 100.0 if total else 0.0
        out.write(f"{'total':<{width}} {'':>8} {'':>4} {si(total):>8} {whole:6.2f}\n")
    if cpus:
        out.write("\n cpu    busy    idle      MHz\n")
        for c in sorted(cpus, key=lambda c: c.cpu):
            busy = f"{100 * c.busy:6.1f}%" if c.busy is not None else f"{'-':>7}"
            idle = f"{100 * c.idle:6.1f}%" if c.idle is not None else f"{'-':>7}"
            mhz = f"{c.mhz:8.0f}" if c.mhz else f"{'-':>8}"
            out.write(f"{c.cpu:>4} {busy} {idle} {mhz}\n")


def _stat(key: str, value: float) -> str:
    if key.endswith("seconds"):
        return si(value)
    return si(value) if value >= 1000 else str(int(value))
