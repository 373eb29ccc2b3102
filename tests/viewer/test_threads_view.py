"""q-view on `.threads` files (docs/q-format.md 4.9, 5.8): --event,
--tid, --by thread, --metrics; and the CPU profile unchanged by them."""

from __future__ import annotations

import json

from qsynth import MS, QBuilder
from scenarios import run


def _setup(tmp_path, calls_pie):
    q = QBuilder(tmp_path / ".q")
    o = q.load(calls_pie)
    work = (o.at("leaf1"), o.ret("work"), o.ret("main"))
    sleep = (o.at("leaf2"), o.ret("main"))
    name = q.task("calls", 40, 0, stacks=[(30 * MS, list(work)), (10 * MS, list(sleep))])
    q.threads(name, {40: "calls", 41: "io worker"}, {
        ("cpu", 40, work): 30 * MS, ("cpu", 41, sleep): 10 * MS,
        ("S", 40, sleep): 600 * MS, ("D", 41, work): 300 * MS, ("S", 41, ()): 7 * MS,
        ("W", 41, sleep): 50 * MS})
    return q, name


def _by_thread(out: str) -> dict[str, float]:
    got: dict[str, float] = {}
    for line in out.splitlines():
        stack, _, count = line.rpartition(" ")
        thread = stack.split(";")[1]
        got[thread] = got.get(thread, 0.0) + int(count) / 1e9
    return got


def test_each_metric_per_thread(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    want = {"cpu": {"calls [tid 40]": 0.03, "io worker [tid 41]": 0.01},
            "off-cpu": {"calls [tid 40]": 0.6, "io worker [tid 41]": 0.307},
            "cpu-wait": {"io worker [tid 41]": 0.05},
            "wall": {"calls [tid 40]": 0.63, "io worker [tid 41]": 0.367}}
    for event, expected in want.items():
        code, out, err = run(q.info_path(name), "--event", event, "--by", "thread",
                             "--format", "collapsed")
        assert (code, err) == (0, ""), (event, err)
        got = _by_thread(out)
        assert got.keys() == expected.keys(), (event, got)
        for k, v in expected.items():
            assert abs(got[k] - v) < 1e-9, (event, k, got[k])


def test_tid_and_json_event(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--event", "off-cpu", "--tid", "41",
                         "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["event"] == "off-cpu" and data["unit"] == "seconds"
    assert abs(data["total"] - 0.307) < 1e-9
    assert any(f["name"] == "[stacks not kept]" for f in data["functions"])


def test_the_cpu_profile_is_the_same_with_and_without_threads(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    with_threads = run(q.info_path(name), "--flat")
    plain = QBuilder(tmp_path / "plain")
    o = plain.load(calls_pie)
    other = plain.task("calls", 40, 0, stacks=[
        (30 * MS, [o.at("leaf1"), o.ret("work"), o.ret("main")]),
        (10 * MS, [o.at("leaf2"), o.ret("main")])])
    without = run(plain.info_path(other), "--flat")
    assert with_threads[0] == without[0] == 0
    body = [line for line in with_threads[1].splitlines() if "%" in line or "  " in line]
    assert body[2:] == [line for line in without[1].splitlines()
                        if "%" in line or "  " in line][2:]


def test_metrics_side_by_side(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--metrics", "wall,cpu,off-cpu", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [m["event"] for m in data["metrics"]] == ["wall", "cpu", "off-cpu"]
    main = next(f for f in data["functions"] if f["name"] == "main")
    assert abs(main["wall"]["inclusive"] - 0.99) < 1e-9  # all but the 7 ms without a stack
    assert abs(main["cpu"]["inclusive"] - 0.04) < 1e-9
    code, out, err = run(q.info_path(name), "--metrics", "cpu,bogus")
    assert code == 2 and out == ""  # argparse's usage and "not a metric: 'bogus'" on stderr


def test_a_bad_threads_line_names_file_and_line(tmp_path, calls_pie):
    q, name = _setup(tmp_path, calls_pie)
    tfile = q.path / name.replace(".info#", ".threads#")
    tfile.write_bytes(tfile.read_bytes() + b"S 41 12 0xzz\n")
    code, out, err = run(q.info_path(name), "--event", "off-cpu")
    assert code == 1 and f"{tfile.name}:" in err and "bad address" in err


def test_no_kernel_keeps_off_cpu_time_with_the_user_code(tmp_path, calls_pie):
    """Off-CPU stacks all start in the kernel: --no-kernel takes the kernel
    frames away and leaves the time with the user frames (here there are
    none to take: the total is the same)."""
    q, name = _setup(tmp_path, calls_pie)
    code, out, err = run(q.info_path(name), "--event", "off-cpu", "--no-kernel",
                         "--format", "json")
    assert code == 0, err
    assert abs(json.loads(out)["total"] - 0.907) < 1e-9
