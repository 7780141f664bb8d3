"""Issue 28, item 8: the evaluation of what remedy's file overrides is kept on the host
and read back in the snapshot's own round trip; nothing is evaluated while what the
answer depends on is unchanged, nor below the memory gate. The snapshots are recorded
on twins (python -m tests.facts.record); the remote snippets run in a real shell here."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

import facts.nix
from facts import _remote
from facts.nix import read_option_definitions
from remedy.core.config import options
from remedy.core.config.host_data import from_host_data
from remedy.core.readings import sections
from remedy.core.readings.snapshot import read_snapshot

FACTS = Path(__file__).parents[1] / "facts"
S = from_host_data("cfx-llm2", {})
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="remedy's files on the host are root's")


def snapshot(case: str = "options_recorded"):
    data = json.loads((FACTS / "serving.HostSnapshot" / f"{case}.json").read_text())
    return read_snapshot(sections.split(data["output"], "HostSnapshot"))


class NoRemote:
    """A host that must not be asked: the answer is the record's."""

    def __init__(self, found=None):
        self.asked, self.found = [], found

    def get_fact(self, fact, **kwargs):
        self.asked.append(kwargs)
        if self.found is None:
            raise AssertionError("a second round trip: the record should have answered")
        return self.found


def keyed(snap, key: str | None):
    lines = list(snap.options_record)
    return dataclasses.replace(snap, options_record=(f"key {key}", *lines[1:]))


def test_the_recorded_snapshot_carries_the_record_and_a_matching_key_answers_from_it():
    snap = snapshot()
    rec = options.read_record(snap.options_record)
    assert rec is not None and rec.key == "0" * 64 and rec.time and rec.problem is None
    host = NoRemote()
    defs = read_option_definitions(
        host, S, keyed(snap, options.record_key(S, snap)), ("hugepages",)
    )
    assert host.asked == [] and defs.error is None
    assert defs.options["hugepagesPerCard"].defined_by_host
    assert defs.options["hugepagesPerCard"].path == "hardware.tenstorrent.hugepagesPerCard"
    assert defs.recorded.startswith("the record of 20") and options.RECORD in defs.recorded
    note = options.source_note(defs)
    assert note and "not evaluated again" in note and options.RECORD in note


def test_a_record_of_another_head_is_evaluated_again_and_kept_under_the_new_key():
    snap = snapshot()  # its record's key (0…0) is no checkout's
    found = options.parse(snap.options_record[2:] + ("@@remedy:exit 0",), {})
    host = NoRemote(found)
    defs = read_option_definitions(host, S, snap, ("hugepages",))
    (asked,) = host.asked
    assert asked["record_key"] == options.record_key(S, snap) and defs.recorded is None
    assert options.source_note(defs) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda s, snap: (s, dataclasses.replace(snap, checkout=dataclasses.replace(
            snap.checkout, head="f" * 40))),  # a new commit to the checkout
        lambda s, snap: (s, dataclasses.replace(snap, flake_input=dataclasses.replace(
            snap.flake_input, rev="e" * 40))),  # flake.lock
        lambda s, snap: (s, dataclasses.replace(snap, managed=dataclasses.replace(
            snap.managed, content="{ }\n"))),  # remedy's file
        lambda s, snap: (dataclasses.replace(s, managed_options={
            **s.managed_options, "hugepagesPerCard": "tt.pages"}), snap),  # host data
    ],
)  # fmt: skip
def test_the_key_moves_with_what_the_answer_depends_on(change):
    snap = snapshot()
    s2, snap2 = change(S, snap)
    assert options.record_key(s2, snap2) != options.record_key(S, snap)
    assert options.record_key(S, snapshot()) == options.record_key(S, snap)


def test_no_key_holds_for_uncommitted_changes_nix_evaluates_the_work_tree():
    snap = snapshot()
    dirty = dataclasses.replace(
        snap, checkout=dataclasses.replace(snap.checkout, changes=[" M flake.nix"])
    )
    assert options.record_key(S, dirty) is None
    host = NoRemote(options.OptionDefinitions())
    read_option_definitions(host, S, keyed(dirty, options.record_key(S, snap)), ("hugepages",))
    assert host.asked and host.asked[0]["record_key"] is None  # evaluated, not kept


