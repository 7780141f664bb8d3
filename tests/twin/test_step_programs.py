"""Issue 42: each step's host program, run on a twin in the states it decides on.

The deploy and the manual script run the same program (remedy/host/steps/NAME.sh);
here it runs on its own, over SSH, in check mode (it decides and changes nothing) and
then in apply mode, with the values the planner would give it. Each case is one of
the decisions the deploy's operations made in Python before (their operation cases):
the program's answer, and the host after it, are checked against real systemd, Nix
and git. With REMEDY_RECORD_ANSWERS=DIR the answers are kept, one file a case
(tests/operations replays them through the operations).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from remedy.core.config.host_data import from_host_data
from remedy.core.programs import journal
from remedy.core.programs import step_values as sv
from remedy.core.readings import answer as answer_core
from remedy.core.readings import probe
from remedy.core.run import steps as steps_core
from remedy.twin import fixtures, machine
from tests.conftest import HeldRequest, as_owner, owner_git, served_model, unit_props

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
JOURNAL = journal.path(UNIT)
RUN_ID = "test:1:1"
S = from_host_data(fixtures.FLAKE_HOST, {})


def run(twin: machine.Twin, values: sv.StepValues, mode: str, case: str = ""):
    """The program's answer in MODE, run as root over SSH."""
    argv = sv.argv(values, mode)
    proc = subprocess.run([*twin.ssh_argv(), shlex.join(argv)], capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    if (where := os.environ.get("REMEDY_RECORD_ANSWERS")) and case:
        out = Path(where) / f"{values.PROGRAM}.{case}.{mode}.json"
        out.write_text(json.dumps({"stdout": proc.stdout, "code": proc.returncode}) + "\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return answer_core.parse(proc.stdout, proc.stderr, proc.returncode)


def step(twin: machine.Twin, values: sv.StepValues, case: str = ""):
    """Check, then apply when it would act: (the check's answer, the apply's or None)."""
    checked = run(twin, values, "check", case)
    if checked.verdict != answer_core.ACT:
        return checked, None
    return checked, run(twin, values, "apply", case)


def journal_of(twin: machine.Twin) -> dict:
    done = twin.exec(["cat", JOURNAL], check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def begun(twin: machine.Twin) -> dict:
    """The run's journal, as its first step records it."""
    checked = run(twin, begin(), "check")
    assert checked.verdict == "noop", checked
    return journal_of(twin)


RUN = {"journal": JOURNAL, "run_id": RUN_ID}


def begin(**over) -> sv.Begin:
    return sv.Begin(**RUN, unit=UNIT, flake_dir=fixtures.NIXOS_DIR, host="t", **over)


def gate(**over) -> sv.Gate:
    return sv.Gate(**RUN, **{"min_gb": 4.0, "doing": "restarting the server", "host": "t", **over})


def restart(**over) -> sv.Restart:
    base = {"unit": UNIT, "stage": "fallback", "min_gb": 4.0, "may_restart": True,
            "reason": "restart now", "override_ran_before": False, "server_url": None,
            "host": "t"}  # fmt: skip
    return sv.Restart(**RUN, **{**base, **over})


def verify(twin: machine.Twin, **over) -> sv.Verify:
    head, _, tail = probe.request_body(probe.MODEL_MARK).partition(probe.MODEL_MARK)
    base = {"unit": UNIT, "stage": "durable", "server_url": twin.server_url,
            "model": served_model(twin), "probe_timeout_s": 20, "ready_timeout_s": 60,
            "parsed_before": False, "probe_head": head, "probe_tail": tail,
            "items": steps_core.serving_wanted(S, set())}  # fmt: skip
    return sv.Verify(**RUN, **{**base, **over})


def override(**over) -> sv.Override:
    from remedy.core.programs import commands

    base = {
        "unit": UNIT, "parser": S.tool_call_parser,
        "exports": "\n".join(f"{k}={v}" for k, v in sorted(S.required_env.items())),
        "override_script": S.override_script, "override_dropin": S.override_dropin,
        "dropin_text": commands.dropin_text(S.override_script, dict(S.required_env)),
        "min_gb": 4.0, "write": True, "host": "t", "items": steps_core.serving_wanted(S, set()),
    }  # fmt: skip
    return sv.Override(**RUN, **{**base, **over})


# -- begin --------------------------------------------------------------------


def test_begin_records_where_the_run_begins_and_a_changed_host_stops_it(twin):
    checked = run(twin, begin(), "check", "records")
    assert checked.verdict == "noop" and checked.text.startswith("recorded where the run begins")
    j = journal_of(twin)
    profile = twin.exec(["readlink", "-f", "/nix/var/nix/profiles/system"]).stdout.strip()
    assert j["recorded_profile"] == profile and j["recorded_current"] == profile
    assert j["pid_at_start"] == int(unit_props(twin)["MainPID"]) and j["run_id"] == RUN_ID
    assert j["base_head"] == owner_git(twin, "rev-parse", "HEAD").stdout.strip()
    # a plan made from an earlier read: the checkout moved since
    checked = run(twin, begin(expect_head="f" * 40), "check", "plan_changed")
    assert checked.verdict == "give-up" and "the checkout's HEAD is" in checked.text
    assert "the plan read ffffffff" in checked.text and "nothing changed" in checked.text
    # a script rendered for another machine stops before anything, naming both
    checked = run(twin, begin(expect_machine_id="0" * 32), "check", "another_host")
    assert checked.verdict == "give-up" and "rendered for t (machine-id 000" in checked.text
    mine = twin.exec(["cat", "/etc/machine-id"]).stdout.strip()
    assert f"(machine-id {mine})" in checked.text


# -- the memory gate ----------------------------------------------------------


def test_the_gate_passes_and_says_so_and_refuses_below_the_threshold(twin):
    passed = run(twin, gate(), "check", "passes")
    assert passed.verdict == "noop" and passed.text.startswith("memory gate: MemAvailable ")
    assert passed.said["gate"] == passed.text and passed.text.endswith(">= 4 GB")
    refused = run(twin, gate(min_gb=1000.0), "check", "refuses")
    assert refused.verdict == "give-up"
    assert "is below min_mem_available_gb 1000 GB; not restarting the server" in refused.text
    assert refused.said["refused"] == refused.text and "reboot reclaims" in refused.text


# -- hugepages ----------------------------------------------------------------


def test_free_hugepages_above_the_target_go_and_a_second_run_finds_none(twin):
    pool = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
    assert twin.exec(["cat", pool]).stdout.strip() == "4"
    values = sv.Hugepages(**RUN, items=("1048576:2",))
    checked, applied = step(twin, values, "releases")
    assert checked.verdict == "act" and checked.text == "hugepages 1G: 4 -> 2"
    assert applied.verdict == "done" and ("blue", "hugepages 1G: 4 -> 2") in applied.logs
    assert twin.exec(["cat", pool]).stdout.strip() == "2"
    again = run(twin, values, "check", "none_above")
    assert again.verdict == "noop" and again.text == "no free hugepages above the target"


# -- the /run override --------------------------------------------------------


def test_the_seed_override_goes_and_none_is_left_to_remove(make_twin):
    twin = make_twin(with_emergency_override=True)
    values = sv.RemoveOverride(**RUN, unit=UNIT, dropin=S.override_dropin,
                               script=S.override_script)  # fmt: skip
    checked, applied = step(twin, values, "removes_the_seed")
    assert checked.verdict == "act" and applied.verdict == "done"
    assert S.override_dropin in applied.text and S.override_script in applied.text
    assert twin.exec(["test", "-e", S.override_dropin], check=False).returncode == 1
    running = twin.exec(["systemctl", "show", "-P", "ExecStart", UNIT]).stdout
    assert "/run/" not in running  # daemon-reloaded: the store's ExecStart again
    assert run(twin, values, "check", "none").text == "no runtime override to remove"


def test_a_postponed_restart_keeps_the_override(make_twin):
    twin = make_twin(with_emergency_override=True)
    begun(twin)
    run_lib(twin, 'jset "restart_postponed=1 request(s) still in flight"')
    values = sv.RemoveOverride(**RUN, unit=UNIT, dropin=S.override_dropin,
                               script=S.override_script)  # fmt: skip
    kept = run(twin, values, "check", "kept")
    assert kept.verdict == "noop" and kept.text == "kept: 1 request(s) still in flight"


def run_lib(twin: machine.Twin, body: str) -> str:
    """BODY after the host library, run on the twin with this test run's journal."""
    from remedy import host

    argv = ["sh", "-c", host.text("lib.sh") + body, "t", "apply", f"journal={JOURNAL}",
            f"run_id={RUN_ID}"]  # fmt: skip
    proc = subprocess.run([*twin.ssh_argv(), shlex.join(argv)], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    return proc.stdout


def test_the_fallback_override_is_written_whole_then_kept(twin):
    begun(twin)
    checked, applied = step(twin, override(), "writes")
    assert checked.verdict == "act" and applied.verdict == "done", applied
    assert applied.said["override_written"] is True
    mode = twin.exec(["stat", "-c", "%a %U", S.override_script, S.override_dropin]).stdout
    assert mode.split("\n")[:2] == ["755 root", "644 root"]
    script = twin.exec(["cat", S.override_script]).stdout
    assert "--tool-call-parser qwen3_xml" in script and "export QWEN36_SDPA_STREAMING=1" in script
    running = twin.exec(["systemctl", "show", "-P", "ExecStart", UNIT]).stdout
    assert f"path={S.override_script}" in running
    assert journal_of(twin)["pid_at_override"] == int(unit_props(twin)["MainPID"])
    # nothing restarted yet: the server still runs hermes, so it is written again
    assert run(twin, override(), "check").verdict == "act"
    step(twin, restart())  # onto the override
    kept = run(twin, override(), "check", "in_place")
    assert (
        kept.verdict == "noop"
        and kept.text == "the /run override is already in place with qwen3_xml"
    )


def test_the_override_is_pending_while_memory_is_short(twin):
    pending = run(twin, override(min_gb=1000.0), "check", "pending")
    assert pending.verdict == "give-up" and "Pending: the /run override" in pending.text
    assert pending.said["refused"] == pending.text and pending.notes == [pending.text]
    assert twin.exec(["test", "-e", S.override_dropin], check=False).returncode == 1
    # stopped between the removal and the switch: it goes back, whatever memory says
    back, applied = step(twin, override(min_gb=1000.0, putting_back=True), "put_back")
    assert back.verdict == "act" and applied.verdict == "done"


# -- the restart --------------------------------------------------------------


def test_the_restart_restarts_once_and_knows_when_the_switch_did(twin):
    before = int(unit_props(twin)["MainPID"])
    begun(twin)
    checked, applied = step(twin, restart(), "restarts")
    assert checked.verdict == "act" and applied.verdict == "done"
    assert (
        applied.said["restarts"] == 1 and applied.said["restart_reason"] == "fallback: restart now"
    )
    now = int(unit_props(twin)["MainPID"])
    assert now != before
    # in the durable stage, a MainPID other than the one the run began with: the switch did
    already = run(twin, restart(stage="durable", reason="restart now"), "check", "by_the_switch")
    assert already.verdict == "noop"
    assert already.text == (
        f"already restarted (pid {before} -> {now}) by nixos-rebuild switch; not restarting again"
    )
    assert already.said == {
        "restarts": 1,
        "restart_reason": "the switch activated the proven system; restart now",
    }


def test_a_restart_counts_the_request_it_cuts_and_refuses_below_the_gate(twin):
    begun(twin)
    refused = run(twin, restart(min_gb=1000.0), "check", "refused")
    assert refused.verdict == "give-up" and refused.said["refused"] == refused.text
    held = HeldRequest(twin, 60)
    checked, applied = step(twin, restart(server_url=twin.server_url), "cuts")
    assert applied.verdict == "done" and applied.said["requests_cut"] == 1
    assert held.result() == "000"  # the restart cut it


def test_the_fallback_does_not_restart_what_the_policy_keeps(twin):
    begun(twin)
    kept = run(twin, restart(may_restart=False), "check", "policy")
    assert kept.verdict == "noop"
    assert kept.text == "the restart policy allows no restart now; nothing new to run"


# -- the verify ---------------------------------------------------------------


def test_the_verify_fails_on_hermes_and_passes_once_the_override_runs(twin):
    begun(twin)
    failed = run(twin, verify(twin, ready_timeout_s=30), "check", "unparsed")
    assert failed.verdict == "give-up" and failed.said["probe_after"] in ("unparsed", "parsed")
    assert failed.text.startswith("verification failed: ")
    # the server's starts since the run began, from the twin's journal (issue 43 E5)
    assert failed.said["server_starts"] == 0, failed.said
    step(twin, override())
    step(twin, restart())
    passed = run(twin, verify(twin), "check", "parsed")
    assert passed.verdict == "noop" and passed.text == "verified: the tool-call probe is parsed"
    assert passed.said["probe_after"] == "parsed" and passed.said["server_starts"] == 1
    twin.exec(["systemctl", "restart", UNIT])  # as a rollback's activation does: no step says it
    machine.wait_serving(twin)
    fallback = run(twin, verify(twin, stage="fallback", ready_timeout_s=20,
                                items=("want:tool_call_parser=qwen3_coder",)), "check")  # fmt: skip
    assert fallback.said["server_starts"] == 2, fallback.said
    assert fallback.verdict == "give-up" and fallback.said["failed"].startswith(
        "fallback verification failed: the probe is parsed but systemd runs without "
        "tool-call parser qwen3_coder (it has qwen3_xml)"
    )


# -- the drain ----------------------------------------------------------------


def drain(twin: machine.Twin, **over) -> sv.Drain:
    base = {"server_url": twin.server_url, "timeout_s": 2, "urgent": False, "wait_s": 2}
    return sv.Drain(**RUN, **{**base, **over})


def test_the_drain_lets_an_idle_server_restart_and_postpones_a_busy_window_restart(twin):
    begun(twin)
    idle = run(twin, drain(twin), "check", "idle")
    assert idle.verdict == "noop" and idle.text == "the server is idle: no request in flight"
    held = HeldRequest(twin, 30)
    waiting = run(twin, drain(twin, last=False), "check", "waiting")
    assert waiting.verdict == "wait" and waiting.text == "1 running, 0 waiting"
    said = [text for _, text in waiting.logs]
    assert said == [f"waiting up to 2s for an idle server ({twin.server_url}/metrics)"], said
    later = run(twin, drain(twin, last=False, first=False), "check")  # said once a run
    assert later.verdict == "wait" and later.logs == [], later.logs
    urgent = run(twin, drain(twin, urgent=True), "check", "urgent")
    assert urgent.verdict == "noop" and "cutting 1 request(s)" in urgent.text
    checked = run(twin, drain(twin), "check", "postponed")
    why = "1 request(s) still in flight after drain_timeout_s=2: the window restart is postponed"
    assert checked.verdict == "act" and checked.text.startswith(why)
    # the deploy records the check's decision without waiting again
    recorded = step(twin, drain(twin, decided=checked.text), "decided")[1]
    assert recorded.verdict == "done" and recorded.said["restart_postponed"] == checked.text
    assert journal_of(twin)["restart_postponed"] == checked.text
    again = run(twin, drain(twin), "check")
    assert again.verdict == "noop" and again.text.startswith("restart postponed already: ")
    held.result()


def test_a_request_that_completes_within_the_wait_is_waited_for_and_said(twin):
    begun(twin)
    held = HeldRequest(twin, 2)
    done = run(twin, drain(twin, timeout_s=30, wait_s=30), "check", "completed")
    assert done.verdict == "noop" and done.text == "the server is idle: its requests completed"
    assert [text for _, text in done.logs] == [
        f"waiting up to 30s for an idle server ({twin.server_url}/metrics)"
    ]
    assert held.result() == "200"


def test_a_server_that_does_not_answer_has_nothing_to_drain(twin):
    gone = run(twin, drain(twin, server_url="http://127.0.0.1:1"), "check", "unreachable")
    assert gone.verdict == "noop" and gone.text.startswith("the server does not answer (")


# -- the Nix steps --------------------------------------------------------------


def bump(**over) -> sv.Bump:
    base = {"flake_dir": fixtures.NIXOS_DIR, "flake_input": "tt-stack",
            "flake_host": fixtures.FLAKE_HOST, "update": True, "pinned_rev": None,
            "allowed_signers": None, "trusted_signers": None, "required_fix_rev": None,
            "lock_message": "flake.lock: bump tt-stack -> {new} (tt-stack#49)"}  # fmt: skip
    return sv.Bump(**RUN, **{**base, **over})


def prove(**over) -> sv.Prove:
    scope = tuple(
        k
        for k in steps_core.desired.ALL
        if steps_core.desired.BY_KEY[k].durable == steps_core.desired.FLAKE_INPUT
    )
    base = {"flake_dir": fixtures.NIXOS_DIR, "flake_host": fixtures.FLAKE_HOST,
            "flake_input": "tt-stack", "unit": UNIT, "min_gb": 4.0, "nix_memory_max_gb": None,
            "nix_timeout_s": 1800, "build_max_jobs": 1, "build_cores": 2,
            "allow_local_build": False, "checks_default": True,
            "items": (*(f"check:{c}" for c in S.checks[0]),
                      *steps_core.desired.proof_items(S, scope))}  # fmt: skip
    return sv.Prove(**RUN, **{**base, **over})


def test_the_bump_clones_bumps_and_commits_in_a_scratch_clone_only(twin):
    begun(twin)
    head = owner_git(twin, "rev-parse", "HEAD").stdout.strip()
    checked, applied = step(twin, bump(), "bumps")
    assert checked.verdict == "act" and applied.verdict == "done", applied
    j = journal_of(twin)
    assert j["scratch"].startswith("/tmp/remedy-bump.") and j["commits"] == 1
    assert applied.said["new_rev"] == j["new_rev"] and len(j["new_rev"]) == 40
    assert owner_git(twin, "rev-parse", "HEAD").stdout.strip() == head  # untouched
    owner = twin.exec(["stat", "-c", "%U", j["scratch"]]).stdout.strip()
    assert owner == fixtures.OWNER
    log = as_owner(twin, "git", "-C", j["scratch"], "log", "-1", "--format=%s").stdout
    assert log.startswith("flake.lock: bump tt-stack -> " + j["new_rev"][:12])


def test_the_bump_refuses_a_dirty_checkout_and_a_rev_off_the_branch(twin):
    begun(twin)
    twin.exec(["sh", "-c", f"echo '# x' >> {fixtures.NIXOS_DIR}/flake.nix"], user=fixtures.OWNER)
    dirty = run(twin, bump(), "check", "dirty")
    assert dirty.verdict == "give-up" and "has uncommitted changes" in dirty.text
    as_owner(twin, "git", "-C", fixtures.NIXOS_DIR, "checkout", "--", "flake.nix")
    off = step(twin, bump(pinned_rev="9" * 40), "off_the_branch")[1]
    assert off.verdict == "give-up" and f"bump_to {'9' * 40} is not on" in off.text


def test_the_managed_file_is_written_in_the_scratch_clone_and_the_clones_go(twin):
    begun(twin)
    text = "{ ... }:\n{\n  # remedy's managed settings (a test)\n}\n"
    managed = sv.Managed(**RUN, flake_dir=fixtures.NIXOS_DIR, managed_file=S.managed_file,
                         text=text, message="remedy: managed settings (tt-stack#52)",
                         flake_host=fixtures.FLAKE_HOST)  # fmt: skip
    nothing = run(twin, managed, "check", "no_scratch")
    assert nothing.verdict == "give-up"
    assert nothing.text == "no scratch clone to write the managed file in"
    step(twin, bump())
    scratch = journal_of(twin)["scratch"]
    checked, written = step(twin, managed, "writes")
    assert checked.verdict == "act" and written.verdict == "done", written
    held = as_owner(twin, "cat", f"{scratch}/{S.managed_file}").stdout
    assert held == text
    subject = as_owner(twin, "git", "-C", scratch, "log", "-1", "--format=%s").stdout.strip()
    assert subject == "remedy: managed settings (tt-stack#52)"
    assert twin.exec(["test", "-e", f"{fixtures.NIXOS_DIR}/{S.managed_file}"],
                     check=False).returncode != 0  # the checkout is not touched  # fmt: skip
    again = run(twin, managed, "check", "holds")
    assert again.verdict == "noop" and again.text.endswith("already holds the host data's values")

    # a clone a killed run left goes with the run's own
    left = twin.exec(["mktemp", "-d", "/tmp/remedy-bump.XXXXXXXX"], user=fixtures.OWNER)
    removed = sv.ScratchRemoved(**RUN, flake_dir=fixtures.NIXOS_DIR)
    checked, done = step(twin, removed, "removes")
    assert checked.verdict == "act" and done.verdict == "done", done
    assert "removed 1 scratch clone(s) that a killed run left" in done.notes
    for path in (scratch, left.stdout.strip()):
        assert twin.exec(["test", "-e", path], check=False).returncode != 0, path
    none = run(twin, removed, "check", "none")
    assert none.verdict == "noop" and none.text == "no scratch clone"


def test_the_run_drop_ins_the_next_boot_carries_go_without_a_restart(twin):
    pid = unit_props(twin)["MainPID"]
    carrier = f"/run/systemd/system/{UNIT}.d/zz-carrier.conf"
    twin.exec(["mkdir", "-p", f"/run/systemd/system/{UNIT}.d"])
    twin.exec(["sh", "-c", f"printf '[Service]\\nEnvironment=X=1\\n' > {carrier}"])
    twin.exec(["systemctl", "daemon-reload"])
    values = sv.RemoveCarriers(**RUN, unit=UNIT, items=(carrier,))
    checked, done = step(twin, values, "removes")
    assert checked.verdict == "act" and done.verdict == "done", done
    assert twin.exec(["test", "-e", carrier], check=False).returncode != 0
    dropins = twin.exec(["systemctl", "show", "-P", "DropInPaths", UNIT]).stdout
    assert carrier not in dropins  # systemd reloaded
    assert unit_props(twin)["MainPID"] == pid  # no restart
    none = run(twin, values, "check", "none")
    assert none.verdict == "noop"
    assert none.text == "no /run drop-in carries what the next boot holds"


def test_fast_forward_proves_first_and_publishes_what_was_proven(twin):
    begun(twin)
    none = run(twin, sv.FastForward(**RUN, flake_dir=fixtures.NIXOS_DIR), "check", "none")
    assert none.verdict == "noop" and none.text.startswith("no new commit in the scratch clone")
    step(twin, bump())
    unproven = run(twin, sv.FastForward(**RUN, flake_dir=fixtures.NIXOS_DIR), "check",
                   "unproven")  # fmt: skip
    assert unproven.verdict == "give-up"
    assert unproven.text == "nothing was proven: the checkout is not moved"
    proved = step(twin, prove(), "proves")[1]
    assert proved.verdict == "done", proved
    assert proved.said["toplevel"] == journal_of(twin)["toplevel"]
    assert proved.said["flake_checks"] and "switch_changes" not in proved.said  # raw lines
    assert proved.changes, "the switch's changes beyond the settings were not said"
    done = step(twin, sv.FastForward(**RUN, flake_dir=fixtures.NIXOS_DIR), "publishes")[1]
    head = owner_git(twin, "rev-parse", "HEAD").stdout.strip()
    assert done.verdict == "done" and done.said["lock_commit"] == head
    assert journal_of(twin)["lock_commit"] == head


def test_the_proof_refuses_below_the_memory_gate_and_names_what_a_build_lacks(twin):
    begun(twin)
    step(twin, bump())
    refused = step(twin, prove(min_gb=1000.0))[1]
    assert refused.verdict == "give-up" and refused.said["refused"] == refused.text
    assert "not evaluating on the host" in refused.text
    lacking = prove(items=("prove:parser\ttool-call parser\tqwen3_coder",))
    lacks = step(twin, lacking, "lacks")[1]
    assert lacks.verdict == "give-up"
    assert lacks.text.endswith("builds a system without tool-call parser (the fix is not in)")


def test_the_switch_activates_what_was_proven_and_the_rollback_returns(twin):
    begun(twin)
    step(twin, bump())
    step(twin, prove())
    step(twin, sv.FastForward(**RUN, flake_dir=fixtures.NIXOS_DIR))
    before = twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip()
    switch = sv.Switch(**RUN, toplevel=None, set_profile=True, action="switch", unit=UNIT,
                       lock_wait_s=5, server_url=None)  # fmt: skip
    switched = step(twin, switch, "switches")[1]
    top = journal_of(twin)["toplevel"]
    assert switched.verdict == "done" and switched.said["switch_exit"] == 0
    assert twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip() == top
    rollback = sv.Rollback(**RUN, flake_dir=fixtures.NIXOS_DIR, flake_host=fixtures.FLAKE_HOST,
                           min_gb=4.0, lock_wait_s=5, host="t", unit=UNIT)  # fmt: skip
    back = step(twin, rollback, "rolls_back")[1]
    assert back.verdict == "done" and back.said["rolled_back"] is True
    assert back.said["lock_reverted"] == journal_of(twin)["lock_commit"]
    assert twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip() == before
    assert f"system profile set back to {before}" in back.notes


def test_a_switch_that_exits_100_stays_the_boot_default_and_is_not_rolled_back(twin):
    begun(twin)
    step(twin, bump())
    step(twin, prove())
    twin.exec(
        ["sh", "-c", "mkdir -p /etc/nixos-twin && touch /etc/nixos-twin/init-interface-changed"]
    )
    switch = sv.Switch(**RUN, toplevel=None, set_profile=True, action="switch", unit=UNIT,
                       lock_wait_s=5, server_url=None)  # fmt: skip
    answered = step(twin, switch, "exit_100")[1]
    assert answered.verdict == "give-up" and answered.said["switch_exit"] == 100
    assert answered.said["boot_pending"] == journal_of(twin)["toplevel"]
    assert "exited 100: the init interface changed" in answered.text
    rollback = sv.Rollback(**RUN, flake_dir=fixtures.NIXOS_DIR, flake_host=fixtures.FLAKE_HOST,
                           min_gb=4.0, lock_wait_s=5, host="t", unit=UNIT)  # fmt: skip
    kept = run(twin, rollback, "check", "not_after_100")
    assert kept.verdict == "noop" and kept.text.startswith("the switch exited 100")


def test_exit_4_with_the_serving_unit_failed_falls_back(twin):
    begun(twin)
    step(twin, bump())
    step(twin, prove())
    twin.exec(["sh", "-c", f"mkdir -p /etc/nixos-twin && echo {UNIT} > /etc/nixos-twin/fail-units"])
    switch = sv.Switch(**RUN, toplevel=None, set_profile=True, action="switch", unit=UNIT,
                       lock_wait_s=5, server_url=None)  # fmt: skip
    answered = step(twin, switch, "exit_4_serving")[1]
    assert answered.verdict == "give-up", answered
    assert answered.said["switch_exit"] == 4 and UNIT in answered.said["switch_failed_units"]
    assert answered.text.startswith(f"switch-to-configuration exited 4: {UNIT} is not active")


def outcome(**over) -> sv.Outcome:
    values = {"plan_path": "durable", "reasons": "x", "old_rev": "", "flake_input": "tt-stack",
              "unhealthy": "", **over}  # fmt: skip
    return sv.Outcome(**{**RUN, **values})


def test_the_outcome_program_classifies_what_this_runs_steps_answered(twin):
    """Issue 42: the run's outcome is decided once, on the host, from what its steps
    answered (lib.sh keeps it beside the run journal): a memory gate that stops the run
    is "refused", exit 1; a stop request makes it interrupted, on the path it reached
    (none); a run that does nothing and leaves a hung server is unhealthy, exit 4. It
    changes nothing, and another run's answers are not this run's."""
    begun(twin)
    kept = JOURNAL.removesuffix(".json") + ".answers"
    staged = {"when": "durable", "failure": "stops", "path": "durable"}
    gated = run(twin, gate(min_gb=1000.0, **staged), "apply")
    assert gated.verdict == "give-up" and gated.said["refused"] == gated.text
    mode = twin.exec(["stat", "-c", "%u %a", kept]).stdout.split()
    assert mode == ["0", "600"], mode
    assert f"say refused {gated.text}" in twin.exec(["cat", kept]).stdout
    before = twin.exec(["cat", kept, JOURNAL]).stdout
    refused = run(twin, outcome(), "check", "refused")
    assert refused.verdict == "give-up" and refused.text == f"REFUSED: {gated.text}"
    said = refused.said
    assert (said["outcome_result"], said["outcome_exit"], said["outcome_path"]) == (
        "refused", 1, "durable")  # fmt: skip
    assert said["outcome_why"] == gated.text and "VOLATILE" not in said["outcome_line"]
    assert twin.exec(["cat", kept, JOURNAL]).stdout == before  # it changed nothing
    stop = "interrupted by SIGINT during 'Memory gate before Nix evaluates and builds'"
    cut = run(twin, outcome(stopped=stop), "check", "interrupted")
    assert (cut.said["outcome_result"], cut.said["outcome_exit"]) == ("interrupted", 130)
    assert cut.said["outcome_path"] == "none" and cut.text == f"INTERRUPTED: {stop}"
    hung = "unhealthy: the probe is unreachable (timed out) and the server was not restarted"
    sick = run(twin, outcome(run_id="another", plan_path="noop", reasons="in sync",
                             unhealthy=hung), "check", "unhealthy")  # fmt: skip
    assert (sick.said["outcome_result"], sick.said["outcome_exit"]) == ("unhealthy", 4)
    assert sick.said["outcome_line"] == "nothing to do: in sync"
    assert sick.said["outcome_why"] == hung and sick.said["outcome_restarts"] == 0
