"""Issue 43 G1, replayed from a twin (tests/facts/record.py record_odd_dropin_names): a
drop-in named ``a<newline>.bashrc`` and one whose name is not UTF-8, loaded by a
daemon-reload. The newline made two false entries (``…/a`` and ``.bashrc``); after the
reload every ``systemctl show`` of the unit failed and the whole read with it. Each is
one entry named with an escape, and the rest of the host is read."""

from __future__ import annotations

import json
from pathlib import Path

from facts.serving import HostSnapshot
from remedy.core.config import volatile
from remedy.core.config.host_data import from_host_data
from remedy.core.readings.sections import read_name

CASE = Path(__file__).parents[1] / "facts" / "serving.HostSnapshot" / "odd_dropin_names.json"
DIR = "/run/systemd/system/tenstorrent-serving.service.d"


def snapshot():
    return HostSnapshot().process(json.loads(CASE.read_text())["output"])


def test_a_name_with_a_newline_is_one_entry_named_with_an_escape():
    snap = snapshot()
    s = from_host_data("cfx-llm2", {})
    subjects = [e.subject for e in volatile.unmanaged(snap, s)]
    assert f"{DIR}/a\\n.bashrc" in subjects, subjects
    assert f"{DIR}/zz-\\xff.conf" in subjects, subjects
    assert not [p for p in subjects if p.endswith(("/a", ".bashrc")) and "\\n" not in p]
    assert all("\n" not in e.text() for e in volatile.unmanaged(snap, s))


def test_a_loaded_name_that_is_not_utf8_leaves_the_unit_read_over_the_bus():
    snap = snapshot()
    u = snap.unit
    assert u.main_pid and u.active_state == "active" and u.load_state == "loaded"
    assert u.exec_start_live and u.exec_start_live[0].path.startswith("/nix/store/")
    assert [d.path for d in u.dropins] == [f"{DIR}/zz-\\xff.conf"]
    assert "Y=1" in u.dropins[0].content  # its file is read
    problems = volatile.unshowable(snap, from_host_data("cfx-llm2", {}))
    assert len(problems) == 1 and "zz-\\xff.conf: its name is not UTF-8" in problems[0]


def test_read_name_reads_each_escape_of_qname():
    assert read_name("a\\040b\\011c\\\\d\\012e") == "a b\tc\\d\\ne"
