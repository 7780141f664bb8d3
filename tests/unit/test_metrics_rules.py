"""The shipped alert rules (issue 45 items 2-3): promtool takes them and their unit
cases pass; every alert has a summary, a description and a runbook_url naming a runbook
of runbooks/; every alert has a case where it fires, one where it does not, and one
where it resolves; every metric a rule reads is one remedy writes; CI runs promtool
before any test."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from remedy import metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "remedy.rules.yml"
CASES = ROOT / "monitoring" / "remedy.rules.test.yml"


def alerts() -> dict[str, dict]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for group in doc["groups"] for r in group["rules"]}


def promtool(*argv: str) -> subprocess.CompletedProcess:
    if not shutil.which("promtool"):
        pytest.skip("promtool is not installed (scripts/setup.sh installs Debian's prometheus)")
    return subprocess.run(["promtool", *argv], capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules_and_their_unit_cases_pass():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(CASES))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_rule_promtool_rejects_fails_its_check(tmp_path):
    broken = tmp_path / "remedy.rules.yml"
    broken.write_text(RULES.read_text().replace("remedy_host_up == 0", "remedy_host_up ==", 1))
    assert broken.read_text() != RULES.read_text()
    assert promtool("check", "rules", str(broken)).returncode != 0


def test_the_unit_cases_fail_when_a_bound_changes(tmp_path):
    """The cases pin each bound: a rule that waits longer than shipped fails them."""
    (tmp_path / "remedy.rules.yml").write_text(RULES.read_text().replace("for: 1h", "for: 2h"))
    shutil.copy(CASES, tmp_path / CASES.name)
    assert promtool("test", "rules", str(tmp_path / CASES.name)).returncode != 0


def test_every_alert_says_what_and_names_the_runbook_that_fixes_it():
    for name, rule in alerts().items():
        notes = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(notes), name
        assert re.fullmatch(r"runbooks/\d{3}-[a-z0-9-]+\.yaml", notes["runbook_url"]), name
        assert (ROOT / notes["runbook_url"]).is_file(), (name, notes["runbook_url"])
        assert rule["labels"]["severity"] in ("critical", "warning"), name


def test_every_alert_has_a_firing_a_quiet_and_a_resolving_case():
    doc = yaml.safe_load(CASES.read_text())
    assert doc["rule_files"] == [RULES.name]
    cases: dict[str, list] = {}
    for group in doc["tests"]:
        for case in group["alert_rule_test"]:
            cases.setdefault(case["alertname"], []).append(case)
    assert set(cases) == set(alerts())
    for name, its in cases.items():

        def minutes(case):
            t = case["eval_time"]
            return int(t[:-1]) * {"m": 1, "h": 60, "d": 1440}[t[-1]]

        its = sorted(its, key=minutes)
        firing = [i for i, c in enumerate(its) if c["exp_alerts"]]
        assert firing, f"{name}: no case where it fires"
        assert any(not c["exp_alerts"] for c in its[: firing[0]]), f"{name}: no quiet case"
        assert any(not c["exp_alerts"] for c in its[firing[-1] + 1 :]), f"{name}: never resolves"
        # the other host of the case never fires: the alert is per host
        assert all(a["exp_labels"]["host"] == "oc1" for c in its for a in c["exp_alerts"])


def test_every_metric_a_rule_reads_is_one_remedy_writes(tmp_path):
    prom = tmp_path / "remedy.prom"
    host = metrics.HostMetrics(
        "oc1", True, drift={"x": True}, volatile={"x": True}, probe_ok=True,
        mem_available_bytes=1, mem_threshold_bytes=2, bump_blocked="why",
        unmanaged_volatile={"runtime-unit": 1}, boot_pending=True,
        restart_pending={"x": True}, last_run_restarts=1, exit_code=3, run_ok=True,
        reboot=metrics.RebootMetrics({"memory_headroom": True}, 1, 2, 3, 2, 1, 0),
        guard_state="missing", guard_last_refusal_s=1,
    )  # fmt: skip
    metrics.write(str(prom), [host], 1.0, 1.0, {"converged": 1}, interval_s=600)
    written = {line.split()[0].split("{")[0] for line in prom.read_text().splitlines()
               if line and not line.startswith("#")}  # fmt: skip
    for name, rule in alerts().items():
        read = set(re.findall(r"\bremedy_[a-z_]+", rule["expr"]))
        assert read and read <= written, (name, read - written)


def test_ci_runs_promtool_before_any_test():
    script = (ROOT / "scripts" / "test.sh").read_text()
    check = script.index("promtool check rules monitoring/remedy.rules.yml")
    test = script.index("promtool test rules monitoring/remedy.rules.test.yml")
    assert check < test < script.index("-m pytest")
    assert "set -euo pipefail" in script[:check]  # a rejection ends the script
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "need_apt+=(prometheus)" in setup and "need_apt+=(prometheus-node-exporter)" in setup
