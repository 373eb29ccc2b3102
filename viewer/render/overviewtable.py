"""``q-view DIR``: one row per task set, largest first; then the CPUs."""

from __future__ import annotations

from typing import NamedTuple, TextIO

from ..model.numfmt import percent, si
from .fit import cut, share


class Row(NamedTuple):
    command: str
    pid: str
    cpu: str
    amount: float
    unit: str
    file: str
    slices: int
    stats: dict[str, float]  # q:task-stats, summed
    runs: list[str | None]  # run ids of the slices (None: unknown)
    host: str | None = None  # q:hostname of the machine that collected it


class CpuRow(NamedTuple):
    """Shares of a CPU's time from the kernel's counters: busy, steal,
    iowait and idle add up to 1 (None: unknown; then busy holds steal and
    idle iowait)."""

    cpu: int
    busy: float | None  # ran tasks or interrupts (user, nice, system, irq, softirq)
    mhz: float | None
    idle: float | None = None  # ran nothing (iowait apart where known)
    host: str | None = None
    steal: float | None = None  # a hypervisor ran something else
    iowait: float | None = None  # idle with I/O pending
    sampled_idle: float | None = None  # its time sampled in the idle task (pid 0)
    lost: int = 0  # records its ring lost, each once


CPU_LEGEND = ("busy (user, system, irq), steal, iowait, idle: each CPU's time by the",
              "kernel's counters (/proc/stat), adding up to 100%; lost: records its ring",
              "lost while the sets listed were open, each once, whoever's they were.")


RUN_DIGITS = 8  # of a run id in the run column: a prefix --run takes

STAT_COLUMNS = (("user-seconds", "user"), ("system-seconds", "sys"),
                ("voluntary-switches", "vcsw"), ("involuntary-switches", "ivcsw"),
                ("minor-faults", "minflt"), ("major-faults", "majflt"),
                ("off-cpu-seconds", "off-cpu"), ("cpu-wait-seconds", "cpuwait"))


def render(rows: list[Row], directory: str, out: TextIO, cpus: list[CpuRow] | None = None,
           window: str | None = None, height: int | None = None,
           first: str = "command", lost: str | None = None) -> None:
    """The two tables; with ``height``, their top rows that fit in that many
    lines; ``first``: the heading of the first column (what a row is);
    ``lost``: the line that says the records lost, if any."""
    what = f"slices {window}" if window else "latest version of each"
    head, lines, foot = _task_table(rows, first)
    head.insert(0, f"Task sets in {directory} ({what}; % of all samples listed):")
    hosts = _host_width(rows)
    cpu_lines = [_cpu_line(c, hosts)
                 for c in sorted(cpus or [], key=lambda c: (c.host or "", c.cpu))]
    tail = ([""] + list(CPU_LEGEND) if cpu_lines else []) + ([lost] if lost else [])
    if height is not None:
        if height - len(head) - len(foot) - len(tail) - (2 if cpu_lines else 0) < 4:
            tail = [lost] if lost else []  # a small screen keeps the rows, not the legend
        room = height - len(head) - len(foot) - len(tail) - (2 if cpu_lines else 0)
        task_room, cpu_room = share([len(lines), len(cpu_lines)], room)
        lines = cut(lines, max(1, task_room), "task sets")
        cpu_lines = cut(cpu_lines, cpu_room, "CPUs")
    host_head = f"{'host':<{hosts}} " if hosts else ""
    cpu_head = ["", host_head + " cpu    busy   steal  iowait    idle      MHz     lost"] \
        if cpu_lines else []
    for line in head + lines + foot + cpu_head + cpu_lines + tail:
        out.write(line + "\n")


def _task_table(rows: list[Row], first: str = "command") -> tuple[list[str], list[str], list[str]]:
    """Header, rows (largest first) and total line of the task sets' table."""
    ordered = sorted(rows, key=lambda r: (-r.amount, r.file))
    units = sorted({r.unit for r in rows})
    unit = units[0] if len(units) == 1 else None
    total = sum(r.amount for r in rows)
    width = max([len(first)] + [len(r.command) for r in ordered])
    amount_head = unit if unit else "amount"
    stats = [(key, label) for key, label in STAT_COLUMNS if any(key in r.stats for r in rows)]
    extra = "".join(f" {label:>7}" for _key, label in stats)
    several = len({run for r in rows for run in r.runs}) > 1  # a run column: several runs
    extra += f" {'run':<{RUN_DIGITS}}" if several else ""
    hosts = _host_width(rows)  # a host column: several machines
    host_head = f"{'host':<{hosts}} " if hosts else ""
    head = [(f"{host_head}{first:<{width}} {'pid':>8} {'cpu':>4} {amount_head:>8} "
             f"{'%':>6}{extra}  {'commands' if first == 'unit' else 'file'}")]
    lines = []
    for r in ordered:
        amount = si(r.amount) + ("" if unit else f" {r.unit}")
        pct = f"{percent(r.amount, total):6.2f}" if unit else f"{'-':>6}"
        values = "".join(f" {_stat(key, r.stats[key]) if key in r.stats else '-':>7}"
                         for key, _label in stats)
        values += f" {_run(r.runs):<{RUN_DIGITS}}" if several else ""
        more = f" (+{r.slices - 1} slices)" if r.slices > 1 else ""
        host = f"{r.host or '?':<{hosts}} " if hosts else ""
        lines.append(f"{host}{r.command:<{width}} {r.pid:>8} {r.cpu:>4} {amount:>8} {pct}{values}"
                     f"  {r.file}{more}")
    whole = 100.0 if total else 0.0
    margin = hosts + 1 if hosts else 0
    foot = [f"{'':<{margin}}{'total':<{width}} {'':>8} {'':>4} {si(total):>8} {whole:6.2f}"] \
        if unit else []
    return head, lines, foot


def _host_width(rows: list[Row]) -> int:
    """The width of the host column; 0 (none) for the rows of one machine."""
    hosts = {r.host or "?" for r in rows}
    return max(len("host"), *map(len, hosts)) if len(hosts) > 1 else 0


def _run(ids: list[str | None]) -> str:
    if len(ids) > 1:
        return f"{len(ids)} runs"
    return (ids[0] or "?")[:RUN_DIGITS] if ids else "?"


def _cpu_line(c: CpuRow, hosts: int = 0) -> str:
    shares = " ".join(f"{100 * v:6.1f}%" if v is not None else f"{'-':>7}"
                      for v in (c.busy, c.steal, c.iowait, c.idle))
    mhz = f"{c.mhz:8.0f}" if c.mhz else f"{'-':>8}"
    host = f"{c.host or '?':<{hosts}} " if hosts else ""
    return f"{host}{c.cpu:>4} {shares} {mhz} {c.lost:>8}"


def _stat(key: str, value: float) -> str:
    if key.endswith("seconds"):
        return si(value)
    return si(value) if value >= 1000 else str(int(value))
