"""``remedy schedule install|status|remove|show``: converge on a systemd timer.

    remedy schedule install inventory/production.py --interval 10min \
        --textfile /var/lib/node_exporter/textfile/remedy.prom
    remedy schedule status
    remedy schedule show inventory/production.py     # the units, and a NixOS snippet
    remedy schedule remove
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from remedy import fleet, metrics
from remedy import inventory as inventory_mod
from remedy.cli.converge import wait_option
from remedy.console import console, err_console, said_folded
from remedy.core.run import schedule as core
from remedy.errors import EXIT_ERROR, EXIT_VOLATILE, ConfigError, RemedyError, worst

UNIT_DIR = Path("/etc/systemd/system")
# The commands that ask systemd (tests put stand-ins here: never this machine's systemd).
SYSTEMCTL = ["systemctl"]
JOURNALCTL = ["journalctl"]


def _remedy_executable() -> str:
    here = Path(sys.executable).parent / "remedy"
    found = str(here) if here.exists() else shutil.which("remedy")
    if not found:
        raise RemedyError("cannot find the remedy executable to schedule (is it installed?)")
    return str(Path(found).absolute())


def _spec(inventory, interval, check_only, textfile, wait_s, limit=(),
          reboot_if_needed=False) -> core.Schedule:  # fmt: skip
    path = Path(inventory)
    if not path.is_file():
        raise ConfigError(f"inventory {inventory} does not exist")
    inventory_mod.load_inventory(path)  # bad data fails now, not at 3 a.m.
    if textfile and not textfile.startswith("/"):
        raise ConfigError(
            f"--textfile {textfile!r} must be an absolute path: the service does not run "
            "where this command runs (e.g. /var/lib/node_exporter/textfile/remedy.prom)"
        )
    if textfile:
        metrics.check_writable(textfile)
    spec = core.Schedule(
        remedy=_remedy_executable(),
        inventory=str(path.resolve()),
        project=str(fleet.PROJECT),
        interval=interval,
        check_only=check_only,
        textfile=str(Path(textfile).resolve()) if textfile else None,
        wait_s=wait_s,
        limit=tuple(limit),
        reboot_if_needed=reboot_if_needed,
    )
    # what the run's converge refuses before it connects, refused now: a --limit host
    # the inventory lacks (or only builders), and for a run that applies, the rollout keys
    from remedy.cli import converge

    host_data, names, _fleet = converge._host_data(spec.inventory, spec.limit)
    if not check_only:
        converge._rollout_policy(spec.inventory, host_data, spec.run_data(), names)
    return spec


def _options(f):
    for option in reversed(
        [
            click.argument("inventory"),
            click.option("--interval", default="10min", show_default=True, help="systemd span."),
            click.option("--check-only", is_flag=True, help="Report drift; never apply."),
            click.option("--textfile", metavar="PATH", help="node_exporter textfile to write."),
            click.option(
                "--limit",
                multiple=True,
                metavar="HOST",
                help="Only this host of the inventory (repeatable).",
            ),  # fmt: skip
            click.option(
                "--reboot-if-needed",
                is_flag=True,
                help="Each run also reboots a host a reboot is needed for (remedy status "
                "says why: boot pending, kernel, initrd, its parameters, the memory "
                "headroom), only inside its restart_window, as remedy reboot does.",
            ),
            wait_option,
        ]
    ):
        f = option(f)
    return f


def _systemctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*SYSTEMCTL, *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RemedyError(f"systemctl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


@click.group(short_help="Run remedy converge on a systemd timer.")
def schedule():
    """Run `remedy converge` on a systemd timer, on this (management) host."""


@schedule.command(short_help="Print the units install would write; change nothing.")
@_options
def show(inventory, interval, check_only, textfile, limit, reboot_if_needed, wait_s):
    """Print the service and timer `install` would write, and the same for NixOS."""
    spec = _spec(inventory, interval, check_only, textfile, wait_s, limit, reboot_if_needed)
    click.echo(f"# {UNIT_DIR / core.SERVICE}\n{core.service_unit(spec)}")
    click.echo(f"# {UNIT_DIR / core.TIMER}\n{core.timer_unit(spec)}")
    click.echo(core.nixos_snippet(spec))


@schedule.command(short_help="Write and start the converge timer and its service.")
@_options
def install(inventory, interval, check_only, textfile, limit, reboot_if_needed, wait_s):
    """Write remedy-converge.service and .timer, check them with systemd-analyze verify,
    and enable the timer. Run it again to change the options."""
    spec = _spec(inventory, interval, check_only, textfile, wait_s, limit, reboot_if_needed)
    texts = {core.SERVICE: core.service_unit(spec), core.TIMER: core.timer_unit(spec)}
    with tempfile.TemporaryDirectory(prefix="remedy-units.") as tmp:
        for name, text in texts.items():
            (Path(tmp) / name).write_text(text)
        if shutil.which("systemd-analyze"):
            checked = subprocess.run(
                ["systemd-analyze", "verify", *(str(Path(tmp) / n) for n in texts)],
                capture_output=True,
                text=True,
            )
            if checked.returncode != 0:
                raise RemedyError(
                    f"systemd-analyze verify rejected the units: {checked.stderr.strip()}"
                )
    before = {n: (UNIT_DIR / n).read_text() for n in texts if (UNIT_DIR / n).exists()}
    try:
        for name, text in texts.items():  # atomically, 0644
            _write_unit(UNIT_DIR / name, text)
        _systemctl("daemon-reload")
        _systemctl("enable", "--now", core.TIMER)
        loaded = _props(core.TIMER, "LoadState", "ActiveState")
        if loaded.get("LoadState") != "loaded" or loaded.get("ActiveState") != "active":
            raise RemedyError(
                f"{core.TIMER} did not start (LoadState={loaded.get('LoadState')}, "
                f"ActiveState={loaded.get('ActiveState')}): see journalctl -u {core.TIMER}"
            )
    except (OSError, RemedyError) as exc:
        _undo_install(texts, before)
        raise RemedyError(
            f"{exc}; the schedule is as it was before this install "
            f"({'the earlier units restored' if before else 'nothing left installed'})"
        ) from None
    next_run = _next_run(_props(core.TIMER, *TIMER_NEXT))
    mode = ("reports drift" if check_only else
            "converges (and reboots in its window a host that needs it)" if reboot_if_needed
            else "converges")  # fmt: skip
    said_folded(
        "",
        f"installed {UNIT_DIR / core.SERVICE} and {core.TIMER}: every {interval} it {mode} "
        + (f"{', '.join(spec.limit)} of " if spec.limit else "")
        + f"{spec.inventory}; next run {next_run or 'after boot'}",
    )


def _write_unit(target: Path, text: str) -> None:
    tmp_path = target.with_name(f".{target.name}.remedy-tmp")
    tmp_path.write_text(text)
    tmp_path.chmod(0o644)
    os.replace(tmp_path, target)


def _undo_install(texts: dict[str, str], before: dict[str, str]) -> None:
    """Put the units back as they were before a failed install: nothing half-written."""
    if not before:
        _systemctl("disable", "--now", core.TIMER, check=False)
    for name in texts:
        target = UNIT_DIR / name
        if name in before:
            _write_unit(target, before[name])
        else:
            target.unlink(missing_ok=True)
    _systemctl("daemon-reload", check=False)
    if before:
        _systemctl("restart", core.TIMER, check=False)


@schedule.command()
def remove():
    """Disable the timer and remove both units (running nothing)."""
    present = [UNIT_DIR / n for n in (core.SERVICE, core.TIMER) if (UNIT_DIR / n).exists()]
    if not present:
        console.print("no remedy schedule is installed; nothing to remove")
        return
    _systemctl("disable", "--now", core.TIMER, check=False)
    _systemctl("stop", core.SERVICE, check=False)
    for path in present:
        path.unlink()
    _systemctl("daemon-reload")
    console.print(f"removed {', '.join(str(p) for p in present)}")


TIMER_NEXT = ("NextElapseUSecRealtime", "NextElapseUSecMonotonic")


def _next_run(timer: dict[str, str]) -> str:
    """When the timer fires next, as a person reads it ("" if it is not scheduled)."""
    if timer.get("NextElapseUSecRealtime"):  # a calendar timer: systemd's own words
        return timer["NextElapseUSecRealtime"]
    at = core.next_elapse(timer, time.time(), time.clock_gettime(time.CLOCK_MONOTONIC))
    return "" if at is None else time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(at))


@schedule.command(short_help="The last run's result and exit code; the next run.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def status(as_json):
    """The last run's result and exit code, the next run, and the last report.

    Exits with the last run's exit code (as `remedy converge` does: 0, 6, 3, 4, 5, 2, 1),
    1 if a signal or its time bound ended it or the timer does not run."""
    service = UNIT_DIR / core.SERVICE
    if not service.exists():
        err_console.print("no remedy schedule is installed (remedy schedule install …)")
        raise SystemExit(1)
    timer = _props(core.TIMER, "LoadState", "ActiveState", "LastTriggerUSec", *TIMER_NEXT)
    svc = _props(core.SERVICE, *SERVICE_PROPS)
    report = subprocess.run(
        [*JOURNALCTL, "-u", core.SERVICE, "-n", "40", "-o", "cat", "--no-pager"],
        capture_output=True,
        text=True,
    ).stdout
    last = core.last_run(svc)
    broken = timer.get("LoadState") != "loaded" or timer.get("ActiveState") != "active"
    code = worst([last.code, *([EXIT_ERROR] if broken else [])])
    command = core.parse_exec_start(service.read_text())
    next_run = _next_run(timer)
    doc = {
        "command": command,
        "timer": timer,
        "next_run": next_run or None,
        "last_run": {
            **svc,
            "state": last.state,
            "exit_code": last.exit_code,
            "signal": last.signal,
            "failed": last.failed,
            "meaning": core.EXIT_MEANING.get(last.exit_code, ""),
            "said": last.text(),
        },
        "last_report": report.splitlines(),
        "exit_code": code,
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        raise SystemExit(code)
    if broken:  # a schedule that does not run is not a schedule: say so, exit 1
        said_folded(
            "",
            f"{core.TIMER} is not running (LoadState={timer.get('LoadState')}, "
            f"ActiveState={timer.get('ActiveState')}): nothing converges on schedule",
        )
    said_folded("command: ", shlex.join(command))
    when = f"next run {next_run}" if next_run else "no next run scheduled"
    said_folded("timer: ", f"{timer.get('ActiveState')}; {when}")
    said_folded("last run: ", last.text())
    if report.strip():
        console.print("last report:")
        console.print(report.rstrip(), markup=False, highlight=False)
    said_folded("next: ", _next_step(last, broken, command))
    raise SystemExit(code)


SERVICE_PROPS = ("ActiveState", "Result", "ExecMainCode", "ExecMainStatus",
                 "ExecMainStartTimestamp", "ExecMainExitTimestamp")  # fmt: skip


def _next_step(last: core.LastRun, broken: bool, command: list[str]) -> str:
    """What a person does next, after the status."""
    if broken:
        return f"`remedy schedule install …` again, or see `journalctl -u {core.TIMER}`"
    if last.failed:
        return (
            "fix what the last report says, then run it now: "
            f"`systemctl start {core.SERVICE}` (its log: `journalctl -u {core.SERVICE}`)"
        )
    if last.exit_code == EXIT_VOLATILE and len(command) > 2:
        return f"see what a reboot would change: `remedy status {shlex.quote(command[2])}`"
    return "nothing: the timer runs it again"


def _props(unit: str, *names: str) -> dict[str, str]:
    argv = ["show", unit] + [a for n in names for a in ("-p", n)]
    out = _systemctl(*argv, check=False).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
