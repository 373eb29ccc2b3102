"""The daemon's file openers: only regular files, never blocking, never
through a final symlink where a path could have been swapped."""

from __future__ import annotations

import os

import pytest

from qtools.daemon.machine import procfs


def test_open_plain_takes_only_regular_files(tmp_path):
    regular = tmp_path / "perf-1.map"
    regular.write_text("1000 10 jitted\n")
    fd = procfs.open_plain(str(regular))
    assert fd is not None and os.read(fd, 100) == b"1000 10 jitted\n"
    os.close(fd)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # a blocking open would hang the collector here
    link = tmp_path / "link"
    link.symlink_to(regular)
    for path in (fifo, link, tmp_path, "/dev/zero", "relative/path"):
        assert procfs.open_plain(str(path)) is None, path


def test_open_in_root_sees_the_tasks_view_but_not_a_final_symlink(tmp_path):
    regular = tmp_path / "lib.so"
    regular.write_bytes(b"\x7fELF")
    link = tmp_path / "lib-link.so"
    link.symlink_to(regular)
    fd = procfs.open_in_root(os.getpid(), str(regular))
    assert fd is not None and os.fstat(fd).st_ino == regular.stat().st_ino
    os.close(fd)
    assert procfs.open_in_root(os.getpid(), str(link)) is None
    assert procfs.open_in_root(os.getpid(), "lib.so") is None


def test_loaded_modules_ignores_use_counts(tmp_path):
    modules = tmp_path / "modules"
    modules.write_text("ext4 1007616 1 - Live 0xffffffffc0000000\n")
    before = procfs.loaded_modules(str(modules))
    modules.write_text("ext4 1007616 4 mbcache, Live 0xffffffffc0000000\n")
    assert procfs.loaded_modules(str(modules)) == before == {("ext4", "0xffffffffc0000000")}
    assert procfs.loaded_modules(str(tmp_path / "absent")) is None


def test_task_counters_agree_with_psutil():
    """The counters only grow: read between two psutil reads, each lies
    between psutil's two values."""
    import psutil
    p = psutil.Process()
    sum(range(3_000_000))  # some CPU time to count
    times, switches = p.cpu_times(), p.num_ctx_switches()
    mine = procfs.task_counters(os.getpid())
    times2, switches2 = p.cpu_times(), p.num_ctx_switches()
    assert times.user <= mine["user-seconds"] <= times2.user
    assert times.system <= mine["system-seconds"] <= times2.system
    assert switches.voluntary <= mine["voluntary-switches"] <= switches2.voluntary
    assert switches.involuntary <= mine["involuntary-switches"] <= switches2.involuntary
    assert mine["minor-faults"] > 0
    assert procfs.task_counters(2 ** 22 + 1) is None  # above pid_max: no such process


def test_task_counters_parse_a_comm_with_spaces_and_parentheses():
    stat = ("4242 (a) b (c) R 1 4242 4242 0 -1 4194304 "
            "11 0 3 0 250 50 0 0 20 0 1 0 100 0 0")
    status = "Name:\ta) b (c\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t9\n"
    got = procfs.parse_task_counters(stat, status)
    ticks = os.sysconf("SC_CLK_TCK")
    assert got == {"user-seconds": 250 / ticks, "system-seconds": 50 / ticks,
                   "voluntary-switches": 7, "involuntary-switches": 9,
                   "minor-faults": 11, "major-faults": 3}
    assert procfs.parse_task_counters("4242 (a) R 1", status) is None


def test_cpu_counters_agree_with_psutil():
    """Read straight from /proc/stat (psutil is not imported at start):
    between two psutil reads, each counter lies between psutil's values."""
    import psutil
    cpu = 0  # psutil lists the online CPUs in order: cpu0 first
    before = psutil.cpu_times(percpu=True)[cpu]
    mine = procfs.cpu_counters(cpu)
    after = psutil.cpu_times(percpu=True)[cpu]
    assert mine is not None
    slack = 0.02  # psutil rounds to 1/100 s
    # guest time is in user and nice already: counted once, as psutil's cpu_percent does
    assert sum(before) - before.guest - before.guest_nice - slack <= mine["total"] \
        <= sum(after) - after.guest - after.guest_nice + slack
    assert before.idle + before.iowait - slack <= mine["idle"] <= after.idle + after.iowait + slack
    assert before.iowait - slack <= mine["iowait"] <= after.iowait + slack
    assert before.steal - slack <= mine["steal"] <= after.steal + slack
    freq = psutil.cpu_freq(percpu=True)
    if cpu < len(freq) and freq[cpu].current:
        assert mine["frequency-mhz"] > 0


def test_cpuinfo_clock_is_the_named_processors():
    text = "processor\t: 0\ncpu MHz\t\t: 2000.5\n\nprocessor\t: 1\ncpu MHz\t\t: 3000.25\n"
    assert procfs.parse_cpuinfo_mhz(text, 1) == 3000.25
    assert procfs.parse_cpuinfo_mhz(text, 0) == 2000.5
    assert procfs.parse_cpuinfo_mhz(text, 2) is None
    assert procfs.parse_cpu_times("cpu  1 2 3 4\ncpu1 100 0 50 850 0\n", 1) == \
        [v / os.sysconf("SC_CLK_TCK") for v in (100, 0, 50, 850, 0)]
    assert procfs.parse_cpu_times("cpu  1 2 3 4\n", 1) is None


def test_a_cpus_time_splits_into_shares_that_add_up():
    """busy (steal in it, iowait not), iowait and the idle rest make the
    whole; guest time, already in user, is not counted twice."""
    # user nice system idle iowait irq softirq steal guest guest_nice
    start = procfs.cpu_time_split([10, 0, 5, 80, 2, 1, 1, 1, 4, 0])
    end = procfs.cpu_time_split([40, 0, 15, 120, 7, 2, 2, 4, 24, 0])
    assert (start["total"], end["total"]) == (100, 190)
    shares = procfs.cpu_summary(start, end)
    assert shares == {"busy": round(1 - 45 / 90, 4), "iowait": round(5 / 90, 4),
                      "steal": round(3 / 90, 4), "seconds": 90}
    idle = 1 - shares["busy"] - shares["iowait"]
    assert (shares["busy"] - shares["steal"]) + shares["steal"] + shares["iowait"] + idle \
        == pytest.approx(1)
    # a kernel with four fields says nothing of iowait and steal
    old = procfs.cpu_summary(procfs.cpu_time_split([1, 0, 1, 8]),
                             procfs.cpu_time_split([2, 0, 2, 16]))
    assert old == {"busy": 0.2, "seconds": 10}
