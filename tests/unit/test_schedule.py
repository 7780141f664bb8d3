"""The scheduled convergence units: rendered from values, checked by systemd itself."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

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
        "--interval 15min --textfile /var/lib/node_exporter/remedy.prom"
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
        ("remedy", '/opt/a "b"/remedy', "systemd refuses"),
        ("remedy", "/opt/a\\b/remedy", "systemd refuses"),
        ("textfile", "/var/lib/a\nb.prom", "control character"),
        ("project", "/opt/remedy ", "ends in a blank"),
        ("wait_s", float("nan"), "--wait nan"),
        ("wait_s", float("inf"), "--wait inf"),
        ("wait_s", -1.0, "--wait -1"),
        ("textfile", "remedy.prom", "must be an absolute path"),
    ],
)
def test_bad_values_are_refused_naming_the_field(field, value, words):
    with pytest.raises(ConfigError, match=words):
        spec(**{field: value})


# What systemd 257 did with these in a twin (a oneshot printing its argv, its cwd and
# its environment): ExecStart= words in double quotes with \\ and \" escaped, %% for a
# %, $$ for a $ in an argument (the executable's path is never expanded: $ stays);
# Environment= the same without $$; WorkingDirectory= and Description= only %%.
ODD = "/var/lib/x y/x%n $HOME\\q\"it's"


def test_paths_with_blanks_percent_dollar_quotes_and_backslashes_run_as_given():
    s = spec(
        remedy="/opt/re medy%n$HOME/bin/remedy",
        inventory=ODD + ".py",
        project=ODD,
        textfile=ODD + ".prom",
    )
    lines = schedule.service_unit(s).splitlines()
    exec_start = (
        'ExecStart="/opt/re medy%%n$HOME/bin/remedy" converge '
        '"/var/lib/x y/x%%n $$HOME\\\\q\\"it\'s.py" --unattended --wait 30 --interval 10min '
        "--textfile "
        '"/var/lib/x y/x%%n $$HOME\\\\q\\"it\'s.prom"'
    )
    assert exec_start in lines, "\n".join(lines)
    assert "WorkingDirectory=/var/lib/x y/x%%n $HOME\\q\"it's" in lines
    assert 'Environment="REMEDY_PROJECT=/var/lib/x y/x%%n $HOME\\\\q\\"it\'s"' in lines
    assert any(x.startswith("Description=") and "x%%n" in x for x in lines)
    # status reads back what was given, word for word
    assert schedule.parse_exec_start("\n".join(lines)) == s.argv()
    assert s.argv()[2] == ODD + ".py" and s.argv()[-1] == ODD + ".prom"


def test_the_nixos_snippet_carries_the_same_escapes_in_nix_strings():
    s = spec(inventory=ODD + ".py", project=ODD, textfile=ODD + ".prom")
    nix = schedule.nixos_snippet(s).splitlines()
    # NixOS writes serviceConfig's strings into the unit as they are
    assert '    WorkingDirectory = "/var/lib/x y/x%%n $HOME\\\\q\\"it\'s";' in nix, nix
    environment = (
        '    Environment = "\\"REMEDY_PROJECT=/var/lib/x y/x%%n $HOME\\\\\\\\q\\\\\\"it\'s\\"";'
    )
    assert environment in nix, nix
    # the script is a shell script: shell quoting, in a Nix string
    (script,) = [x for x in nix if x.startswith("  script = ")]
    assert shlex.quote(ODD + ".prom").replace("\\", "\\\\").replace('"', '\\"') in script


def test_the_exec_line_parser_reads_what_systemd_reads():
    words = schedule.exec_words
    assert words('/bin/x "a b" plain \'s q\' "tab\\there" "\\x41" ";"') == [
        "/bin/x", "a b", "plain", "s q", "tab\there", "A", ";",
    ]  # fmt: skip
    assert words('"/a %%n$HOME/x" "%%n $$HOME"') == ["/a %n$HOME/x", "%n $HOME"]
    # a unit written before quoting: plain words
    assert words("/opt/remedy converge /etc/inv.py --wait 30") == [
        "/opt/remedy", "converge", "/etc/inv.py", "--wait", "30",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("wait_s", "written"),
    [(30.0, "30"), (0.0, "0"), (0.5, "0.5"), (1e300, "1e+300"), (1 / 3, "0.3333333333333333")],
)
def test_the_wait_is_written_so_the_run_reads_the_same_number(wait_s, written):
    argv = spec(wait_s=wait_s).argv()
    assert argv[argv.index("--wait") + 1] == written and float(written) == wait_s


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze missing")
def test_systemd_analyze_verify_accepts_units_with_odd_paths(tmp_path):
    where = tmp_path / "re medy%n$HOME"
    where.mkdir()
    remedy = where / "remedy"
    remedy.write_text("#!/bin/sh\n")
    remedy.chmod(0o755)
    odd = tmp_path / "x y%n $HOME\\q\"it's"
    odd.mkdir()
    s = spec(remedy=str(remedy), project=str(odd), inventory=f"{odd}/inv %n.py",
             textfile=f"{odd}/x%n.prom")  # fmt: skip
    (tmp_path / schedule.SERVICE).write_text(schedule.service_unit(s))
    (tmp_path / schedule.TIMER).write_text(schedule.timer_unit(s))
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / schedule.SERVICE),
         str(tmp_path / schedule.TIMER)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


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


# A stand-in for systemctl and journalctl: this machine's systemd is never touched. It
# logs each call to calls.log and answers `show UNIT -p NAME…` from units.json
# ({unit: {property: value}}); `enable` fails, as on a machine whose systemd does not
# load units from a temporary directory.
FAKE = """import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.log"), "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if os.path.basename(sys.argv[0]).startswith("journalctl"):
    print(open(os.path.join(here, "journal.txt")).read(), end="")
    sys.exit(0)
