"""--min-stack-share: rare stacks fold into the remainder as they age, so a
long run's sets stop growing with them, while every stack above the share
stays, the totals stay exact and each thread keeps its weight."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from churn import Churn, ChurnRun, Ticking

from qtools.daemon.collector import Options
from qtools.daemon.sets.tally import RECUR_SECONDS, SampleTally
from qtools.qformat import read_hist, read_info, read_stacks

PERIOD = 1_000_000


def _feed(tally: SampleTally, stream: list[tuple[int, ...]], tid: int = 1) -> None:
    for stack in stream:
        tally.add(stack[0], PERIOD, stack, (), tid)


def _feed_interval(tally: SampleTally, rng: random.Random, stream: list[tuple[int, ...]],
                   fresh: int, n: int, true: dict[tuple[int, ...], int]) -> int:
    """``stream`` and ``n`` stacks never seen before (numbered on from
    ``fresh``), shuffled, into ``tally`` and ``true``; the last number."""
    for _ in range(n):
        fresh += 1
        stream.append((0x100000 + 4 * fresh, 0x9000))
    rng.shuffle(stream)
    _feed(tally, stream)
    for s in stream:
        true[s] = true.get(s, 0) + PERIOD
    return fresh


def test_without_a_share_nothing_is_folded():
    tally = SampleTally()
    for i in range(3):
        _feed(tally, [(0x1000 + i, 0x2000)] + [(0x5000 + 100 * i + k, 0x2000) for k in range(50)])
        assert tally.fold_rare() == 0
    assert len(tally.stacks) == 153 and tally.folded_weight == 0


def test_a_stack_gets_a_whole_interval_before_it_may_be_folded():
    tally = SampleTally(min_share=0.01)
    hot, rare = (0x1000, 0x2000), (0x1004, 0x2000)
    _feed(tally, [hot] * 99 + [rare])
    assert tally.fold_rare() == 0  # met before any fold: not yet judged
    _feed(tally, [hot] * 100)
    assert tally.fold_rare() == 1  # 1 sample of the 200 since it came: under 1%
    assert rare not in tally.stacks and hot in tally.stacks
    assert tally.folded_weight == PERIOD and tally.folded_samples == 1
    assert sum(tally.stacks.values()) + tally.folded_weight == tally.total == 200 * PERIOD
    young = (0x1008, 0x2000)
    _feed(tally, [hot] * 50 + [young])
    tally.fold_rare()
    assert young in tally.stacks  # came after the last fold: kept until the next


@pytest.mark.parametrize("seed", range(5))
def test_every_stack_above_the_share_is_kept_and_undercounted_by_less_than_it(seed):
    """Lossy counting's guarantees, on a stream of recurring stacks of many
    weights and a steady trickle of stacks never seen again."""
    rng = random.Random(seed)
    share = 0.002
    recurring = [(0x1000 + 4 * i, 0x9000) for i in range(300)]
    weights = [rng.paretovariate(1.2) for _ in recurring]
    true: dict[tuple[int, ...], int] = {}
    tally = SampleTally(min_share=share)
    fresh = 0
    sizes = []
    for _interval in range(40):
        fresh = _feed_interval(tally, rng, rng.choices(recurring, weights, k=400), fresh, 40, true)
        tally.fold_rare()
        sizes.append(len(tally.stacks))
    total = tally.total
    assert total == sum(true.values())
    assert sum(tally.stacks.values()) + tally.folded_weight == total
    for s, w in true.items():
        if w >= share * total:
            assert s in tally.stacks, f"a stack with {w / total:.4f} of the weight was folded"
        if s in tally.stacks:
            assert w - share * total < tally.stacks[s] <= w
    # 1,600 stacks came once: only those of the last interval or two are held
    assert fresh == 1600 and max(sizes[10:]) <= max(sizes[:10]) * 1.2
    assert sum(1 for s in tally.stacks if s[0] >= 0x100000) <= 2 * 40
    assert tally.folded_samples == round(tally.folded_weight / PERIOD)


def _slow_set(seed: int, minutes: int, now: bool) -> tuple[SampleTally, dict, list[int]]:
    """A set sampled 5 times a second (a program's short-lived runs): a few
    stacks that recur every few seconds, 40 that recur about once in 20 s
    to 3 minutes, and 3 a second never seen again; a fold every 10 s. The
    tally, the true weights, and the stacks never seen again held after
    each fold."""
    rng = random.Random(seed)
    tally = SampleTally(min_share=0.001)
    hot = [(0x1000 + 4 * i, 0x9000) for i in range(4)]
    warm = [(0x2000 + 4 * i, 0x9000) for i in range(40)]
    period = {s: rng.uniform(20, 180) for s in warm}  # seconds between its samples
    true: dict[tuple[int, ...], int] = {}
    fresh, held = 0, []
    for interval in range(minutes * 6):
        stream = [rng.choice(hot) for _ in range(20)]
        stream += [s for s in warm if rng.random() < 10 / period[s]]
        fresh = _feed_interval(tally, rng, stream, fresh, 30, true)
        tally.fold_rare(now=10.0 * (interval + 1) if now else None)
        held.append(sum(1 for s in tally.stacks if s[0] >= 0x100000))
    return tally, true, held


@pytest.mark.parametrize("seed", range(3))
def test_a_slow_set_holds_what_it_met_once_for_about_a_minute(seed):
    """By the share alone, a set of 5 samples a second keeps what it met
    once for its last 1/SHARE samples (over 3 minutes here), so its
    `.stack` fills for that long; with the time floor, for RECUR_SECONDS:
    it holds as much after 20 minutes as after 1."""
    tally, true, held = _slow_set(seed, 20, now=True)
    once_a_minute = 6 * 30  # stacks met once per interval, times intervals a minute
    assert max(held[6:]) <= once_a_minute + 2 * 30  # + the intervals before one is judged
    assert max(held[6:]) <= 1.2 * held[5]
    _tally, _true, by_share = _slow_set(seed, 20, now=False)
    assert min(by_share[60:]) >= 2 * max(held[6:])  # the share alone holds far more
    total = tally.total
    assert total == sum(true.values()) == sum(tally.stacks.values()) + tally.folded_weight
    # What a kept stack lost: less than the share of the total plus one
    # sample per RECUR_SECONDS of the run; what recurs more often is kept.
    bound = 0.001 * total + (20 * 60 / RECUR_SECONDS + 1) * PERIOD
    for s, w in true.items():
        if s in tally.stacks:
            assert w - bound < tally.stacks[s] <= w
        if s[0] < 0x2000:
            assert s in tally.stacks


def test_thread_lines_of_a_folded_stack_keep_their_thread_and_weight():
    tally = SampleTally(min_share=0.05)
    hot, rare = (0x1000, 0x2000), (0x1004, 0x2000)
    for k in range(40):
        tally.add(hot[0], PERIOD, hot, (), 1 + k % 2)
    tally.add(rare[0], PERIOD, rare, (), 2)
    tally.fold_rare()
    for k in range(40):
        tally.add(hot[0], PERIOD, hot, (), 1 + k % 2)
    assert tally.fold_rare() == 1
    lines = tally.thread_stacks
    assert ("cpu", 2, rare) not in lines
    assert lines[("cpu", 2, ())] == PERIOD
    by_thread: dict[int, int] = {}
    for (_kind, tid, _s), w in lines.items():
        by_thread[tid] = by_thread.get(tid, 0) + w
    assert by_thread == {1: 40 * PERIOD, 2: 41 * PERIOD}


def _stack_lines(run: ChurnRun, name: str) -> tuple[int, int, int]:
    """(stack lines, their weight with the remainder's, .hist total) of the
    newest version of set ``name``."""
    q = Path(run.qdir.path)
    info_name = max((p.name for p in q.glob(f"{name}.info#*")),
                    key=lambda n: int(n.rsplit("#", 1)[1]))
    info = read_info(q / info_name)
    stacks = list(read_stacks(q / info.call_stacks.file))
    hist = sum(c for _a, c in read_hist(q / info.histogram.file))
    return sum(1 for s in stacks if s.frames), sum(s.weight for s in stacks), hist


@pytest.mark.parametrize("share", [0.0, 0.001])
def test_a_long_runs_sets_stop_growing_with_rare_stacks_only_with_a_share(tmp_path, share):
    """A steady process that keeps meeting stacks never seen again (as a
    kernel path under an interrupt does), beside its recurring ones, and
    rounds of short-lived processes: its set's stack lines grow round
    after round without a share, and level off with one."""
    churn = Churn(procs=8, big_every=1000, steady_stacks=30, steady_repertoire=400)
    run = ChurnRun(tmp_path, churn, options=Options(cpu=0, min_stack_share=share))
    lines = []
    for _ in range(24):
        run.round()
        n, weight, hist = _stack_lines(run, "steady-pid999-cpu0")
        assert weight == hist  # the remainder keeps the totals exact
        lines.append(n)
    run.close()
    early, late = lines[5], lines[-1]
    info = read_info(max(Path(run.qdir.path).glob("steady-pid999-cpu0.info#*"),
                         key=lambda p: int(p.name.rsplit("#", 1)[1])))
    if share:
        assert late <= 1.2 * early, lines
        assert info.task.extra["q:min-stack-share"] == share
        assert info.task.samples_folded and info.task.samples_folded >= 15 * 30
    else:
        assert late >= early + 15 * 30, lines  # every new stack is still there
        assert "q:min-stack-share" not in info.task.extra and not info.task.samples_folded


def _aggregate_lines(run: ChurnRun) -> int:
    q = Path(run.qdir.path)
    latest = max(q.glob("prog0-cpu0.stack#*"), key=lambda p: int(p.name.rsplit("#", 1)[1]))
    return sum(1 for s in read_stacks(latest) if s.frames)


@pytest.mark.parametrize("interval", [10.0, 0.0])
def test_a_slow_aggregate_holds_about_a_minute_of_its_stacks(tmp_path, interval):
    """Short-lived runs of one program, 40 samples a 10-s round from 4,000
    stacks: at that rate the share alone would hold every stack met for
    1/SHARE samples (25 rounds); a stack met less than once a minute goes
    after about a minute, so the set's lines level off after 6 rounds. A
    clock that never moves shows the share alone."""
    churn = Churn(procs=8, programs=1, repertoire=4000, small=(4, 7), big_every=10**6)
    clock = Ticking()
    run = ChurnRun(tmp_path, churn, options=Options(cpu=0, min_stack_share=0.001), clock=clock)
    lines = []
    for _ in range(24):
        run.round()
        clock.now += interval
        lines.append(_aggregate_lines(run))
    run.close()
    assert run.samples >= 24 * 8 * 4
    if interval:
        assert max(lines[7:]) <= 1.2 * lines[6], lines
        assert max(lines) <= run.samples / 24 * (RECUR_SECONDS / interval + 2)
    else:
        assert lines[-1] >= 3 * lines[6], lines


SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"


@pytest.mark.parametrize("unit", ["q-syscollect.service", "q-syscollect-push.conf"])
def test_the_services_command_line_folds_rare_stacks(unit):
    from qtools.daemon import cli
    line = [x for x in re.findall(r"^ExecStart=(.*)$", (SYSTEMD / unit).read_text(), re.M) if x]
    argv = line[-1].split()[1:]
    cfg = cli.config_from(cli.parser().parse_args(argv), argv)
    assert cfg.min_stack_share == 0.001 and cfg.rotate == 3600


@pytest.mark.parametrize("bad", ["1", "1.5", "-0.1", "nan", "inf", "x"])
def test_a_share_outside_0_to_1_is_a_usage_error(bad, capsys):
    from qtools.daemon import cli
    with pytest.raises(SystemExit) as e:
        cli.parser().parse_args(["--min-stack-share", bad])
    assert e.value.code == 2 and "--min-stack-share" in capsys.readouterr().err
