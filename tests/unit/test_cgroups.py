"""Services and containers: what a cgroup path names (real-world shapes),
the CGROUP record decoded, and a set named after the cgroup its samples
ran in, chosen by weight, on replayed records (no kernel needed)."""

from __future__ import annotations

import io
import os
import shutil
import struct
import time

import pytest

from qtools.daemon.collector import CpuCollector, Options
from qtools.daemon.decode import synth
from qtools.daemon.decode.layout import SampleLayout
from qtools.daemon.decode.records import Cgroup, Comm, Mmap, RecordError, Sample, SampleId
from qtools.daemon.kernel import abi
from qtools.daemon.kernel.source import ReplaySource, SourceSpec
from qtools.daemon.machine import procfs, synthesize
from qtools.daemon.machine.cgroups import MAX_SET_CGROUPS, CgroupTable, weigh
from qtools.daemon.machine.host import HostProcess, StaticHost
from qtools.daemon.sets.checkpoint import RunInfo
from qtools.daemon.sets.objects import ObjectCopier
from qtools.qformat import QDir, read_info
from qtools.qformat.cgroup import name_cgroup, proc_cgroup_path

ID = "4f7a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8"
ID2 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
POD = "pod8d1c2b3a-4e5f-6071-8293-a4b5c6d7e8f9"
PODU = "pod8d1c2b3a_4e5f_6071_8293_a4b5c6d7e8f9"


@pytest.mark.parametrize("path, unit, container", [
    ("/", None, None),
    ("", None, None),
    ("/system.slice/nginx.service", "nginx.service", None),
    ("/system.slice/system-getty.slice/getty@tty1.service", "getty@tty1.service", None),
    ("/user.slice/user-1000.slice/session-3.scope", "session-3.scope", None),
    ("/user.slice/user-1000.slice/user@1000.service", "user@1000.service", None),
    ("/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-firefox-4242.scope",
     "app-gnome-firefox-4242.scope", None),
    ("/user.slice/user-1000.slice/user@1000.service/init.scope", "init.scope", None),
    ("/system.slice/run-r1b2c3.scope", "run-r1b2c3.scope", None),  # systemd-run --scope
    ("/system.slice/dbus.socket", "dbus.socket", None),
    ("/system.slice/-.mount", "-.mount", None),
    ("/system.slice/nginx.service/worker", "nginx.service", None),  # a delegated subtree
    ("/system.slice/docker.service", "docker.service", None),
    ("/system.slice/containerd.service", "containerd.service", None),
    ("/user.slice", None, None),  # a slice holds no tasks
    ("/init.scope", "init.scope", None),
    ("/qtest-4242.scope", "qtest-4242.scope", None),
    ("/mygroup/sub", None, None),
    # docker, systemd driver and cgroupfs driver (v1 and v2)
    (f"/system.slice/docker-{ID}.scope", f"docker-{ID}.scope", ID),
    (f"/docker/{ID}", None, ID),
    (f"/system.slice/docker-{ID}.scope/init.scope", "init.scope", ID),  # systemd inside
    # containerd / CRI on Kubernetes, systemd driver
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-{PODU}.slice/"
     f"cri-containerd-{ID}.scope", f"cri-containerd-{ID}.scope", ID),
    (f"/kubepods.slice/kubepods-{PODU}.slice/cri-containerd-{ID}.scope",
     f"cri-containerd-{ID}.scope", ID),
    # Kubernetes, cgroupfs driver
    (f"/kubepods/burstable/{POD}/{ID}", None, ID),
    (f"/kubepods/besteffort/{POD}/{ID}", None, ID),
    (f"/kubepods/{POD}/{ID}", None, ID),
    # CRI-O, and its monitor (not the container)
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-{PODU}.slice/"
     f"crio-{ID}.scope", f"crio-{ID}.scope", ID),
    (f"/kubepods.slice/kubepods-{PODU}.slice/crio-conmon-{ID}.scope",
     f"crio-conmon-{ID}.scope", None),
    # podman: root (machine.slice), rootless (the user's manager), cgroupfs
    (f"/machine.slice/libpod-{ID}.scope", f"libpod-{ID}.scope", ID),
    (f"/machine.slice/libpod-conmon-{ID}.scope", f"libpod-conmon-{ID}.scope", None),
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container",
     f"libpod-{ID}.scope", ID),
    (f"/libpod_parent/libpod-{ID}", None, ID),
    # nested: the innermost container wins
    (f"/docker/{ID}/docker/{ID2}", None, ID2),
    # not containers: a hex name under no runtime, a short id
    (f"/mygroup/{ID}", None, None),
    ("/system.slice/docker-abc123.scope", "docker-abc123.scope", None),
    ("/system.slice/docker-" + "A" * 64 + ".scope", "docker-" + "A" * 64 + ".scope", None),
    # what a hostile path cannot do
    ("/../system.slice/./x.service", "x.service", None),
    ("/" + "a/" * 5000 + "z.service", None, None),  # beyond PATH_MAX: not read
])
def test_name_cgroup(path, unit, container):
    named = name_cgroup(path)
    assert (named.unit, named.container) == (unit, container)
    assert named.path == path