def test_below_the_memory_gate_a_stale_record_is_not_evaluated_again_and_it_is_said():
    snap = snapshot()
    low = dataclasses.replace(snap, memory=dataclasses.replace(snap.memory, mem_available_kb=1))
    host = NoRemote()
    defs = read_option_definitions(host, S, low, ("hugepages",))
    assert host.asked == [] and "below min_mem_available_gb" in defs.error
    assert "record on the host is of an earlier" in defs.error
    # the record still answers when it holds: memory does not matter then
    defs = read_option_definitions(host, S, keyed(low, options.record_key(S, low)), ("hugepages",))
    assert host.asked == [] and defs.error is None and defs.recorded


def test_an_untrusted_record_is_not_read():
    rec = options.read_record(("untrusted /var/lib/remedy/options.record: a symbolic link",))
    assert rec.problem and rec.key is None
    assert options.read_record(None) is None and options.read_record(("garbage",)) is None


def _sh(script: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", "-c", script, "sh", *args], capture_output=True, text=True, timeout=30,
        env={"PATH": f"{tmp_path}/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip


@as_root
def test_the_evaluation_keeps_its_answer_and_the_snapshot_reads_it_back(tmp_path):
    """OPTIONS_SH writes the record (root's, 0600, renamed into place) only for an
    answer, and the snapshot's snippet prints it; a record that is not 0600 is named."""
    rec = tmp_path / "lib" / "options.record"
    answer = '{"hugepagesPerCard":{"exists":true,"highestPrio":100,"definitions":[]}}'
    cmd = facts.nix.OptionDefinitions().command(
        "/etc/nixos", "cfx-llm2", "hosts/cfx-llm2/remedy.nix", {}, record_key="k" * 64
    )
    assert str(options.RECORD) in cmd.get_raw_value()
    script = facts.nix.OPTIONS_SH
    ran = _sh(script, tmp_path, str(rec), "k" * 64, "printf", "%s", answer)
    assert f"@@remedy:recorded {rec}" in ran.stdout
    assert stat.S_IMODE(rec.stat().st_mode) == 0o600 and rec.stat().st_uid == 0
    assert [p.name for p in rec.parent.iterdir()] == ["options.record"]
    failed = _sh(script, tmp_path, str(tmp_path / "other"), "k" * 64, "false")
    assert "@@remedy:exit 1" in failed.stdout and not (tmp_path / "other").exists()
    reader = _remote.OPTIONS_RECORD.replace(options.RECORD, str(rec))
    lines = _sh(reader, tmp_path).stdout.splitlines()
    got = options.read_record(lines[1:])
    assert got.key == "k" * 64 and got.lines == (answer,)
    assert options.from_record(got, {}).options["hugepagesPerCard"].defined_by_host
    rec.chmod(0o644)
    assert options.read_record(_sh(reader, tmp_path).stdout.splitlines()[1:]).problem


@as_root
def test_nix_version_runs_once_per_nix_binary(tmp_path):
    """The snapshot's `nix --version` is kept under the binary it ran: a second read
    starts no nix process; another nix is asked again."""
    (tmp_path / "bin").mkdir()
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "nix"
    fake.write_text(f"#!/bin/sh\necho x >> {calls}\necho 'nix (Nix) 2.26.3'\n")
    fake.chmod(0o755)
    script = _remote.NIX_VERSION.replace(options.NIX_VERSION_RECORD, str(tmp_path / "v"))
    outs = [_sh(script, tmp_path).stdout for _ in range(2)]
    assert outs[0] == outs[1] == "@@remedy:section nix.version\nnix (Nix) 2.26.3\n"
    assert calls.read_text() == "x\n"
    fake.write_text(f"#!/bin/sh\necho x >> {calls}\necho 'nix (Nix) 2.28.4'\n")
    os.utime(fake, (1, 1))  # another Nix: another binary, size or time
    assert _sh(script, tmp_path).stdout.endswith("nix (Nix) 2.28.4\n")
    assert calls.read_text() == "x\nx\n"
