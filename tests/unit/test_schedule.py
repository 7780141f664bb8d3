"""The scheduled convergence units: rendered from values, checked by systemd itself."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from remedy.core.run import schedule
from remedy.errors import ConfigError


def spec(**kw) -> schedule.Schedule:
    base = dict(
        remedy="/opt/remedy/bin/remedy",
        inventory="/etc/remedy/production.py",
        project="/opt/remedy-src",
    )
    return schedule.Schedule(**{**base, **kw})


def test_the_service_runs_converge_with_absolute_paths_and_the_timer_repeats():
    s = spec(interval="15min", textfile="/var/lib/node_exporter/remedy.prom")
    service, timer = schedule.service_unit(s), schedule.timer_unit(s)
    assert (
        "ExecStart=/opt/remedy/bin/remedy converge /etc/remedy/production.py --unattended "
        "--wait 30 "
        "--textfile /var/lib/node_exporter/remedy.prom"
    ) in service
    assert "Type=oneshot" in service and "WorkingDirectory=/opt/remedy-src" in service
    for line in ("OnBootSec=1min", "OnUnitActiveSec=15min", "RandomizedDelaySec=30s",
                 "WantedBy=timers.target"):  # fmt: skip
        assert line in timer.splitlines()
    # Persistent= applies to OnCalendar= only, which the timer does not use
    assert not any(x.startswith(("Persistent", "OnCalendar")) for x in timer.splitlines())
    # exit 3 (drift or volatile, reported in the metrics) does not fail the unit
    assert "SuccessExitStatus=3 6" in service.splitlines()
    assert schedule.parse_exec_start(service)[:3] == [
        "/opt/remedy/bin/remedy",
        "converge",
        "/etc/remedy/production.py",
    ]


@pytest.mark.parametrize(
    "span, seconds", [("10min", 600), ("1h 30min", 5400), ("90", 90), ("1s", 1), ("2d", 172800)]
)
def test_span_seconds(span, seconds):
    assert schedule.span_seconds(span) == seconds


def test_check_only_adds_check_and_the_nixos_snippet_says_the_same():
    s = spec(check_only=True)
    assert "--check" in s.argv()
    nix = schedule.nixos_snippet(s)
    assert "systemd.services.remedy-converge" in nix and "systemd.timers.remedy-converge" in nix
    assert (
        '"/opt/remedy/bin/remedy converge /etc/remedy/production.py --unattended --wait 30 '
        '--check"' in nix
    )
    assert 'OnUnitActiveSec = "10min";' in nix


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("interval", "every ten minutes", "not a systemd time span"),
        ("interval", "0", "shorter than a second"),
        ("interval", "0s", "shorter than a second"),
        ("interval", "500ms", "shorter than a second"),
        ("interval", "0min 999ms", "shorter than a second"),
        ("interval", "99999999999999999d", "longer than a year"),  # systemd overflows
        ("interval", "366d", "longer than a year"),
        ("inventory", "inventory/production.py", "must be an absolute path"),
        ("project", '/opt/a "b"', "without quotes"),
        ("textfile", "remedy.prom", "must be an absolute path"),
    ],
)
def test_bad_values_are_refused_naming_the_field(field, value, words):
    with pytest.raises(ConfigError, match=words):
        spec(**{field: value})


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze missing")
def test_systemd_analyze_verify_accepts_both_units(tmp_path):
    remedy = tmp_path / "remedy"
    remedy.write_text("#!/bin/sh\n")
    remedy.chmod(0o755)
    s = spec(remedy=str(remedy), project=str(tmp_path))
    (tmp_path / schedule.SERVICE).write_text(schedule.service_unit(s))
    (tmp_path / schedule.TIMER).write_text(schedule.timer_unit(s))
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / schedule.SERVICE),
         str(tmp_path / schedule.TIMER)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


# -- install: validate everything first, leave nothing half-written ------------------


@pytest.fixture
def unit_dir(tmp_path, monkeypatch):
    from remedy.cli import schedule as cli

    where = tmp_path / "units"
    where.mkdir()
    monkeypatch.setattr(cli, "UNIT_DIR", where)
    inventory = tmp_path / "inv.py"
    inventory.write_text("hosts = [('cfx-llm2', {'ssh_hostname': '127.0.0.1'})]\n")
    return where, inventory


def _install(*args):
    from click.testing import CliRunner

    from remedy.cli import schedule as cli

    return CliRunner().invoke(cli.schedule, ["install", *args], catch_exceptions=True)


def test_a_relative_textfile_is_refused_before_anything_is_written(unit_dir):
    where, inventory = unit_dir
    result = _install(str(inventory), "--textfile", "remedy.prom")
    assert result.exit_code != 0
    assert "--textfile 'remedy.prom' must be an absolute path" in str(result.exception)
    assert list(where.iterdir()) == []


@pytest.mark.skipif(
    __import__("os").path.exists("/etc/systemd/system/" + schedule.TIMER),
    reason="this machine has a real remedy schedule: the undo would touch it",
)
def test_an_install_that_fails_after_writing_puts_the_units_back(unit_dir):
    """systemd does not load units from a temporary directory (and this machine may run
    no systemd at all): the enable fails after the write, as a daemon-reload that
    rejects a unit would. The earlier units come back; a first install leaves none."""
    where, inventory = unit_dir
    first = _install(str(inventory))
    assert first.exit_code != 0
    assert "nothing left installed" in str(first.exception), first.output
    assert list(where.iterdir()) == []
    (where / schedule.SERVICE).write_text("# the earlier service\n")
    (where / schedule.TIMER).write_text("# the earlier timer\n")
    again = _install(str(inventory), "--interval", "1h")
    assert "the earlier units restored" in str(again.exception)
    assert (where / schedule.SERVICE).read_text() == "# the earlier service\n"
    assert (where / schedule.TIMER).read_text() == "# the earlier timer\n"
    assert sorted(p.name for p in where.iterdir()) == sorted([schedule.SERVICE, schedule.TIMER])