@pytest.mark.parametrize("text, path", [
    ("0::/system.slice/nginx.service\n", "/system.slice/nginx.service"),
    # hybrid: the unified line wins
    ("12:cpu,cpuacct:/system.slice/x.service\n1:name=systemd:/system.slice/x.service\n"
     "0::/system.slice/y.service\n", "/system.slice/y.service"),
    # v1 only: systemd's named hierarchy, else the first
    (f"11:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n", f"/docker/{ID}"),
    (f"4:cpu:/docker/{ID}\n", f"/docker/{ID}"),
    ("", None),
    ("garbage\n", None),
])
def test_proc_cgroup_path(text, path):
    assert proc_cgroup_path(text) == path


LAYOUT = SampleLayout(abi.SAMPLE_IDENTIFIER | abi.SAMPLE_IP | abi.SAMPLE_TID | abi.SAMPLE_TIME
                      | abi.SAMPLE_CPU | abi.SAMPLE_PERIOD | abi.SAMPLE_CALLCHAIN
                      | abi.SAMPLE_CGROUP)


def test_cgroup_record_round_trip():
    rec = Cgroup(0x1234, "/system.slice/nginx.service", SampleId(7, 8, 99, 0, 1))
    assert LAYOUT.decode(synth.encode_cgroup(LAYOUT, rec)) == rec
    s = Sample(ip=0x400000, pid=7, tid=7, time=5, period=3, callchain=(0x400000,), cgroup=77)
    assert LAYOUT.decode(synth.encode_sample(LAYOUT, s)).cgroup == 77


def test_cgroup_record_without_id_is_damaged():
    bare = SampleLayout(abi.SAMPLE_IP, sample_id_all=False)
    with pytest.raises(RecordError):
        bare.decode(struct.pack("<IHH", abi.RECORD_CGROUP, 0, 8))  # a header, no id


def test_source_asks_for_cgroups():
    spec = SourceSpec(abi.builtin_event("cpu-clock"), 0, [0, 1])
    assert spec.sampling_attr().sample_type & abi.SAMPLE_CGROUP
    assert spec.sideband_attr().flags & abi.FLAG_CGROUP
    assert spec.layout().sample_type & abi.SAMPLE_CGROUP
    old = SourceSpec(abi.builtin_event("cpu-clock"), 0, [0], cgroups=False)
    assert not old.sampling_attr().sample_type & abi.SAMPLE_CGROUP
    assert not old.sideband_attr().flags & abi.FLAG_CGROUP
    assert abi.unpack_attr(spec.sideband_attr().pack()).flags & abi.FLAG_CGROUP


def test_table_chooses_the_heaviest_known_cgroup():
    t = CgroupTable(limit=3)
    for i, path in enumerate(["/", "/a.service", "/b.service"], 1):
        t.on_cgroup(Cgroup(i, path))
    assert t.choose({2: 5, 3: 9, 99: 100}) == "/b.service"  # 99: no record says what it is
    assert t.choose({2: 5, 3: 5}) == "/a.service"  # ties: the smaller id, every time
    assert t.choose({}) is None
    t.on_cgroup(Cgroup(4, "/c.service"))  # past the limit the oldest goes
    assert 1 not in t.paths and t.paths[4] == "/c.service"
    weights: dict[int, int] = {}
    for cid in range(MAX_SET_CGROUPS + 5):
        weigh(weights, cid, 1)
    weigh(weights, 0, 2)
    assert len(weights) == MAX_SET_CGROUPS and weights[0] == 3


def test_unknown_ids_are_looked_for_once():
    t = CgroupTable()
    looks = []

    def look():
        looks.append(1)
        return [Cgroup(5, "/late.scope")]
    t.complete([{5: 1, 6: 1}], look)
    assert t.paths == {5: "/late.scope"} and len(looks) == 1
    t.complete([{5: 1, 6: 3}], look)  # 6 is gone: not looked for again
    assert len(looks) == 1
    assert t.choose({5: 1, 6: 3}) == "/late.scope"


def test_host_cgroups_are_synthesized():
    host = StaticHost(cgroups={1: "/", 42: "/system.slice/x.service"})
    recs = synthesize.cgroups(host, 5)
    assert [(r.id, r.path) for r in recs] == [(1, "/"), (42, "/system.slice/x.service")]


def test_perf_cgroup_root_prefers_a_v1_perf_event_mount(tmp_path):
    mounts = tmp_path / "mounts"
    hybrid = ("cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
              "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n")
    mounts.write_text(hybrid)
    assert procfs.perf_cgroup_root(str(mounts)) == "/sys/fs/cgroup/unified"
    mounts.write_text(hybrid + "cgroup /sys/fs/cgroup/perf_event cgroup rw,perf_event 0 0\n")
    assert procfs.perf_cgroup_root(str(mounts)) == "/sys/fs/cgroup/perf_event"
    mounts.write_text("proc /proc proc rw 0 0\n")
    assert procfs.perf_cgroup_root(str(mounts)) is None


