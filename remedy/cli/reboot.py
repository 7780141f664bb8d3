"""``remedy reboot INVENTORY``: a planned, proven reboot of each host, through the rollout.

    remedy reboot inventory/production.py --limit cfx-llm2 --dry   # the plan, the gates
    remedy reboot inventory/production.py --limit cfx-llm2         # in the restart window
    remedy reboot inventory/fleet.py --now --json                  # now, one at a time

Exit codes (the worst host's, as converge's): ``remedy.errors``, EXIT_CODES_HELP.
"""

from __future__ import annotations

import json
import shlex

import click
from rich import box
from rich.table import Table

from remedy.cli import converge as converge_cli
from remedy.console import console, progress, said_folded
from remedy.errors import EXIT_CODES_HELP, ConfigError, worst


@click.command(short_help="Reboot each host: proven next boot, drain, verify after.",
               epilog=EXIT_CODES_HELP)  # fmt: skip
@click.argument("inventory")
@click.option("--limit", multiple=True, metavar="HOST", help="Only this host (repeatable).")
@click.option("--dry", is_flag=True, help="Print the plan (the gates are read); change nothing.")
@click.option("--now", is_flag=True, help="Reboot now, whatever the host's restart_window.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of text.")
@click.option("--max-restarting", type=click.IntRange(min=1), metavar="N",
              help="This run: at most N hosts down at once (host data max_restarting, "
              "default 1).")  # fmt: skip
@click.option(
    "--canary",
    metavar="HOST|N",
    help="This run: the host(s) that go first, alone (host data canary, default 1).",
)
@click.option("--max-failures", type=click.IntRange(min=0), metavar="N",
              help="This run: stop once more than N hosts failed (host data max_failures, "
              "default 0).")  # fmt: skip
@click.option("--trial", is_flag=True,
              help="Boot a new generation once (systemd-boot's one-shot entry): the "
              "default becomes it only after the verify, else the host is rebooted into "
              "the generation that ran before. Refused where the loader is not "
              "systemd-boot.")  # fmt: skip
@converge_cli.wait_option
def reboot(inventory, limit, dry, now, as_json, max_restarting, canary, max_failures, trial,
           wait_s):  # fmt: skip
    """Reboot every host of INVENTORY (or --limit), one at a time by default. Before:
    the next boot holds every managed setting (else refused, naming the converge to run
    first), the restart window, rotation_out and the drain. Then the reboot, and a new
    SSH session with a new boot id within reboot_timeout_s. After: tool calls parsed,
    every setting in sync, MemAvailable above the threshold, rotation_in. A host that
    fails stops the rollout."""
    import pyinfra_cli  # noqa: F401  (gevent's patching, before any connection)

    from remedy import lifecycle, reboots
    from remedy.core.run.stop import StopRequest

    say = progress if not as_json else (lambda _m: None)
    data = {}
    for key, value in (("max_restarting", max_restarting), ("canary", canary),
                       ("max_failures", max_failures)):  # fmt: skip
        if value is not None:
            data[key] = converge_cli._canary_data(value) if key == "canary" else str(value)
    host_data, names, fleet_hosts = converge_cli._host_data(inventory, limit)
    try:  # every host's data, before connecting: the file and the key named
        from remedy.core.config import host_data as settings_mod
        from remedy.core.run.trial import check_host_data

        for name, hd in host_data.items():
            checked = settings_mod.from_host_data(name, {**hd, **data})
            if trial:  # a loader without a one-shot entry: refused by name, not connected
                check_host_data(name, checked)
        policy = converge_cli._rollout_policy(inventory, host_data, data, names)
    except ConfigError as exc:
        raise ConfigError(f"{inventory}: {exc}") from None
    stop = StopRequest()
    reboots.install_stop(stop, say)
    lock = None
    if not dry:
        # the converge's fleet lock: one run over these hosts at a time, either command
        flags = [*(["--now"] if now else []), *(["--trial"] if trial else []), "--wait", "600"]
        lock = converge_cli._fleet_lock(
            inventory, host_data, fleet_hosts, wait_s, say, as_json,
            retry=lambda h: shlex.join(["remedy", "reboot", inventory, "--limit", h, *flags]),
        )  # fmt: skip
    try:
        run = reboots.reboot_hosts(
            inventory, list(host_data), policy, now=now, dry=dry,
            run_id=lifecycle.new_run_id(), stop=stop, say=say,
            converge_cmd=lambda h: shlex.join(["remedy", "converge", inventory, "--limit", h]),
            trial=trial,
        )  # fmt: skip
    finally:
        if lock is not None:
            lock.release()
    docs = [rec.to_json() for rec in run.hosts.values()]
    code = worst([d["exit_code"] for d in docs])
    if run.stopped:
        code = 130 if "SIGINT" in run.stopped else 143
    _output(code, docs, run, dry, as_json)
    raise SystemExit(code)


def _output(code: int, docs: list[dict], run, dry: bool, as_json: bool) -> None:
    from remedy.core.config.secrets import masked_doc

    docs = masked_doc(docs)
    rollout = None
    if run.rollout is not None:
        policy = run.rollout.policy
        rollout = {
            "max_restarting": policy.max_restarting,
            "canary": list(policy.canary) if isinstance(policy.canary, tuple) else policy.canary,
            "max_failures": policy.max_failures,
            "stopped": run.rollout.stopped,
            "hosts": run.rollout.rows(),
        }
    if as_json:
        doc = {"exit_code": code, "dry": dry, "hosts": docs, "rollout": rollout,
               "stopped": run.stopped}  # fmt: skip
        if dry:
            doc["plan"] = run.plan
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    if dry:
        for line in run.plan:  # "HOST: text" or "  what: text", folded under its text
            head, sep, text = line.partition(": ")
            if not sep:
                head, text = "", line
            said_folded(head + sep, text, None)
        return
    for d in docs:
        style = "green" if d["outcome"] == "rebooted" else "yellow" if (
            d["outcome"] in ("refused", "not started")) else "red"  # fmt: skip
        said_folded(f"{d['host']}: ", d["verdict"], style)
        if d["earlier"]:
            said_folded("  earlier: ", d["earlier"], "yellow")
        if d["status"]["verdict"]:
            said_folded("  status: ", f"{d['status']['verdict']} (exit "
                        f"{d['status']['exit_code']})", None)  # fmt: skip
    if rollout is not None and len(rollout["hosts"]) > 1:
        _print_rollout(rollout, docs)
    if run.stopped:
        said_folded("stopped: ", run.stopped, "red")


def _print_rollout(rollout: dict, docs: list[dict]) -> None:
    by_host = {d["host"]: d for d in docs}
    table = Table(title="rollout", title_justify="left", width=80, box=box.SIMPLE_HEAD,
                  padding=(0, 1, 0, 0))  # fmt: skip
    table.add_column("host", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    for column in ("wave", "down", "reclaimed", "waited"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rollout["hosts"]:
        d = by_host[row["host"]]
        down = "-" if d["downtime_s"] is None else f"{d['downtime_s']:.0f}s"
        gb = "-" if d["mem_reclaimed_gb"] is None else f"{d['mem_reclaimed_gb']:+.1f} GB"
        table.add_row(
            row["host"] + (" (canary)" if row["canary"] else ""),
            d["outcome"],
            "-" if row["wave"] is None else str(row["wave"]),
            down,
            gb,
            f"{row['waited_s']:.0f}s",
        )
    console.print(table)
    if rollout["stopped"]:
        said_folded("  stopped: ", rollout["stopped"], "red")