args = sys.argv[1:]
if args and args[0] == "enable":
    print("Failed to enable unit: Unit file remedy-converge.timer does not exist.",
          file=sys.stderr)
    sys.exit(1)
if args and args[0] == "show":
    props = json.load(open(os.path.join(here, "units.json"))).get(args[1], {})
    names = [args[i + 1] for i, a in enumerate(args) if a == "-p"]
    for name in names:
        print(f"{name}={props.get(name, '')}")
"""


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    """The stand-in: (its directory, a function that sets what `show` answers)."""
    import sys

    from remedy.cli import schedule as cli

    where = tmp_path / "systemd"
    where.mkdir()
    for name in ("systemctl.py", "journalctl.py"):
        (where / name).write_text(FAKE)
    (where / "units.json").write_text("{}")
    (where / "journal.txt").write_text("")
    monkeypatch.setattr(cli, "SYSTEMCTL", [sys.executable, str(where / "systemctl.py")])
    monkeypatch.setattr(cli, "JOURNALCTL", [sys.executable, str(where / "journalctl.py")])

    def answer(units: dict, journal: str = "") -> None:
        (where / "units.json").write_text(json.dumps(units))
        (where / "journal.txt").write_text(journal)

    return where, answer


@pytest.fixture
def unit_dir(tmp_path, monkeypatch, systemd):
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


def test_an_install_that_fails_after_writing_puts_the_units_back(unit_dir):
    """The enable fails after the write, as a daemon-reload that rejects a unit would.
    The earlier units come back; a first install leaves none."""
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


@pytest.mark.parametrize(
    ("wait", "words"),
    [("nan", "--wait nan"), ("1e400", "--wait inf"), ("inf", "--wait inf")],
)
def test_a_wait_the_run_would_refuse_is_refused_before_anything_is_written(
    unit_dir, systemd, wait, words
):
    where, inventory = unit_dir
    result = _install(str(inventory), "--wait", wait)
    assert isinstance(result.exception, ConfigError), result.output
    assert words in str(result.exception) and "finite" in str(result.exception)
    assert list(where.iterdir()) == []
    assert not (systemd[0] / "calls.log").exists()


def test_what_the_converge_refuses_before_connecting_is_refused_at_install(unit_dir, systemd):
    where, inventory = unit_dir
    inventory.write_text(
        "hosts = [('a', {'ssh_hostname': '127.0.0.1', 'max_restarting': 1}),\n"
        "         ('b', {'ssh_hostname': '127.0.0.2', 'max_restarting': 2})]\n"
    )
    result = _install(str(inventory))
    assert isinstance(result.exception, ConfigError), result.output
    assert "'max_restarting' differs between hosts" in str(result.exception)
    assert list(where.iterdir()) == [] and not (systemd[0] / "calls.log").exists()
    # a --check-only schedule runs converge --check, which takes no rollout keys
    assert not isinstance(_install(str(inventory), "--check-only").exception, ConfigError)


# -- status: the last run's result and exit code, the next run --------------------------


def _status(*args):
    from click.testing import CliRunner

    from remedy.cli import schedule as cli

    return CliRunner().invoke(cli.schedule, ["status", *args], catch_exceptions=False)


def installed(where, answer, service: dict, timer: dict | None = None, journal: str = ""):
    s = spec(inventory="/etc/remedy/my fleet.py")
    (where / schedule.SERVICE).write_text(schedule.service_unit(s))
    active = {"LoadState": "loaded", "ActiveState": "active", "LastTriggerUSec": "",
              "NextElapseUSecRealtime": "", "NextElapseUSecMonotonic": "1h 5min 2.5s"}  # fmt: skip
    answer({schedule.SERVICE: service, schedule.TIMER: {**active, **(timer or {})}}, journal)


EXITED_2 = {
    "ActiveState": "failed", "Result": "exit-code", "ExecMainCode": "1", "ExecMainStatus": "2",
    "ExecMainStartTimestamp": "Sat 2026-12-05 02:34:46 UTC",
    "ExecMainExitTimestamp": "Sat 2026-12-05 02:34:47 UTC",
}  # fmt: skip


def test_status_says_a_failed_run_and_exits_with_its_code(unit_dir, systemd):
    """Issue 43 F5: status exited 0 after a run that exited 2, with a blank next."""
    where, _inv = unit_dir
    installed(where, systemd[1], EXITED_2, journal="error: host a: data key 'x' ...\n")
    result = _status()
    assert result.exit_code == 2, result.output
    out = result.output
    assert "last run: Sat 2026-12-05 02:34:47 UTC: exit 2 (bad input" in " ".join(out.split())
    assert "failed" in out
    (timer_line,) = [x for x in out.splitlines() if x.startswith("timer:")]
    assert re.search(r"next run \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", timer_line), timer_line
    assert "command: /opt/remedy/bin/remedy converge '/etc/remedy/my fleet.py'" in out
    lines = out.splitlines()
    (said,) = [i for i, x in enumerate(lines) if x.startswith("next: ")]
    assert lines.index("last report:") < said and "systemctl start" in " ".join(lines[said:])
    assert all(len(x) <= 80 for x in out.splitlines()), out
    doc = json.loads(_status("--json").output)
    assert doc["last_run"]["exit_code"] == 2 and doc["last_run"]["failed"]
    assert doc["command"][2] == "/etc/remedy/my fleet.py" and doc["next_run"]
    assert _status("--json").exit_code == 2


@pytest.mark.parametrize(
    ("service", "code", "words"),
    [
        ({**EXITED_2, "ActiveState": "inactive", "Result": "success", "ExecMainStatus": "3"},
         3, "exit 3 (volatile or drifted"),
        ({**EXITED_2, "ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"},
         0, "exit 0 (healthy and durable"),
        ({**EXITED_2, "Result": "signal", "ExecMainCode": "2", "ExecMainStatus": "9"},
         1, "killed by SIGKILL"),
        ({**EXITED_2, "Result": "timeout", "ExecMainCode": "2", "ExecMainStatus": "15"},
         1, "ran past TimeoutStartSec"),
        ({"ActiveState": "inactive", "Result": "success", "ExecMainCode": "0",
          "ExecMainStatus": "0", "ExecMainStartTimestamp": "", "ExecMainExitTimestamp": ""},
         0, "none yet"),
        ({**EXITED_2, "ActiveState": "activating", "ExecMainExitTimestamp": ""},
         0, "running now"),
    ],
    ids=["volatile", "in-sync", "killed", "timeout", "never", "running"],
)  # fmt: skip
def test_status_says_each_kind_of_last_run(unit_dir, systemd, service, code, words):
    where, _inv = unit_dir
    installed(where, systemd[1], service)
    result = _status()
    assert result.exit_code == code, result.output
    assert words in " ".join(result.output.split()), result.output


def test_status_of_a_stopped_timer_exits_1(unit_dir, systemd):
    where, _inv = unit_dir
    ok = {**EXITED_2, "ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}
    installed(where, systemd[1], ok, timer={"ActiveState": "inactive"})
    result = _status()
    assert result.exit_code == 1 and "is not running" in result.output


@pytest.mark.parametrize(
    ("monotonic", "at"),
    [("1h 5min 2.5s", 4802.5), ("2min 500ms", 1020.5), ("1d 3us", 87300.000003),
     ("infinity", None), ("", None), ("0", None)],
)  # fmt: skip
def test_the_next_run_of_a_monotonic_timer_in_wall_clock_time(monotonic, at):
    """NextElapseUSecRealtime is blank for a timer of OnBootSec= and OnUnitActiveSec=
    only (so status showed a blank next); the monotonic one counts from boot. Now: 1000 s
    of wall clock, 100 s since boot."""
    timer = {"NextElapseUSecRealtime": "", "NextElapseUSecMonotonic": monotonic}
    found = schedule.next_elapse(timer, now=1000.0, since_boot=100.0)
    assert found == (None if at is None else pytest.approx(at))


# -- --limit (issue 45 item 7) ------------------------------------------------------------


def test_limit_is_carried_into_the_run_word_for_word():
    s = spec(limit=("g01", "odd host $x%n"), textfile="/var/lib/n/remedy.prom")
    service = schedule.service_unit(s)
    words = schedule.parse_exec_start(service)
    assert words[words.index("--limit") :][:4] == ["--limit", "g01", "--limit", "odd host $x%n"]
    assert '--limit "odd host $$x%%n"' in service
    assert "--limit g01 --limit 'odd host $x%n'" in schedule.nixos_snippet(s)


def test_limit_runs_only_those_hosts_and_refuses_a_name_the_inventory_lacks(unit_dir, systemd):
    where, inventory = unit_dir
    inventory.write_text(
        "hosts = [('a', {'ssh_hostname': '127.0.0.1'}), ('b', {'ssh_hostname': '127.0.0.2'})]\n"
    )
    result = _install(str(inventory), "--limit", "a", "--limit", "c")
    assert isinstance(result.exception, ConfigError), result.output
    assert "--limit c: not in" in str(result.exception) and "hosts: a, b" in str(result.exception)
    assert list(where.iterdir()) == [] and not (systemd[0] / "calls.log").exists()
    from click.testing import CliRunner

    from remedy.cli import schedule as cli

    shown = CliRunner().invoke(cli.schedule, ["show", str(inventory), "--limit", "b"])
    assert shown.exit_code == 0, shown.output
    (exec_start,) = [line for line in shown.output.splitlines() if line.startswith("ExecStart=")]
    words = schedule.exec_words(exec_start.removeprefix("ExecStart="))
    assert words[words.index("--limit") :][:2] == ["--limit", "b"] and words.count("--limit") == 1


def test_a_limit_a_unit_file_cannot_carry_is_refused():
    with pytest.raises(ConfigError, match=re.escape("--limit 'a\\nb'")):
        spec(limit=("a\nb",))


def test_success_exit_status_is_what_the_readme_says_and_why():
    """SuccessExitStatus=3 6: a volatile (3) or boot-pending (6) run did its work and the
    metrics carry the state; 1, 2, 4 and 5 fail the unit. The README says the same."""
    assert schedule.SUCCESS_EXIT.split() == ["3", "6"]
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert "`SuccessExitStatus=3 6`" in readme
    assert "SuccessExitStatus=3:" not in readme and 'SuccessExitStatus = "3";' not in readme


# -- --reboot-if-needed (issue 46 item 3) ---------------------------------------------


def test_reboot_if_needed_reaches_the_timers_converge_as_converge_reads_it(unit_dir, systemd):
    """`schedule show --reboot-if-needed`: the service's ExecStart= and the NixOS script
    run converge --reboot-if-needed, which converge's own parser takes as the flag (the
    reboot keeps to each host's restart_window there); without it, no reboot."""
    from click.testing import CliRunner

    from remedy.cli import converge as converge_cli
    from remedy.cli import schedule as cli

    _where, inventory = unit_dir

    def shown(*extra) -> tuple[list[str], str]:
        out = CliRunner().invoke(cli.schedule, ["show", str(inventory), *extra])
        assert out.exit_code == 0, out.output
        (line,) = [x for x in out.output.splitlines() if x.startswith("ExecStart=")]
        return schedule.exec_words(line.removeprefix("ExecStart=")), out.output

    def converge_params(words: list[str]) -> dict:
        assert words[1] == "converge", words
        return converge_cli.converge.make_context("converge", words[2:]).params

    words, output = shown("--reboot-if-needed", "--textfile", "/tmp/remedy.prom")
    assert converge_params(words)["reboot_if_needed"] is True, words
    assert converge_params(words)["check"] is False and "--unattended" in words
    (script,) = [x for x in output.splitlines() if x.startswith("  script = ")]
    assert " --reboot-if-needed" in script
    assert "and reboot in their windows" in output  # the units' descriptions say it
    words, output = shown()
    assert converge_params(words)["reboot_if_needed"] is False, words
    assert "--reboot-if-needed" not in output


def test_reboot_if_needed_with_check_only_is_refused_before_anything_is_written(unit_dir, systemd):
    where, inventory = unit_dir
    result = _install(str(inventory), "--check-only", "--reboot-if-needed")
    assert isinstance(result.exception, ConfigError), result.output
    assert "a run that changes nothing reboots nothing" in str(result.exception)
    assert list(where.iterdir()) == [] and not (systemd[0] / "calls.log").exists()
