"""The run's outcome program (remedy/host/steps/outcome.sh), without a host: what the
steps of a run answered (the file lib.sh ``kept`` writes beside the run journal) in,
its result, path, exit code and line out, under dash and bash --posix.

Two kinds of cases: answers recorded on twins (tests/twin/test_engines_agree.py with
REMEDY_RECORD_ANSWERS=tests/outcome_answers, by the deploy and by the manual script
from the same state), and the cases the Python outcome decided before (issue 42: the
outcome is decided once, on the host), written as the steps answer them.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from remedy import host

SHELLS = [["dash"], ["bash", "--posix"]]
RECORDED = Path(__file__).resolve().parents[1] / "outcome_answers"
RUN_ID = "r1"


def step(name: str, when: str, failure: str, verdict: str, why: str = "", **said) -> str:
    """One step's kept answer: its line, then what it said (a list: an item a line)."""
    out = [f"step {name} {when} {failure} {verdict} {why}".rstrip()]
    for key, value in said.items():
        for item in value if isinstance(value, list) else [value]:
            out.append(f"say{'+' if isinstance(value, list) else ''} {key} {item}")
    return "\n".join(out) + "\n"


def note(text: str) -> str:
    return f"note {text}\n"


def told(tmp_path, shell, *steps: str, run_id: str = RUN_ID, **values) -> dict:
    """What the outcome program answers for the run whose steps answered STEPS."""
    journal = tmp_path / "run-u.json"
    kept = tmp_path / "run-u.answers"
    kept.write_text(f"run {run_id}\n" + "".join(steps))
    kept.chmod(0o600)
    words = {"journal": str(journal), "run_id": RUN_ID, "plan_path": "durable",
             "reasons": "x", "old_rev": "", "flake_input": "tt-stack", "unhealthy": "",
             "stopped": "", **values}  # fmt: skip
    return run(shell, [f"{k}={v}" for k, v in words.items()])


