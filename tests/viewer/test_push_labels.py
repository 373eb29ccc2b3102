"""q-push's series labels: host, program and service only."""

from __future__ import annotations

from qsynth import MS, QBuilder
from qtools.viewer.inputs.load import sets_in
from qtools.viewer.commands.push import series_name


def test_the_service_label_is_the_sets_unit_unless_one_is_given(tmp_path):
    q = QBuilder(tmp_path / ".q")
    q.task("nginx", 10, 0, hist={0x1000: MS},
           extra_info={"hostname": "web1", "unit": "nginx.service"})
    q.task("cron", 11, 0, hist={0x1000: MS}, extra_info={"hostname": "web1"})
    names = {ts.comm: ts for ts in sets_in(str(q.path))}
    assert series_name("q-tools", names["nginx"], None) == \
        "q-tools{host=web1,program=nginx,service=nginx.service}"
    assert series_name("q-tools", names["cron"], None) == "q-tools{host=web1,program=cron}"
    assert series_name("q-tools", names["nginx"], "web") == \
        "q-tools{host=web1,program=nginx,service=web}"