def test_live_cgroup_ids_are_inodes():
    root = procfs.perf_cgroup_root()
    if root is None:
        pytest.skip("no cgroup hierarchy of perf_event mounted here")
    found = dict((path, cid) for cid, path in procfs.cgroups(limit=50))
    assert found["/"] == os.stat(root).st_ino
    mine = procfs.task_cgroup(os.getpid())
    assert mine is not None and mine.startswith("/")


BASE = 0x5555_0000_0000
PID = 4242


@pytest.fixture
def binary(tmp_path):
    path = tmp_path / "app"
    shutil.copy(shutil.which("true"), path)
    return str(path)


def _collect(qd, records, host=None, layout=LAYOUT):
    run = RunInfo(["q-syscollect"], "cpu-clock", "seconds", 1e-9, "fp")
    with QDir.open(qd, create=True) as qdir:
        host = host or StaticHost(files=None)
        c = CpuCollector(Options(cpu=0, min_samples=1), run, ReplaySource(layout, [records]),
                         qdir, ObjectCopier(qdir, host=host), out=io.StringIO(), host=host)
        # the host's cgroups, none of its processes (the stream tells them)
        c.seed(synthesize.Snapshot([], synthesize.cgroups(host, time.monotonic_ns())))
        while not c.source.exhausted:
            c.step()
        assert c.checkpoint(final=True)
    return read_info(qd / "app-pid4242-cpu0.info#0")


def _start(binary, layout=LAYOUT):
    st = os.stat(binary)
    return [synth.encode_comm(layout, Comm(PID, PID, "app", True, SampleId(PID, PID, 1))),
            synth.encode_mmap2(layout, Mmap(PID, PID, BASE, 0x10000, 0, binary,
                                            os.major(st.st_dev), os.minor(st.st_dev),
                                            st.st_ino, sid=SampleId(PID, PID, 2)))]


def _samples(n, cgroup, t0, layout=LAYOUT):
    return [synth.encode_sample(layout, Sample(
        misc=abi.MISC_USER, ip=BASE + 0x10, pid=PID, tid=PID, time=t0 + i, period=1000,
        callchain=(abi.CONTEXT_USER, BASE + 0x10), cgroup=cgroup)) for i in range(n)]


def test_set_is_named_after_where_most_of_its_samples_ran(tmp_path, binary):
    """A task moved after fork (as systemd-run --scope and runtimes do):
    a few samples in the parent's cgroup, most in its own scope, which a
    CGROUP record names only after the samples (made after the start)."""
    scope = f"/system.slice/docker-{ID}.scope"
    host = StaticHost(files=None, cgroups={1: "/", 10: "/user.slice/user-0.slice/session-1.scope"})
    records = _start(binary) + _samples(3, 10, 10) + _samples(20, 77, 100)
    records.append(synth.encode_cgroup(LAYOUT, Cgroup(77, scope, SampleId(0, 0, 500))))
    info = _collect(tmp_path / "q", records, host)
    assert info.task.cgroup == scope
    assert info.task.unit == f"docker-{ID}.scope" and info.task.container == ID


def test_without_sampled_cgroups_the_host_is_asked(tmp_path, binary):
    """A kernel without PERF_SAMPLE_CGROUP: /proc/PID/cgroup at the first sample."""
    old = SampleLayout(LAYOUT.sample_type & ~abi.SAMPLE_CGROUP)
    host = StaticHost({PID: HostProcess("app", cgroup="/system.slice/app.service")}, files=None)
    info = _collect(tmp_path / "q", _start(binary, old) + _samples(5, 0, 10, old), host, old)
    assert (info.task.cgroup, info.task.unit, info.task.container) == \
        ("/system.slice/app.service", "app.service", None)


def test_a_cgroup_no_record_names_is_looked_up_on_the_host(tmp_path, binary):
    class Late(StaticHost):
        """Its cgroup is made after the start, by a task whose CGROUP
        record reaches none of our events."""
        looks = 0

        def cgroups(self):
            self.looks += 1
            return [] if self.looks == 1 else [(31, "/qtest-1.scope")]
    host = Late(files=None)
    info = _collect(tmp_path / "q", _start(binary) + _samples(5, 31, 10), host)
    assert info.task.unit == "qtest-1.scope" and host.looks == 2


def test_unknown_cgroup_writes_no_keys(tmp_path, binary):
    info = _collect(tmp_path / "q", _start(binary) + _samples(5, 999, 10))
    assert info.task.cgroup is None and info.task.unit is None
    text = (tmp_path / "q" / "app-pid4242-cpu0.info#0").read_text()
    assert "q:cgroup" not in text