def run(shell, words: list[str]) -> dict:
    ran = subprocess.run(
        [*shell, "-c", host.step_program("outcome"), "remedy-outcome", "check", *words],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    out = {}
    for line in ran.stdout.splitlines():
        word, _, rest = line.removeprefix("@@remedy ").partition(" ")
        if word == "say" and rest.startswith("outcome_"):
            key, _, value = rest.partition(" ")
            out[key.removeprefix("outcome_")] = value
        elif word in ("noop", "give-up"):
            out["verdict"], out["said"] = word, rest
    out["exit"] = int(out["exit"])
    return out


@pytest.fixture(params=SHELLS, ids=lambda s: " ".join(s))
def shell(request):
    return request.param


# -- answers recorded on twins --------------------------------------------------------

# what each recorded case must be, written from what the case is (not from a run)
EXPECTED = {
    "seed": ("ok", "durable", 0),
    "dirty_checkout": ("ok", "fallback", 3),  # planned on the fallback
    "memory_gate": ("refused", "durable", 1),
    "bump_to_off_the_tip": ("ok", "durable", 0),
    "unsigned_tip": ("ok", "durable+fallback", 3),  # the bump gave the durable path up
    "pending_generation": ("ok", "durable", 0),  # restart now: the pending one runs
    "killed_run": ("ok", "durable", 0),  # the rerun finished it
}


def recorded() -> list[Path]:
    return sorted(RECORDED.glob("*.json")) if RECORDED.is_dir() else []


@pytest.mark.parametrize("case", recorded(), ids=lambda p: p.stem)
def test_a_recorded_run_is_classified_as_what_happened(case, shell, tmp_path):
    data = json.loads(case.read_text())
    state = case.stem.split(".")[0]
    journal = tmp_path / "run-u.json"
    kept = tmp_path / "run-u.answers"
    kept.write_text(data["answers"])
    kept.chmod(0o600)
    words = [f"journal={journal}" if w.startswith("journal=") else w for w in data["words"]]
    done = run(shell, words)
    result, path, code = EXPECTED[state]
    assert (done["result"], done["exit"]) == (result, code), done
    if state == "memory_gate":
        assert "is below min_mem_available_gb 100000 GB" in done["why"], done
        assert done["verdict"] == "give-up" and done["said"].startswith("REFUSED: "), done
        assert "VOLATILE" not in done["line"], done
    else:
        assert done["path"] == path and done["verdict"] == "noop", done
    if code == 3:
        assert "VOLATILE: tool calling rests on the /run override" in done["line"], done
    if state == "seed":  # the proof said its boot lines: runbook 001 changes none of them
        assert "changes params-new " in data["answers"] and "reboot" not in done["line"]
    # from another run's answers nothing is known: this run's steps only
    stale = run(shell, [w if not w.startswith("run_id=") else "run_id=another" for w in words])
    assert "VOLATILE" not in stale["line"] and stale["restarts"] == "0", stale


def test_the_deploy_and_the_manual_script_keep_answers_that_classify_alike(shell, tmp_path):
    """What the deploy's steps kept (check, then apply) and what the manual script's kept
    (apply) give one outcome for the same state."""
    states = {p.stem.split(".")[0] for p in recorded()}
    for state in sorted(states):
        both = {}
        for engine in ("deploy", "manual"):
            case = RECORDED / f"{state}.{engine}.json"
            if not case.exists():
                continue
            data = json.loads(case.read_text())
            (tmp_path / "run-u.answers").write_text(data["answers"])
            (tmp_path / "run-u.answers").chmod(0o600)
            words = [f"journal={tmp_path}/run-u.json" if w.startswith("journal=") else w
                     for w in data["words"]]  # fmt: skip
            done = run(shell, words)
            line = re.sub(r"\b[0-9a-f]{12,40}\b", "<rev>", done["line"])
            done["line"] = re.sub(r"\bt\d+-\d+\b", "<twin>", line)  # the twin's name
            both[engine] = {k: done[k] for k in ("result", "path", "exit", "line")}
        if len(both) == 2:
            assert both["deploy"] == both["manual"], (state, both)


# -- the cases, as the steps answer them ----------------------------------------------

BUMP = step("bump", "durable", "gives-up", "done", "bumped", new_rev="b" * 40)
PROOF_FAILED = step("prove", "durable", "gives-up", "give-up", "needs vllm-tt compiled",
                    durable_failed="needs vllm-tt compiled")  # fmt: skip
OVERRIDE = step("override", "override", "gives-up", "done", "wrote the /run override")
RESTART = step("restart", "fallback", "stops", "done", "restarted", restarts=1)
PARSED = step("verify", "fallback", "stops", "noop", "parsed", probe_after="parsed")
VOLATILE = "VOLATILE: tool calling rests on the /run override"


def test_a_durable_path_that_gave_up_is_durable_plus_fallback_with_its_reason(shell, tmp_path):
    done = told(tmp_path, shell, BUMP, PROOF_FAILED, OVERRIDE, RESTART, PARSED,
                old_rev="a" * 40)  # fmt: skip
    assert (done["result"], done["path"], done["exit"]) == ("ok", "durable+fallback", 3)
    assert "durable path abandoned: needs vllm-tt compiled" in done["line"]
    assert done["new_rev"] == "a" * 40  # the checkout stayed where it was
    assert f"flake.lock left at {'a' * 12}" in done["line"]
    assert done["restarts"] == "1" and VOLATILE in done["line"], done
    assert done["line"].startswith("path durable+fallback; ") and done["verdict"] == "noop"


def test_a_failed_switch_fails_the_run_even_when_the_fallback_holds(shell, tmp_path):
    switch = step("switch", "durable", "gives-up", "give-up", "switch failed",
                  durable_failed="switch failed")  # fmt: skip
    done = told(tmp_path, shell, switch, OVERRIDE)
    assert (done["result"], done["exit"]) == ("failed", 1), done
    assert done["said"] == "FAILED: switch failed"


def test_a_refusal_an_interrupt_and_an_unhealthy_noop(shell, tmp_path):
    low = "h: MemAvailable 0.5 GB is below min_mem_available_gb 100 GB; not restarting"
    gate = step("gate", "fallback", "stops", "give-up", low, refused=low, failed=low)
    refused = told(tmp_path, shell, gate, plan_path="fallback")
    assert (refused["result"], refused["exit"], refused["why"]) == ("refused", 1, low)
    assert VOLATILE not in refused["line"]
    for signal, code in (("SIGINT", 130), ("SIGTERM", 143)):
        why = f"interrupted by {signal} during 'Prove'"
        cut = told(tmp_path, shell, BUMP, stopped=why)
        assert (cut["result"], cut["exit"], cut["path"]) == ("interrupted", code, "none")
        assert cut["said"] == f"INTERRUPTED: {why}"
    hung = "unhealthy: the probe is timeout"
    noop = told(tmp_path, shell, plan_path="noop", reasons="in sync", unhealthy=hung)
    assert (noop["result"], noop["exit"], noop["path"]) == ("unhealthy", 4, "noop")
    assert noop["line"] == "nothing to do: in sync"
    fine = told(tmp_path, shell, plan_path="noop", reasons="in sync")
    assert (fine["result"], fine["exit"], fine["verdict"]) == ("ok", 0, "noop")


def test_volatile_is_said_only_where_the_override_holds_tool_calling(shell, tmp_path):
    assert VOLATILE in told(tmp_path, shell, PROOF_FAILED, OVERRIDE, PARSED)["line"]
    in_place = step("override", "override", "gives-up", "noop", "in place")
    done = told(tmp_path, shell, in_place, PARSED, plan_path="fallback")
    assert VOLATILE in done["line"] and (done["path"], done["exit"]) == ("fallback", 3)
    for verdict in ("give-up", "off"):  # refused, a read-only /run; its stage off
        override = step("override", "override", "gives-up", verdict, "no")
        held = told(tmp_path, shell, PROOF_FAILED, override)
        assert VOLATILE not in held["line"], (verdict, held)
    never = told(tmp_path, shell, PROOF_FAILED)
    assert VOLATILE not in never["line"]


def test_a_failed_fallback_says_what_its_probe_and_the_journal_say(shell, tmp_path):
    """Issue 43 E5: the probe after stayed unparsed: no VOLATILE; the server's starts as
    the host's journal counts them."""
    unparsed = "fallback verification failed: the probe stays unparsed"
    results = [
        step("switch", "durable", "gives-up", "give-up", "switch exit 4",
             durable_failed="switch exit 4", switch_exit=4),
        OVERRIDE,
        step("rollback", "rollback", "gives-up", "done", "rolled back"),
        RESTART,
    ]  # fmt: skip
    verify = step("verify", "fallback", "stops", "give-up", unparsed, probe_after="unparsed",
                  server_starts=2, failed=unparsed)  # fmt: skip
    done = told(tmp_path, shell, *results, verify)
    assert done["result"] == "failed" and VOLATILE not in done["line"], done
    assert "the /run override is in place, but the probe after it is unparsed" in done["line"]
    assert done["restarts"] == "2" and "restarts 2" in done["line"], done
    uncounted = verify.replace("say server_starts 2\n", "")
    assert told(tmp_path, shell, *results, uncounted)["restarts"] == "1"


def test_flake_lock_left_at_the_old_rev_only_where_it_is(shell, tmp_path):
    old, new = "a" * 40, "b" * 40
    kept = told(tmp_path, shell, BUMP, PROOF_FAILED, old_rev=old)
    assert f"flake.lock left at {old[:12]}" in kept["line"] and kept["new_rev"] == old
    forwarded = step("fast_forward", "durable", "gives-up", "done", "fast-forwarded")
    exit_100 = step("switch", "durable", "gives-up", "give-up", "exit 100", boot_pending="/x",
                    durable_failed="exit 100")  # fmt: skip
    stands = told(tmp_path, shell, BUMP, forwarded, exit_100, old_rev=old)
    assert "flake.lock left at" not in stands["line"]
    assert f"flake.lock holds {new[:12]}" in stands["line"] and stands["new_rev"] == new
    assert (stands["path"], stands["exit"]) == ("durable at next boot", 6), stands
    assert "durable at next boot; reboot to activate: /x is the boot default" in stands["line"]
    failed = step("switch", "durable", "gives-up", "give-up", "exit 1", durable_failed="exit 1")
    reverted = step("rollback", "rollback", "gives-up", "done", "back", lock_reverted="c" * 40)
    back = told(tmp_path, shell, BUMP, forwarded, failed, reverted, old_rev=old)
    assert f"flake.lock left at {old[:12]}" in back["line"]


def test_a_rollback_that_could_not_run_is_not_a_failed_rollback(shell, tmp_path):
    lost = "the rollback did not run: the connection to h was lost; ..."
    switch = step("switch", "durable", "gives-up", "give-up", "lost", durable_failed="lost")
    not_run = step("rollback", "rollback", "gives-up", "give-up", lost, rollback_not_run=lost)
    done = told(tmp_path, shell, switch, not_run)
    assert "ROLLBACK FAILED" not in done["line"] and lost in done["line"]
    failed = step("rollback", "rollback", "gives-up", "give-up", "x", rollback_failed="x")
    assert "ROLLBACK FAILED: x" in told(tmp_path, shell, switch, failed)["line"]


def test_a_run_interrupted_took_only_the_path_it_reached(shell, tmp_path):
    """Issue 43 A3: a run stopped in its proof was recorded on path durable, though it
    never switched."""
    stop = {"stopped": "interrupted by SIGTERM during 'Prove'"}
    assert told(tmp_path, shell, BUMP, **stop)["path"] == "none"
    switched = step("switch", "durable", "gives-up", "done", "switched")
    assert told(tmp_path, shell, BUMP, switched, **stop)["path"] == "durable"
    assert told(tmp_path, shell, OVERRIDE, plan_path="fallback", **stop)["path"] == "fallback"
    both = told(tmp_path, shell, switched, OVERRIDE, **stop)
    assert both["path"] == "durable+fallback"
    # a run that ended keeps its plan's path
    assert told(tmp_path, shell, switched)["path"] == "durable"


def test_a_switch_another_held_is_locked(shell, tmp_path):
    held = step("switch", "durable", "gives-up", "give-up", "held", durable_failed="held",
                switch_locked=["nixos-rebuild (pid 7)"])  # fmt: skip
    done = told(tmp_path, shell, held, OVERRIDE, PARSED)
    assert (done["result"], done["exit"]) == ("locked", 5), done
    assert "nixos-rebuild (pid 7)" in done["why"] and VOLATILE not in done["line"]


def test_what_only_a_reboot_activates_is_said_from_the_proofs_boot_lines(shell, tmp_path):
    """system_boot.sh's lines, as the proof said them: the boot files that change and
    the kernel command line as sets of words (a reorder is no change)."""
    proof = (
        step("prove", "durable", "gives-up", "done", "proven").rstrip("\n")
        + "\n"
        + (
            "changes file kernel /nix/store/a-k /nix/store/a-k\n"
            "changes file initrd /nix/store/a-i /nix/store/b-i\n"
            "changes params-old init=/x hugepages=4 quiet\n"
            "changes params-new quiet hugepages=2 init=/x\n"
        )
    )
    done = told(tmp_path, shell, proof, step("switch", "durable", "gives-up", "done", "on"))
    assert done["line"] == (
        "path durable; the new generation needs a reboot for: initrd, the kernel parameters; "
        "restarts 0"
    ), done
    same = proof.replace("hugepages=2", "hugepages=4").replace("/nix/store/b-i", "/nix/store/a-i")
    assert told(tmp_path, shell, same)["line"] == "path durable; restarts 0"
