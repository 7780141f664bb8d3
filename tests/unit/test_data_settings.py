"""Managed settings as data (issue 31): the files, their check, one model for all, adopt.

The snapshots are twin recordings (tests.facts.record): ``runtime_debug`` is a
converged twin on which a person added
``/run/systemd/system/tenstorrent-serving.service.d/zz-debug.conf`` with
``Environment=VLLM_LOGGING_LEVEL=DEBUG`` and restarted the server.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import facts.serving
from remedy import metrics
from remedy.cli.settings import settings as settings_cli
from remedy.core.config import adopt, desired, volatile
from remedy.core.config import data_settings as data
from remedy.core.config.host_data import from_host_data
from remedy.core.readings import sections
from remedy.core.readings.runtime import ServingProcess
from remedy.core.readings.snapshot import SettingReadings, read_readings
from remedy.core.render import report
from remedy.core.run import plan, steps
from remedy.errors import ConfigError

PROJECT = Path(__file__).resolve().parents[2]
FIXTURES = PROJECT / "tests" / "facts" / "serving.HostSnapshot"
DEBUG = "/run/systemd/system/tenstorrent-serving.service.d/zz-debug.conf"
LOGGING = """issue: tt-stack#60
kind: environment
name: VLLM_LOGGING_LEVEL
value: DEBUG
urgency: window
"""
MAX_MAP = """issue: tt-stack#61
kind: sysctl
name: vm.max_map_count
value: 2097152
urgency: now
"""


def snapshot(case: str):
    lines = json.loads((FIXTURES / f"{case}.json").read_text())["output"]
    return facts.serving.HostSnapshot().process(lines)


def host(**data_):
    return from_host_data("cfx-llm2", data_)


def written(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path


@pytest.fixture
def managed():
    """Manage the data settings of the files given (as desired would load them)."""
    before = desired.DATA

    def use(tmp_path: Path, **files: str) -> tuple[data.DataSetting, ...]:
        found = data.load(written(tmp_path, **files))
        desired.use(found)
        return found

    yield use
    desired.use(before)


# ----------------------------------------------------------------------- the files


def test_each_problem_names_the_file_its_line_and_the_field(tmp_path):
    bad = LOGGING.replace("value: DEBUG", "value: 3").replace("urgency: window", "urgency: soon")
    where = written(
        tmp_path,
        **{
            "bad": bad + "colour: red\n",
            "kind": LOGGING.replace("kind: environment", "kind: cgroup"),
            "flag": "issue: tt-stack#62\nkind: flag\nname: --max-num-seqs\nvalue: '16'\n"
            "urgency: window\n",
            "secret": LOGGING.replace("VLLM_LOGGING_LEVEL", "HF_TOKEN"),
            "path": MAX_MAP + "option: boot.kernel.sysctl.'vm.x'\n",
        },
    )
    said = [str(p) for p in data.check(where).problems]
    rel = str(tmp_path)
    assert said == [
        f"{rel}/bad.yaml:4: $.value: the value of an environment variable is a string: quote "
        "it (got 3)",
        f"{rel}/bad.yaml:5: $.urgency: 'soon' is not one of now, window, reboot",
        f"{rel}/bad.yaml:6: $.colour: unknown field 'colour'; a setting has: fallback, hosts, "
        "issue, kind, label, name, option, urgency, value",
        f"{rel}/flag.yaml:2: $.kind: {data.FLAG_OPTION}",
        f"{rel}/kind.yaml:2: $.kind: 'cgroup' is not one of environment, flag, sysctl, "
        "unit-property",
        f"{rel}/path.yaml:6: $.option: \"boot.kernel.sysctl.'vm.x'\" "
        + data.PATTERN_WORDS[("option",)],
        f"{rel}/secret.yaml:3: $.name: HF_TOKEN {data.SECRET}",
    ]


def test_two_settings_for_one_thing_are_refused_naming_both(tmp_path):
    where = written(tmp_path, a=LOGGING, b=LOGGING.replace("DEBUG", "INFO"))
    (problem,) = data.check(where).problems
    assert problem.file.endswith("/b.yaml") and problem.where == "$.name"
    assert f"as {tmp_path}/a.yaml does" in problem.message
    with pytest.raises(data.SettingsInvalid, match="b.yaml"):
        data.load(where)


VLLM_A = "issue: tt-stack#70\nkind: environment\nname: VLLM_A\nvalue: '1'\nurgency: window\n"


def prop(name: str, value: str, extra: str = "") -> str:
    return (f"issue: tt-stack#71\nkind: unit-property\nname: {name}\nvalue: {value}\n"
            f"urgency: window\n{extra}")  # fmt: skip


def flag(name: str, option: str) -> str:
    return (f"issue: tt-stack#72\nkind: flag\nname: {name}\nvalue: true\nurgency: window\n"
            f"option: {option}\nfallback: none\n")  # fmt: skip


def test_a_variable_set_twice_through_environment_and_its_property_is_refused(tmp_path):
    """Issue 43 D: environment VLLM_A=1 and unit-property Environment="VLLM_A=2" passed
    the check, and every --restart now run then restarted the server for it."""
    where = written(tmp_path, a=VLLM_A, b=prop("Environment", "VLLM_A=2"))
    (problem,) = data.check(where).problems
    said = str(problem)
    assert said.startswith(f"{tmp_path}/b.yaml:4: $.value: ") and f"{tmp_path}/a.yaml" in said
    assert "the variable VLLM_A" in said, said
    with pytest.raises(data.SettingsInvalid, match="VLLM_A") as refused:
        data.load(where)
    assert "a.yaml" in str(refused.value) and "b.yaml" in str(refused.value)
    runner = CliRunner()
    checked = runner.invoke(settings_cli, ["check", "--dir", str(where)])
    assert checked.exit_code == 1 and "settings OK" not in checked.output, checked.output
    assert all(len(line) <= 80 for line in checked.output.splitlines()), checked.output


@pytest.mark.parametrize(
    ("first", "second", "what", "where"),
    [
        # the property sets it on one host only
        (VLLM_A, prop("Environment", "VLLM_B=1", "hosts:\n  cfx-llm2: VLLM_B=1 VLLM_A=2\n"),
         "the variable VLLM_A", "$.hosts.cfx-llm2"),
        # a property that unsets or passes it
        (VLLM_A, prop("UnsetEnvironment", "VLLM_A"), "the variable VLLM_A", "$.value"),
        (VLLM_A, prop("PassEnvironment", "HOME VLLM_A"), "the variable VLLM_A", "$.value"),
        # an option path written out (quoted) where the other's default goes
        (VLLM_A, VLLM_A.replace("VLLM_A", "VLLM_C").replace("#70", "#73")
         + 'option: systemd.services."tenstorrent-serving".environment.VLLM_A\n',
         "the variable VLLM_A", "$.option"),
        # one switch, both ways (vLLM's --X / --no-X)
        (flag("--enforce-eager", "services.tenstorrent-serving.extraArgs"),
         flag("--no-enforce-eager", "services.tenstorrent-serving.moreArgs"),
         "the flag --enforce-eager", "$.name"),
    ],
    ids=["hosts-environment", "unset", "pass", "option-path", "no-flag"],
)  # fmt: skip
def test_two_settings_that_set_one_thing_are_refused_naming_both(
    tmp_path, first, second, what, where
):
    found = written(tmp_path, a=first, b=second)
    (problem,) = data.check(found).problems
    assert problem.file == f"{tmp_path}/b.yaml" and problem.where == where, str(problem)
    assert what in problem.message and f"{tmp_path}/a.yaml" in problem.message, str(problem)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        (prop("Environment", "QWEN36_SDPA_STREAMING=0"), "QWEN36_SDPA_STREAMING"),
        (flag("--no-enable-prefix-caching", "services.tenstorrent-serving.extraArgs"),
         "--enable-prefix-caching"),
    ],
    ids=["environment-property", "no-flag"],
)  # fmt: skip
def test_a_setting_that_sets_one_of_remedy_s_own_is_refused(tmp_path, text, what):
    (problem,) = data.check(written(tmp_path, a=text)).problems
    assert what in problem.message and data.OWN in problem.message, str(problem)


def test_settings_of_different_things_pass(tmp_path):
    where = written(
        tmp_path,
        a=VLLM_A,
        b=prop("Environment", "VLLM_B=2 VLLM_AA=3"),
        c=prop("UnsetEnvironment", "VLLM_D"),
        d=flag("--enforce-eager", "services.tenstorrent-serving.extraArgs"),
    )
    assert data.check(where).problems == []


def test_remedy_settings_check_exits_1_on_a_problem_and_0_on_good_files(tmp_path):
    (tmp_path / "good").mkdir()
    good = written(tmp_path / "good", vllm=LOGGING, max=MAX_MAP)
    runner = CliRunner()
    ok = runner.invoke(settings_cli, ["check", "--dir", str(good)])
    assert ok.exit_code == 0 and "2 settings OK" in ok.output, ok.output
    (tmp_path / "bad").mkdir()
    bad = written(tmp_path / "bad", x=LOGGING.replace("tt-stack#60", "tt-stack60"))
    failed = runner.invoke(settings_cli, ["check", "--dir", str(bad), "--json"])
    doc = json.loads(failed.output)
    assert failed.exit_code == 1 and not doc["ok"]
    assert doc["problems"][0]["field"] == "$.issue" and doc["problems"][0]["line"] == 1


def test_a_bad_file_is_refused_before_anything_connects(tmp_path):
    written(tmp_path, x=LOGGING.replace("kind: environment", "kind: cgroup"))
    env = {**os.environ, "REMEDY_SETTINGS_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "remedy.cli.main", "status", "inventory/production.py"],
        capture_output=True, text=True, cwd=PROJECT, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{tmp_path}/x.yaml:2: $.kind: 'cgroup' is not one of" in " ".join(proc.stderr.split())


# ----------------------------------------------------------------------- one model


def test_an_adopted_variable_is_judged_reported_and_made_durable_like_the_six(tmp_path, managed):
    managed(tmp_path, vllm=LOGGING)
    s, snap = host(), snapshot("runtime_debug")
    (drift,) = [d for d in desired.drifts(snap, s) if d.key == "VLLM_LOGGING_LEVEL"]
    assert (drift.desired, drift.live, drift.next_boot) == ("DEBUG", "DEBUG", "unset")
    assert drift.state == desired.VOLATILE and drift.issue == "tt-stack#60"
    # the drop-in that carries it is the setting's runtime form, no longer unmanaged
    assert DEBUG not in {e.subject for e in volatile.unmanaged(snap, s)}
    status = report.host_status("cfx-llm2", s, snap)
    assert status.exit_code == 3
    assert ("VLLM_LOGGING_LEVEL", "DEBUG", "unset") in [
        (r.label, r.now, r.after_reboot) for r in status.rows
    ]
    assert "after a reboot the VLLM_LOGGING_LEVEL is unset, not DEBUG" in status.problems
    keys = [d["key"] for d in status.to_json()["settings"]]
    assert keys[-1] == "VLLM_LOGGING_LEVEL"
    # the plan writes it into remedy's file at its option path, forced, with its issue
    # (the recording's checkout has an uncommitted flake.lock, which blocks the durable path)
    snap = dataclasses.replace(snap, checkout=dataclasses.replace(snap.checkout, changes=[]))
    p = plan.plan_restore(snap, s, desired.ALL)
    assert p.path == plan.DURABLE and p.managed_text is not None
    assert (
        "  systemd.services.tenstorrent-serving.environment.VLLM_LOGGING_LEVEL = "
        'lib.mkForce "DEBUG";' in p.managed_text.splitlines()
    )
    assert f"  # tt-stack#60: VLLM_LOGGING_LEVEL DEBUG ({tmp_path}/vllm.yaml)" in p.managed_text
    assert "VLLM_LOGGING_LEVEL" in p.prove
    # live holds it: no restart for it now (window urgency, and nothing drifted live)
    assert not p.restart_expected


def test_metrics_carry_a_data_setting_under_its_name(tmp_path, managed):
    managed(tmp_path, vllm=LOGGING)
    drifts = desired.drifts(snapshot("runtime_debug"), host())
    h = metrics.HostMetrics(
        "cfx-llm2",
        True,
        drift={d.key: d.state == desired.DRIFTED for d in drifts},
        volatile={d.key: d.state == desired.VOLATILE for d in drifts},
    )
    path = tmp_path / "remedy.prom"
    metrics.write(str(path), [h], 0.0, 1.0)
    assert 'remedy_setting_volatile{host="cfx-llm2",setting="VLLM_LOGGING_LEVEL"} 1.0' in (
        path.read_text()
    )


def test_a_setting_urgency_is_what_the_restart_policy_reads(tmp_path, managed):
    managed(tmp_path, vllm=LOGGING.replace("window", "now"))
    assert desired.urgency("VLLM_LOGGING_LEVEL", host()) == "now"
    override = host(restart_urgency={"hugepages": "now"})
    assert desired.urgency("hugepages", override) == "now"
    # the server lacks it live: its urgency restarts now
    snap = snapshot("durable")
    p = plan.plan_restore(snap, host(), desired.ALL)
    assert "VLLM_LOGGING_LEVEL" in p.restart.urgent


def test_a_host_may_have_its_own_desired_value(tmp_path, managed):
    managed(tmp_path, vllm=LOGGING + "hosts:\n  cfx-llm2: INFO\n")
    (drift,) = [d for d in desired.drifts(snapshot("runtime_debug"), host()) if d.key ==
                "VLLM_LOGGING_LEVEL"]  # fmt: skip
    assert drift.desired == "INFO" and drift.state == desired.DRIFTED
    other = from_host_data("other", {})
    assert desired.BY_KEY["VLLM_LOGGING_LEVEL"].desired(other) == "DEBUG"


def test_each_kind_in_remedy_s_file_and_in_the_manual_script(tmp_path, managed):
    managed(
        tmp_path,
        vllm=LOGGING,
        max=MAX_MAP,
        limit="issue: tt-stack#63\nkind: unit-property\nname: LimitNOFILE\nvalue: 65536\n"
        "urgency: window\n",
        seqs="issue: tt-stack#64\nkind: flag\nname: --max-num-seqs\nvalue: '16'\n"
        "urgency: window\noption: services.tenstorrent-serving.extraArgs\n",
    )
    text = desired.managed_nix(host(), desired.ALL)
    assert '  boot.kernel.sysctl."vm.max_map_count" = lib.mkForce 2097152;' in text
    assert (
        "  systemd.services.tenstorrent-serving.serviceConfig.LimitNOFILE = lib.mkForce 65536;"
        in text
    )
    # a flag is added to the list of extra arguments, not forced over the others'
    assert '  services.tenstorrent-serving.extraArgs = [ "--max-num-seqs" "16" ];' in text
    s = host()
    # the proof of a built system reads every kind (its sysctl.d files, its unit)
    assert all(desired.BY_KEY[k].provable for k in ("VLLM_LOGGING_LEVEL", "vm.max_map_count"))
    from remedy.core.run.plan import Proof

    built = Proof("/nix/store/x", "/s", "qwen3_xml", {}, sysctl={}, properties={})
    lacks = " ".join(built.missing(s, ("vm.max_map_count", "LimitNOFILE")))
    assert "max_map_count" in lacks and "LimitNOFILE" in lacks, lacks
    built = Proof(
        "/nix/store/x", "/s", "qwen3_xml", {},
        sysctl={"vm.max_map_count": "2097152"}, properties={"LimitNOFILE": "65536"},
    )  # fmt: skip
    assert built.missing(s, ("vm.max_map_count", "LimitNOFILE")) == []


def test_a_flag_is_read_from_what_the_server_runs(tmp_path, managed):
    managed(
        tmp_path,
        seqs="issue: tt-stack#64\nkind: flag\nname: --max-num-seqs\nvalue: '16'\n"
        "urgency: window\noption: services.tenstorrent-serving.extraArgs\n",
    )
    snap = snapshot("durable")
    proc = snap.runtime.process
    argv = [*proc.argv, "--max-num-seqs", "16"]
    snap = dataclasses.replace(snap, runtime=dataclasses.replace(
        snap.runtime, process=ServingProcess(proc.pid, argv, proc.environ)))  # fmt: skip
    (drift,) = [d for d in desired.drifts(snap, host()) if d.key == "--max-num-seqs"]
    assert (drift.live, drift.next_boot, drift.state) == ("16", "absent", desired.VOLATILE)
    assert "--max-num-seqs" not in {e.subject for e in volatile.unmanaged(snap, host())}


# ----------------------------------------------------------------------- sysctls


def with_sysctl(snap, now: str, after: str = "1048576", running: str | None = None):
    readings = SettingReadings(
        {"vm.max_map_count": now},
        {"vm.max_map_count": after},
        {},
        {},
        ("/nix/var/nix/profiles/system/etc/sysctl.d/60-nixos.conf",),
        {"vm.max_map_count": running or after},
    )
    return dataclasses.replace(snap, readings=readings)


def test_a_sysctl_set_at_runtime_is_unmanaged_volatile_state_until_adopted(tmp_path, managed):
    snap, s = with_sysctl(snapshot("durable"), "2097152"), host()
    (entry,) = volatile.unmanaged(snap, s)
    assert entry.kind == volatile.SYSCTL
    assert entry.text() == (
        "vm.max_map_count: 2097152 (set at runtime); after reboot: 1048576 (sysctl.d)"
    )
    assert volatile.counts([entry])["sysctl"] == 1
    # a pending generation's value is no runtime state
    pending = with_sysctl(snapshot("durable"), "2097152", running="2097152")
    assert volatile.unmanaged(pending, s) == []
    managed(tmp_path, max=MAX_MAP)
    assert volatile.unmanaged(snap, s) == []
    (drift,) = [d for d in desired.drifts(snap, s) if d.key == "vm.max_map_count"]
    assert (drift.live, drift.next_boot, drift.state) == ("2097152", "1048576", "volatile")
    # a sysctl is no reason to restart the server
    assert "vm.max_map_count" not in (plan.plan_restore(snap, s, desired.ALL).restart.urgent)


def test_the_readings_of_one_round_trip():
    text = "\n".join(
        [
            "@@remedy:section unit.show",
            "Id=tenstorrent-serving.service",
            "FragmentPath=/etc/systemd/system/tenstorrent-serving.service",
            "@@remedy:section unit.files",
            "@@remedy:file /etc/systemd/system/tenstorrent-serving.service /nix/store/u",
            "[Service]",
            "LimitNOFILE=4096",
            "@@remedy:section unit.next",
            "@@remedy:file /nix/var/nix/profiles/system/etc/systemd/system/"
            "tenstorrent-serving.service /nix/store/v",
            "[Service]",
            "LimitNOFILE=65536",
            "MemoryMax=8G",
            "@@remedy:section settings.sysctl_next",
            "@@remedy:file /p/etc/sysctl.d/60-nixos.conf /nix/store/w",
            "vm.max_map_count=1048576",
            "-net/core/somaxconn = 4096",
            "kernel.* = 1",
            "@@remedy:section settings.sysctl_running",
            "@@remedy:section settings.sysctl_now",
            "sysctl vm.max_map_count 2097152",
            "sysctl kernel.printk 3 4 1 3",
            "@@remedy:section settings.properties",
            "LimitNOFILE=4096",
            sections.END,
        ]
    )
    r = read_readings(sections.split(text.splitlines(), "HostSnapshot"))
    assert r.sysctl_now == {"vm.max_map_count": "2097152", "kernel.printk": "3 4 1 3"}
    assert r.sysctl_next == {"vm.max_map_count": "1048576", "net.core.somaxconn": "4096"}
    assert r.properties_now == {"LimitNOFILE": "4096"}
    assert r.properties_next == {"LimitNOFILE": "65536", "MemoryMax": "8G"}
    prop = data.DataSetting("x", data.PROPERTY, "MemoryMax", "8G", "window", "t#1")
    assert data.normalized(prop, "8G") == str(8 * 1024**3)


# ----------------------------------------------------------------------- adopt


def test_adopt_writes_the_live_value_of_a_drop_ins_variable():
    a = adopt.adoption(
        snapshot("runtime_debug"), host(), "Environment=VLLM_LOGGING_LEVEL=DEBUG",
        "tt-stack#60", "window", "cfx-llm2",
    )  # fmt: skip
    assert a.setting.file == "settings/vllm-logging-level.yaml"
    assert a.text.endswith(LOGGING)
    assert a.text.startswith(
        f"# Adopted by `remedy adopt` from cfx-llm2:\n# {DEBUG}: VLLM_LOGGING_LEVEL=DEBUG\n"
    )
    # the drop-in's path, or the bare name, say the same
    for subject in (DEBUG, "VLLM_LOGGING_LEVEL"):
        same = adopt.adoption(snapshot("runtime_debug"), host(), subject, "tt-stack#60",
                              "window", "cfx-llm2")  # fmt: skip
        assert same.text == a.text


@pytest.mark.parametrize(
    ("subject", "why"),
    [
        ("mitigations", "a kernel parameter of the command line"),
        ("/run/systemd/system/ssh.service.d/zz-debug.conf", "only a drop-in of"),
        ("Environment=VLLM_LOGGING_LEVEL=INFO", "VLLM_LOGGING_LEVEL is DEBUG live, not INFO"),
        ("vm.swappiness", "is not a sysctl that differs from the next boot"),
        ("--enforce-eager", "is not a flag the server runs with"),
    ],
)
def test_adopt_refuses_what_no_kind_can_hold_with_the_reason(subject, why):
    with pytest.raises(adopt.AdoptRefused, match=why):
        adopt.adoption(snapshot("runtime_debug"), host(), subject, "t#1", "window", "h")


def test_adopt_refuses_a_secret_and_a_flag_without_its_option():
    snap = snapshot("durable")
    proc = snap.runtime.process
    argv = [*proc.argv, "--max-num-seqs", "16"]
    env = {**proc.environ, "HF_TOKEN": "hf_secret"}
    snap = dataclasses.replace(snap, runtime=dataclasses.replace(
        snap.runtime, process=ServingProcess(proc.pid, argv, env)))  # fmt: skip
    with pytest.raises(adopt.AdoptRefused, match="HF_TOKEN looks like a secret") as refused:
        adopt.adoption(snap, host(), "HF_TOKEN", "t#1", "window", "h")
    assert "hf_secret" not in str(refused.value)
    with pytest.raises(adopt.AdoptRefused, match="a flag needs flag_option: the option path"):
        adopt.adoption(snap, host(), "--max-num-seqs", "t#1", "window", "h")
    flag = adopt.adoption(snap, host(), "--max-num-seqs", "t#1", "window", "h",
                          "services.tenstorrent-serving.extraArgs")  # fmt: skip
    assert (flag.setting.kind, flag.setting.value) == (data.FLAG, "16")


def test_adopt_types_a_sysctls_number():
    snap = with_sysctl(snapshot("durable"), "2097152")
    a = adopt.adoption(snap, host(), "vm.max_map_count", "tt-stack#61", "now", "cfx-llm2")
    assert a.setting.value == 2097152 and a.text.endswith(MAX_MAP)


# ----------------------------------------------------------------------- on a host


def test_nixos_s_message_names_the_file_whose_option_path_the_host_lacks(tmp_path):
    found = data.load(written(tmp_path, max=MAX_MAP, vllm=LOGGING))
    error = (
        "The option `boot.kernel.sysctl' does not exist. Definition values:\n"
        '- In `/nix/store/x-remedy.nix\': { "vm.max_map_count" = 2097152; }'
    )
    (problem,) = data.evaluation_problems(found, "tenstorrent-serving.service", error)
    assert problem.file.endswith("/max.yaml") and problem.where == "$.kind"
    assert problem.message.startswith('boot.kernel.sysctl."vm.max_map_count": the host')
    assert "The option `boot.kernel.sysctl' does not exist." in problem.message
    assert data.evaluation_problems(found, "x.service", "error: infinite recursion") == []


def test_the_project_s_own_setting_files_pass_the_check():
    report = data.check(PROJECT / "settings")
    assert report.problems == [], "\n".join(map(str, report.problems))


def with_dropin(snap, text: str, path: str = DEBUG):
    """SNAP with the runtime file PATH holding TEXT."""
    files = [f for f in snap.runtime.files if f.path != path]
    files.append(dataclasses.replace(snap.runtime.files[0], path=path, link=None, text=text))
    return dataclasses.replace(snap, runtime=dataclasses.replace(snap.runtime, files=files))


def test_a_secret_is_adopted_only_as_a_file_reference(tmp_path, managed):
    snap = with_dropin(snapshot("runtime_debug"),
                       "[Service]\nEnvironmentFile=/run/secrets/vllm.env\n")  # fmt: skip
    a = adopt.adoption(snap, host(), "EnvironmentFile=/run/secrets/vllm.env", "tt-stack#62",
                       "window", "cfx-llm2")  # fmt: skip
    assert (a.setting.kind, a.setting.name, a.setting.value) == (
        data.PROPERTY, "EnvironmentFile", "/run/secrets/vllm.env")  # fmt: skip
    assert a.text.endswith(
        "kind: unit-property\nname: EnvironmentFile\nvalue: /run/secrets/vllm.env\n"
        "urgency: window\n"
    )
    # the file is good, and the setting is read as systemctl show writes it
    (tmp_path / "a").mkdir()
    managed(tmp_path / "a", **{"environment-file": a.text})
    assert (
        data.normalized(
            desired.BY_KEY["EnvironmentFile"].source, "/run/secrets/vllm.env (ignore_errors=no)"
        )
        == "/run/secrets/vllm.env"
    )
    shown = dataclasses.replace(snap.readings, properties_now={
        "EnvironmentFiles": "/run/secrets/vllm.env (ignore_errors=no)"})  # fmt: skip
    (drift,) = [d for d in desired.drifts(dataclasses.replace(snap, readings=shown), host())
                if d.key == "EnvironmentFile"]  # fmt: skip
    assert drift.live == "/run/secrets/vllm.env"
    assert facts.serving.settings_env()["REMEDY_UNIT_PROPERTIES"] == "EnvironmentFiles"
    # a secret's value never: refused, saying how to adopt its file reference instead
    secret = with_dropin(snapshot("runtime_debug"), "[Service]\nEnvironment=HF_TOKEN=hf_x\n")
    with pytest.raises(adopt.AdoptRefused, match="adopt a file reference instead") as refused:
        adopt.adoption(secret, host(), "Environment=HF_TOKEN=hf_x", "t#1", "window", "h")
    assert "EnvironmentFile=/run/secrets/vllm.env" in str(refused.value)
    assert "hf_x" not in str(refused.value)
    inline = with_dropin(snapshot("runtime_debug"), "[Service]\nSetCredential=tok:hf_x\n")
    with pytest.raises(adopt.AdoptRefused, match="SetCredential looks like a secret"):
        adopt.adoption(inline, host(), "SetCredential=tok:hf_x", "t#1", "window", "h")


def test_restart_urgency_names_a_data_setting_too(tmp_path, managed):
    with pytest.raises(ConfigError, match="VLLM_LOGGING_LEVEL") as refused:
        host(restart_urgency={"VLLM_LOGGING_LEVEL": "now"})
    assert "is not a managed setting: use tool_call_parser" in str(refused.value)
    managed(tmp_path, vllm=LOGGING)
    s = host(restart_urgency={"VLLM_LOGGING_LEVEL": "now"})
    assert desired.urgency("VLLM_LOGGING_LEVEL", s) == "now"
    with pytest.raises(ConfigError, match=r"VLLM_LOGGIN\b.*use .*VLLM_LOGGING_LEVEL"):
        host(restart_urgency={"VLLM_LOGGIN": "now"})


# ----------------------------------------------------------------------- the fallback


def fallback_step(snap, s, name: str = "Write the /run fallback override"):
    p = plan.plan_restore(snap, s, desired.ALL)
    (step,) = [x for x in steps.plan_steps(p, snap, s, "t").steps if x.template.name == name]
    return step.values


def sysctls_of(values) -> dict[str, str]:
    return dict(i[7:].split("=", 1) for i in values.items if i.startswith("sysctl:"))


def test_the_fallback_carries_a_drifted_variable_and_sets_a_sysctl(tmp_path, managed):
    managed(tmp_path, vllm=LOGGING.replace("window", "now"), max=MAX_MAP)
    s = host(durable=False)  # the durable path is blocked: the fallback runs
    snap = with_sysctl(snapshot("durable"), "1048576")  # neither holds live
    p = plan.plan_restore(snap, s, desired.ALL)
    assert p.path == plan.FALLBACK and p.restart_expected
    assert "the /run override carries VLLM_LOGGING_LEVEL (volatile: a reboot reverts it)" in (
        p.reasons
    )
    values = fallback_step(snap, s)
    assert values.skip is None and values.write
    assert "\nEnvironment=VLLM_LOGGING_LEVEL=DEBUG\n" in values.dropin_text
    assert values.lacking == "VLLM_LOGGING_LEVEL"
    assert sysctls_of(values) == {"vm.max_map_count": "2097152"}
    # the restart onto it is not skipped as "the override it ran before"
    assert not fallback_step(snap, s, "Restart onto the /run override").override_ran_before
    # the manual script runs the same program with the same values
    words = values.words()
    assert "sysctl:vm.max_map_count=2097152" in words and f"dropin_text={values.dropin_text}" in (
        words
    )


def test_a_sysctl_alone_is_set_without_an_override_or_a_restart(tmp_path, managed):
    managed(tmp_path, max=MAX_MAP)
    s = host(durable=False)
    snap = with_sysctl(snapshot("durable"), "1048576")
    p = plan.plan_restore(snap, s, desired.ALL)
    assert p.path == plan.FALLBACK and not p.restart_expected
    assert "sysctl -w vm.max_map_count=2097152 (volatile: a reboot reverts it)" in p.reasons
    values = fallback_step(snap, s)
    assert (values.skip, values.write, sysctls_of(values)) == (
        None, False, {"vm.max_map_count": "2097152"})  # fmt: skip
    assert "VLLM_LOGGING_LEVEL" not in values.dropin_text
    assert not fallback_step(snap, s, "Restart onto the /run override").may_restart
    # live holds it: nothing differs, the step says so and does nothing
    held = with_sysctl(snapshot("durable"), "2097152")
    values = fallback_step(held, s)
    assert sysctls_of(values) == {} and values.skip == (
        "the server runs the wanted parser and environment; no override needed"
    )
