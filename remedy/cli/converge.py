"""``remedy converge INVENTORY``: drift report per host and setting, and the fix.

    remedy converge inventory/production.py --check          # report, change nothing
    remedy converge inventory/production.py                  # apply, then report
    remedy converge inventory/fleet.py --json --textfile /var/lib/node_exporter/remedy.prom

Exit codes (the worst host's, the same as ``remedy status``): ``remedy.errors``,
EXIT_CODES_HELP.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import textwrap
import time

import click
from rich import box
from rich.table import Table

from remedy import audit, fleet, metrics
from remedy import inventory as inventory_mod
from remedy.cli.status import REVIEW_TITLE, UNMANAGED_TITLE
from remedy.console import console, err_console, progress, said_folded
from remedy.core.config import desired, volatile
from remedy.core.config.secrets import masked
from remedy.core.config.volatile import Unmanaged
from remedy.core.render.report import host_status, next_of, next_step
from remedy.core.run.plan import NOOP, bump_blocked, plan_restore
from remedy.errors import EXIT_CODES_HELP, EXIT_ERROR, EXIT_LOCKED, EXIT_OK, worst

# --wait, shared with `remedy schedule install` (which passes it on to converge)
wait_option = click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=30,
    show_default=True,
    help="Seconds to wait for another run's host lock before giving up (exit 5).",
)


@click.command(short_help="Fix every managed setting, then report per host.",
               epilog=EXIT_CODES_HELP)  # fmt: skip
@click.argument("inventory")
@click.option("--check", is_flag=True, help="Report drift only; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of tables.")
@click.option("--textfile", metavar="PATH", help="Write node_exporter textfile metrics to PATH.")
@click.option("--limit", multiple=True, metavar="HOST", help="Only this host (repeatable).")
@click.option("--interval", "interval", metavar="SPAN",
              help="How often a schedule runs this (the timer passes it): --textfile says it "
              "(remedy_run_interval_seconds) so an alert sees a run that is late.")  # fmt: skip
@click.option(
    "--unattended",
    is_flag=True,
    help="A run no person watches (the schedule's service passes it): no bump to an "
    "unverified latest.",
)
@click.option(
    "--restart",
    "restart",
    type=click.Choice(["now", "window", "never"]),
    default=None,
    help="This run only: restart now, as the host's restart_window allows, or never for "
    "settings that can wait (host data restart_window otherwise).",
)
@click.option("--max-restarting", type=click.IntRange(min=1), metavar="N",
              help="This run: at most N serving hosts restarting at once (host data "
              "max_restarting, default 1).")  # fmt: skip
@click.option("--canary", metavar="HOST|N",
              help="This run: the host(s) that go first, alone (comma-separated names), or "
              "how many (host data canary, default 1).")  # fmt: skip
@click.option("--max-failures", type=click.IntRange(min=0), metavar="N",
              help="This run: stop the rollout once more than N hosts failed (host data "
              "max_failures, default 0).")  # fmt: skip
@click.option("--reboot-if-needed", is_flag=True,
              help="After the run: reboot each host a reboot is needed for (remedy status "
              "says why), only inside its restart_window, as remedy reboot does.")  # fmt: skip
@wait_option
def converge(inventory, check, as_json, textfile, limit, interval, wait_s, unattended, restart,
             max_restarting, canary, max_failures, reboot_if_needed):  # fmt: skip
    """Converge every managed setting (deploys/converge.py) on every host in one pyinfra
    run: reads and builds in parallel, restarts as the rollout allows (a canary first, at
    most max_restarting at once, stop after max_failures); then report per host and
    setting: desired, live, next boot, and the action."""
    started = time.monotonic()
    interval_s = _interval_s(interval)
    if textfile:
        metrics.check_writable(textfile)
    say = progress if not as_json else (lambda m: None)
    host_data: dict[str, dict] = {}
    applied: dict[str, fleet.HostRun] = {}
    run = None
    reboots_done: dict = {}  # host -> its reboot (--reboot-if-needed)
    audit_from: dict[str, audit.Mark | None] = {}
    if check:  # one inventory load: the session checks the --limit names itself
        if canary is not None and not canary.strip().isdigit():  # a run checks it with the rest
            _known_hosts(inventory, "--canary", json.loads(_canary_data(canary)))
        reads = fleet.read_hosts(inventory, list(limit) or None, say)
    else:
        data = {"lock_wait_s": f"{wait_s:g}"}
        if unattended:
            data["unattended"] = "true"
        if restart:
            data["restart"] = restart
        for key, value in (("max_restarting", max_restarting), ("canary", canary),
                           ("max_failures", max_failures)):  # fmt: skip
            if value is not None:
                data[key] = _canary_data(value) if key == "canary" else str(value)
        host_data, names, fleet_hosts = _host_data(inventory, limit)
        policy = _rollout_policy(inventory, host_data, data, names)
        refused = functools.partial(_refused_metrics, textfile, inventory, started, interval_s)
        fleet_lock = _fleet_lock(inventory, host_data, fleet_hosts, wait_s, say, as_json, refused)
        # where each audit log ends now: the report reads only this run's records
        audit_from = _audit_marks(host_data)
        try:
            run = fleet.converge_hosts(inventory, list(host_data), data, policy, say)
            if reboot_if_needed:  # under the same fleet lock
                reboots_done = _reboot_if_needed(inventory, run, policy, say)
        finally:
            fleet_lock.release()
        applied, reads = run.runs, _reads_after_reboots(run.reads, reboots_done)
    if restart:  # --check plans with it too
        reads = [
            dataclasses.replace(r, host_data=dataclasses.replace(r.host_data, restart=restart))
            if r.host_data is not None
            else r
            for r in reads
        ]
    if applied:
        _audit_unreached(host_data, applied)
    turns = run.rollout.turns if run is not None else {}
    reports = [
        _report(
            r,
            applied.get(r.name),
            check,
            unattended,
            inventory,
            host_data.get(r.name),
            turns.get(r.name),
            audit_from,
        )
        for r in reads
    ]
    for rep in reports:  # a reboot that ran says what the host is now
        if (rec := reboots_done.get(rep["host"])) is not None:
            rep["reboot"] = rec.to_json()
            if rec.outcome not in ("refused", "not started"):
                rep["exit_code"] = rec.exit_code
    code = worst([rep["exit_code"] for rep in reports])
    unwritten = None
    if textfile:
        codes = {rep["host"]: rep["exit_code"] for rep in reports}
        per_host = [
            _metrics(
                r,
                unattended,
                applied.get(r.name),
                host_data.get(r.name),
                audit_from,
                codes.get(r.name),
            )
            for r in reads
        ]
        try:
            metrics.write(
                textfile,
                per_host,
                time.time(),
                time.monotonic() - started,
                run.rollout.counts() if run is not None else None,
                inventory=[h.name for h in inventory_mod.load_inventory(inventory)],
                interval_s=interval_s,
            )
        except metrics.TextfileError as exc:  # the report first, then why the run fails
            unwritten = exc
    _output(code, reports, run, as_json)
    if unwritten is not None:
        err_console.print(textwrap.fill(str(unwritten), 80, break_on_hyphens=False),
                          style="red", markup=False, highlight=False)  # fmt: skip
        code = EXIT_ERROR
    raise SystemExit(code)


def _reboot_if_needed(inventory: str, run, policy, say) -> dict:
    """--reboot-if-needed: remedy reboot of each host that the run left healthy (0 or 6)
    and a reboot is needed for (remedy.core.readings.reboot: boot pending, the kernel,
    initrd or its parameters, the memory headroom), never --now: only inside its
    restart_window. {host: its HostReboot}."""
    from remedy import lifecycle, reboots
    from remedy.errors import EXIT_BOOT_PENDING

    needed = {}
    for r in run.reads:
        if r.error or r.snapshot is None or run.runs[r.name].returncode != 0:
            continue
        status = host_status(r.name, r.host_data, r.snapshot)
        reasons = status.reboot.needed if status.reboot else []
        if reasons and status.exit_code in (EXIT_OK, EXIT_BOOT_PENDING):
            needed[r.name] = reasons
    if not needed:
        return {}
    for name, reasons in needed.items():
        say(f"{name}: a reboot is needed ({', '.join(reasons)})")
    done = reboots.reboot_hosts(
        inventory, list(needed), policy, now=False, dry=False,
        run_id=lifecycle.process_run().run_id, stop=lifecycle.process_run().stop, say=say,
        converge_cmd=lambda h: f"remedy converge {inventory} --limit {h}",
    )  # fmt: skip
    for name, rec in done.hosts.items():
        rec.needed = needed[name]
    return done.hosts


def _reads_after_reboots(reads: list, reboots_done: dict) -> list:
    """READS with each host that --reboot-if-needed rebooted read as it is now: the
    reboot's own read after the boot (its verify's), or, if none came, the host
    unread since (its series say unreadable, never the state before the boot). A host
    whose reboot did not start (refused, not its turn) keeps the run's read."""
    out = []
    for r in reads:
        rec = reboots_done.get(r.name)
        if rec is None or rec.reboot_at is None:
            out.append(r)
        elif rec.read_after is not None:
            out.append(dataclasses.replace(rec.read_after, ssh=r.ssh))
        else:
            why = f"not read after its reboot: {rec.why or rec.outcome}"
            out.append(dataclasses.replace(r, snapshot=None, error=why))
    return out


def _interval_s(interval: str | None) -> float | None:
    """--interval in seconds (a systemd time span, as `remedy schedule install` takes)."""
    if interval is None:
        return None
    from remedy.core.run import schedule as schedule_core
    from remedy.errors import ConfigError

    if not schedule_core.SPAN_RE.match(interval) or not schedule_core.span_seconds(interval):
        raise ConfigError(
            f"--interval {interval!r} is not a systemd time span of a second or more "
            "(examples: 10min, 1h, 90s)"
        )
    return schedule_core.span_seconds(interval)


def _canary_data(value: str) -> str:
    """--canary as host data: a number, or names (comma-separated) as a JSON list."""
    if value.strip().isdigit():
        return value.strip()
    return json.dumps([n.strip() for n in value.split(",") if n.strip()])


def _known_hosts(inventory: str, option: str, names: list[str]) -> None:
    """NAMES (given with OPTION) are hosts of INVENTORY: else ConfigError naming them and
    the inventory's hosts, before anything connects."""
    hosts = [h.name for h in inventory_mod.load_inventory(inventory)]
    unknown = [n for n in names if n not in hosts]
    if unknown or not names:
        from remedy.errors import ConfigError

        raise ConfigError(
            f"{option} {', '.join(unknown) or repr('')}: not a host of {inventory} (hosts: "
            f"{', '.join(hosts) or 'none'}); name hosts of the inventory, or give a number"
        )


def _rollout_policy(inventory: str, host_data: dict[str, dict], data: dict, names: list[str]):
    """The rollout's policy, and every host's rollout keys checked, before connecting:
    bad values, a canary not in the inventory, a rotation command not on this machine."""
    import shutil

    from remedy.core.config import host_data as settings_mod
    from remedy.core.run import rollout as rollout_core
    from remedy.errors import ConfigError

    settings = {}
    for name, hd in host_data.items():
        s = settings_mod.from_host_data(name, {**hd, **data})
        for key in ("rotation_out", "rotation_in"):
            argv = getattr(s, key)
            if argv and not shutil.which(argv[0]):
                raise ConfigError(
                    f"host {name}: data key {key!r} runs {argv[0]!r}, which is not an "
                    "executable on this machine (it runs here, not on the host)"
                )
        settings[name] = s
    return rollout_core.policy_of(settings, inventory, names)


def _fleet_lock(inventory: str, host_data: dict, fleet_hosts: dict, wait_s: float, say,
                as_json: bool, refused=lambda _hosts: None, retry=None):  # fmt: skip
    """The fleet's lock: one converge at a time over any of FLEET_HOSTS (every serving
    host of the inventory, whatever --limit: the budget is fleet-wide), whatever file
    names them; held past --wait: the report names its holder for every host of the run
    (HOST_DATA), REFUSED(hosts) writes what the run knows (the refusal, per host: None,
    or why the metrics could not be written) and the exit is 5 (1 if they could not).
    RETRY(host): the command that runs this again with a longer wait (default: the
    converge's)."""
    from remedy import lock
    from remedy.core.programs.hostlock import holder_text

    try:
        return lock.acquire_fleet(fleet_hosts, wait_s, holder_text(), say)
    except lock.LockHeld as exc:
        why = f"another run holds the fleet lock: {exc}"

        def again(name: str) -> str:
            if retry is None:
                return next_step(EXIT_LOCKED, name, inventory)
            return f"another run holds the host: wait for it, or run `{retry(name)}`"

        reports = [
            {"host": name, "exit_code": EXIT_LOCKED, "verdict": why, "settings": [],
             "next": again(name)}
            for name in host_data
        ]  # fmt: skip
        unwritten = refused(list(host_data))
        _output(EXIT_LOCKED, reports, None, as_json)
        if unwritten is not None:
            err_console.print(textwrap.fill(str(unwritten), 80, break_on_hyphens=False),
                              style="red", markup=False, highlight=False)  # fmt: skip
            raise SystemExit(EXIT_ERROR) from None
        raise SystemExit(EXIT_LOCKED) from None
    except lock.LockError as exc:
        from remedy.errors import ConfigError

        raise ConfigError(f"{exc} (set REMEDY_LOCK_DIR to a writable directory)") from None


def _refused_metrics(textfile: str | None, inventory: str, started: float,
                     interval_s: float | None, hosts: list[str]):  # fmt: skip
    """A run the fleet lock refused, in the metrics (--textfile): per host of the run its
    state locked, exit code 5, the run failed, and when; the run read no host, so the
    rest of each host's series stays as the last file has it (remedy.metrics: a refusal
    knows nothing new of the host, and must not resolve an alert on what the last read
    found). The TextfileError if the file could not be written, else None."""
    if not textfile:
        return None
    refusals = [
        metrics.HostMetrics(name, up=True, exit_code=EXIT_LOCKED, run_ok=False, read=False)
        for name in hosts
    ]
    try:
        metrics.write(
            textfile,
            refusals,
            time.time(),
            time.monotonic() - started,
            inventory=[h.name for h in inventory_mod.load_inventory(inventory)],
            interval_s=interval_s,
        )
    except metrics.TextfileError as exc:
        return exc
    return None


def _output(code: int, reports: list[dict], run, as_json: bool) -> None:
    """The report, as text or JSON, with every secret masked (remedy.core.config.secrets:
    a setting's live value, what a failed deploy said last)."""
    from remedy.core.config.secrets import masked_doc

    reports = masked_doc(reports)
    rollout = None
    if run is not None:
        policy = run.rollout.policy
        rollout = {
            "max_restarting": policy.max_restarting,
            "canary": list(policy.canary) if isinstance(policy.canary, tuple) else policy.canary,
            "max_failures": policy.max_failures,
            "stopped": run.rollout.stopped,
            "hosts": run.rollout.rows(),
        }
        rollout = masked_doc(rollout)  # a host's why may quote what it said
    if as_json:
        hosts = [{k: v for k, v in rep.items() if k != "review_lines"} for rep in reports]
        doc = {"exit_code": code, "hosts": hosts}
        if rollout is not None:
            doc["rollout"] = rollout
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    for rep in reports:
        _print(rep)
    if rollout is not None and len(rollout["hosts"]) > 1:
        _print_rollout(rollout)


def _print_rollout(rollout: dict) -> None:
    """The rollout at a glance: per host its outcome, wave, restarts and time in the
    budget; then why it stopped, if it did."""
    table = Table(title="rollout", title_justify="left", width=80, box=box.SIMPLE_HEAD,
                  padding=(0, 1, 0, 0))  # fmt: skip
    table.add_column("host", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    for column in ("wave", "restarts", "in budget", "waited"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in rollout["hosts"]:
        wave = "-" if row["wave"] is None else str(row["wave"])
        table.add_row(
            row["host"] + (" (canary)" if row["canary"] else ""),
            row["outcome"],
            wave,
            str(row["restarts"]),
            f"{row['budget_s']:.0f}s",
            f"{row['waited_s']:.0f}s",
            style=None if row["outcome"] in ("unchanged", "converged") else "yellow",
        )
    console.print(table)
    if rollout["stopped"]:
        said_folded("  stopped: ", rollout["stopped"], "red")


def _host_data(inventory: str, limit) -> tuple[dict[str, dict], list[str], dict[str, dict]]:
    """{host: data} of the hosts to converge, in inventory order (--limit checked), the
    names of every host of the inventory, and {host: data} of its serving hosts."""
    loaded = {h.name: h.data for h in inventory_mod.load_inventory(inventory)}
    hosts = list(loaded)
    if limit:
        unknown = [n for n in limit if n not in hosts]
        if unknown:
            from remedy.errors import ConfigError

            raise ConfigError(
                f"--limit {', '.join(unknown)}: not in {inventory} (hosts: {', '.join(hosts)})"
            )
        hosts = [h for h in hosts if h in limit]
    serving = [h for h in hosts if loaded[h].get("remedy_role") != "builder"]  # serve nothing
    if not serving:
        from remedy.errors import ConfigError

        raise ConfigError(
            f"{inventory}: no serving host to converge"
            + (f" (--limit {', '.join(hosts)}: builders, remedy_role builder)" if limit else "")
        )
    fleet_hosts = {h: d for h, d in loaded.items() if d.get("remedy_role") != "builder"}
    return {h: loaded[h] for h in serving}, list(loaded), fleet_hosts


def _report(
    read: fleet.HostRead,
    run: fleet.HostRun | None,
    check: bool,
    unattended: bool = False,
    inventory: str = "INVENTORY",
    data: dict | None = None,
    turn=None,
    audit_from: dict | None = None,
) -> dict:
    out: dict = {
        "host": read.name,
        **(_applied(read.name, run, data, audit_from) if run else {}),
    }
    run_exit = out.pop("run_exit", None)  # the run's outcome's exit code
    if turn is not None:
        out["rollout"] = turn.row()
    if read.error:
        out.update(exit_code=EXIT_ERROR, verdict=f"could not read the host: {read.error}")
        out["settings"] = []
        out["next"] = next_step(EXIT_ERROR, read.name, inventory, ssh=read.ssh,
                                error=read.error)  # fmt: skip
        return out
    status = host_status(read.name, read.host_data, read.snapshot)
    settings = dataclasses.replace(
        read.host_data, unattended=read.host_data.unattended or unattended
    )
    plan = plan_restore(read.snapshot, settings, desired.ALL)
    actions = {sp.drift.key: sp.action for sp in plan.settings}
    effects = {sp.drift.key: sp.takes_effect for sp in plan.settings}
    code, verdict = status.exit_code, status.verdict
    if run is not None and run.returncode == EXIT_LOCKED:
        code, verdict = EXIT_LOCKED, "another run holds the host lock: " + (run.why or "?")
    elif run is not None and run.returncode != 0:
        # a run that failed or was refused (its outcome's exit 1, as the manual script
        # exits for the same run) is an error whatever state it left
        code = EXIT_ERROR if code == EXIT_OK or run_exit == EXIT_ERROR else code
        verdict = f"{verdict}; the run failed: {run.why or 'see its output'}"
    elif turn is not None and turn.state == "not started":
        verdict = f"{verdict}; {turn.why}"
    # what stands in the durable path's way, as this run plans it (--unattended too)
    blocked = "durable path not possible: "
    problems = [p for p in status.problems if not p.startswith(blocked)]
    if plan.path != NOOP:
        problems += [blocked + b for b in plan.durable_blockers]
    out.update(
        exit_code=code,
        verdict=verdict,
        next=next_of(
            status,
            inventory,
            read.ssh,
            read.host_data.unit,
            code=code,
            blocked=plan.path != NOOP and bool(plan.durable_blockers),
        ),  # fmt: skip
        probe=read.snapshot.probe.outcome,
        bump_blocked=plan.bump_blocked,
        problems=problems,
        notes=status.notes,
        review=found.to_json() if (found := _review(read, settings)) else None,
        review_lines=[masked(x) for x in found.lines()] if found else [],
        unmanaged_volatile=[e.to_json() for e in status.unmanaged],
        ignored_volatile=status.ignored,
        settings=[
            {
                "setting": d.key,
                "label": d.label,
                "issue": d.issue,
                "desired": d.desired,
                "live": d.live,
                "next_boot": d.next_boot,
                "state": d.state,
                "durable_in": d.durable,
                "takes_effect": effects.get(d.key) or None,
                "action": actions[d.key]
                if actions[d.key].startswith("kept:")  # a person's commit: said even in sync
                else "none"
                if d.in_sync
                else (actions[d.key] if check else "left as is"),
            }
            for d in status.drifts
        ],
    )
    return out


def _review(read: fleet.HostRead, settings):
    """The host's review before the switch (remedy.core.readings.review), with what
    blocks its bump in this run (--unattended: an unverified latest is not taken)."""
    found = read.snapshot.review
    if found is None or found.bump is None:
        return found
    bump = dataclasses.replace(found.bump, blocked=bump_blocked(settings))
    return dataclasses.replace(found, bump=bump)


def _applied(
    host: str, run: fleet.HostRun, data: dict | None, audit_from: dict | None = None
) -> dict:
    """What the run did on HOST, as its audit line says it."""
    out: dict = {"apply": {"exit_code": run.returncode, "seconds": round(run.seconds, 1)}}
    if run.returncode != 0:
        out["apply"]["tail"] = run.tail()
    record = _run_record(host, run, data, audit_from)
    said = (record.details or {}) if record else {}
    # the deploy's outcome line; for a run that stopped before its steps, why
    out["outcome"] = said.get("outcome") or said.get("failed")
    out["result"] = record.result if record else None
    out["run_exit"] = said.get("exit")  # the outcome's exit code (remedy/host/steps/outcome.sh)
    out["restarted"] = audit.restarts_said(said) if record else None
    return out


def _audit_marks(host_data: dict[str, dict]) -> dict[str, audit.Mark | None]:
    """Where each host's audit log ends before the run, by path."""
    paths = {str(audit.log_path_for(dict(d))) for d in host_data.values()}
    return {path: audit.mark(path) for path in sorted(paths)}


def _run_record(host: str, run: fleet.HostRun, data: dict | None, audit_from: dict | None = None):
    """The audit record the deploy RUN wrote for HOST (None: it wrote none). AUDIT_FROM:
    where each log ended before the run (only what follows is read)."""
    try:
        path = str(audit.log_path_for(dict(data or {})))
        mine = _records_since(path, run.started - 1, (audit_from or {}).get(path))
    except Exception:  # the report never hides behind the log
        return None
    return mine[host][-1] if mine.get(host) else None


@functools.lru_cache(maxsize=8)
def _records_since(path: str, since: float, after: audit.Mark | None = None) -> dict[str, list]:
    """The log's records since SINCE (appended after AFTER), by host: read once for
    every host of the run."""
    out: dict[str, list] = {}
    for record in audit.read(path, after=after):
        if record.timestamp.timestamp() >= since:
            out.setdefault(record.host, []).append(record)
    return out


def _audit_unreached(data: dict[str, dict], applied: dict[str, fleet.HostRun]) -> None:
    """A host the run never planned for (no connection, a deploy that could not plan)
    wrote no audit line: converge writes it, with the reason, so the log shows every host
    it tried."""
    for name, run in applied.items():
        if run.audited or run.returncode == 0:
            continue
        record = audit.AuditRecord(
            host=name,
            result="given up" if run.given_up else "failed",
            runbook="006",
            commits=audit.commits_of(fleet.PROJECT),
            issues=["tt-stack#49", "tt-stack#44", "tt-stack#52"],
            path="none",
            details={"failed": run.why or "the run could not reach the host"},
        )
        try:
            audit.append(audit.log_path_for(dict(data.get(name, {}))), record)
        except Exception as exc:  # never hide the report behind the log
            err_console.print(f"could not write the audit line for {name}: {exc!r}")


def _metrics(
    read: fleet.HostRead,
    unattended: bool = False,
    run=None,
    data: dict | None = None,
    audit_from: dict | None = None,
    exit_code: int | None = None,
) -> metrics.HostMetrics:
    """The host's metrics; EXIT_CODE: its code in the report (its state)."""
    # the run did its work on the host: read it and, if it applied, neither failed nor
    # waited out a lock there
    run_ok = not read.error and (run is None or run.returncode == 0)
    if read.error:
        return metrics.HostMetrics(read.name, up=False, exit_code=exit_code, run_ok=False)
    from remedy.core.render.report import host_status

    status = host_status(read.name, read.host_data, read.snapshot)
    last = None
    if run is not None:  # the run this converge applied: its audit line
        record = _run_record(read.name, run, data, audit_from)
        last = record.details if record else None
    drifts = desired.drifts(read.snapshot, read.host_data)
    s = dataclasses.replace(read.host_data, unattended=read.host_data.unattended or unattended)
    needs_bump = bool(desired.missing(desired.next_boot(read.snapshot, s), s, desired.ALL,
                                      desired.FLAKE_INPUT))  # fmt: skip
    return metrics.HostMetrics(
        read.name,
        up=True,
        drift={d.key: d.state == desired.DRIFTED for d in drifts},
        volatile=_reverted_by_a_reboot(read, [d.key for d in drifts]),
        probe_ok=read.snapshot.probe.parsed,
        mem_available_bytes=read.snapshot.memory.mem_available_kb * 1024,
        mem_threshold_bytes=round(read.host_data.min_mem_available_gb * 1e9),
        bump_blocked=bump_blocked(s) if needs_bump else None,
        switch_failed_units=len(read.snapshot.last_switch.units_failed),
        boot_pending=status.boot_pending is not None or bool(status.reboot_for),
        restart_pending={k: k in status.pending for k in desired.ALL},
        last_run_restarts=int(last.get("restarts") or 0) if last else None,
        last_run_requests_cut=int(last.get("requests_cut") or 0) if last else None,
        unmanaged_volatile=volatile.counts(
            volatile.split_ignored(
                volatile.unmanaged(read.snapshot, read.host_data), read.host_data.ignore_volatile
            )[0]
        ),
        exit_code=exit_code,
        run_ok=run_ok,
        reboot=metrics.RebootMetrics.of(status.reboot) if status.reboot else None,
        guard_state=status.guard["state"] if status.guard else None,
        guard_last_refusal_s=(
            status.guard["last_refusal"]["at_epoch"]
            if status.guard and status.guard["last_refusal"]
            else None
        ),
    )


def _reverted_by_a_reboot(read: fleet.HostRead, keys: list[str]) -> dict[str, bool]:
    """Per setting: the live value holds it and the next boot does not, so a reboot
    breaks it (remedy_setting_volatile, which pages). The report's "volatile" also
    says a /run override that is present: the next boot removes it, as it should, so
    it is no setting a reboot breaks (a host that waits for that boot is boot pending)."""
    now = desired.live(read.snapshot, read.host_data)
    nxt = desired.next_boot(read.snapshot, read.host_data)
    holds = {key: (desired.BY_KEY[key].holds(now, read.host_data),
                   desired.BY_KEY[key].holds(nxt, read.host_data)) for key in keys}  # fmt: skip
    return {key: live and not boot for key, (live, boot) in holds.items()}


def _print(rep: dict) -> None:
    colour = {0: "green", 3: "yellow", 4: "red", 5: "yellow"}.get(rep["exit_code"], "red")
    if not rep["settings"]:  # the host could not be read: the verdict says why
        console.print(f"{rep['host']}: [{colour}]{rep['verdict']}[/]", width=80)
    table = Table(
        title=f"{rep['host']}: [{colour}]{rep['verdict']}[/]",
        title_justify="left",
        width=80,
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
    )
    # The setting names stay whole (QWEN36_MERGE_BATCH_GUARD); the rest wraps at spaces.
    longest = max((len(s["label"]) for s in rep["settings"]), default=7)
    table.add_column("setting", no_wrap=True, min_width=longest)
    for column, key in (("desired", "desired"), ("live", "live"),
                        ("after reboot", "next_boot"), ("action", "action")):  # fmt: skip
        # at least its longest word wide: a cell wraps at spaces, never mid-word
        words = [w for s in rep["settings"] for w in str(s[key]).split()]
        table.add_column(column, overflow="fold", min_width=max(map(len, words), default=4))
    for s in rep["settings"]:
        style = None if s["state"] == desired.IN_SYNC else "yellow"
        state = "" if s["state"] == desired.IN_SYNC else f" ({s['state']})"
        table.add_row(
            s["label"], s["desired"], s["live"] + state, s["next_boot"], s["action"], style=style
        )
    if rep["settings"]:
        console.print(table)
    for note in rep.get("notes") or []:
        console.print(
            textwrap.fill(
                note,
                80,
                initial_indent="  • ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            ),  # fmt: skip
            markup=False,
            highlight=False,
        )
    # what the table and the volatile list below do not say already (an untrusted run
    # journal, a file name systemd cannot show)
    for problem in rep.get("problems") or []:
        console.print(
            textwrap.fill(
                problem,
                80,
                initial_indent="  ! ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            ),  # fmt: skip
            style="red",
            markup=False,
            highlight=False,
        )
    if entries := rep.get("unmanaged_volatile"):
        console.print("  " + UNMANAGED_TITLE, style="yellow", width=80)
        for e in entries:
            console.print(
                textwrap.fill(
                    Unmanaged(**{**e, "details": tuple(e["details"])}).text(),
                    80,
                    initial_indent="    • ",
                    subsequent_indent="      ",
                    break_on_hyphens=False,
                ),
                markup=False,
                highlight=False,
            )
    if lines := rep.get("review_lines"):
        console.print("  " + REVIEW_TITLE, width=80)
        for line in lines:
            console.print(
                textwrap.fill(line, 80, initial_indent="    • ", subsequent_indent="      ",
                              break_on_hyphens=False),
                markup=False,
                highlight=False,
            )  # fmt: skip
    apply = rep.get("apply")
    if apply:  # what this run did, as the deploy said it (its audit line)
        said = rep.get("outcome") or f"the deploy wrote no outcome (exit {apply['exit_code']})"
        said_folded("  outcome: ", said, "green" if rep.get("result") == "ok" else "yellow")
        if rep.get("restarted"):
            said_folded("  restarted: ", rep["restarted"], None)
    if reboot := rep.get("reboot"):
        said_folded("  reboot: ", reboot["verdict"],
                    "green" if reboot["outcome"] == "rebooted" else "yellow")  # fmt: skip
    if rep.get("next"):
        said_folded("  next: ", rep["next"], None)
    if apply and apply["exit_code"] != 0 and apply.get("tail"):
        console.print(f"  deploy exit {apply['exit_code']}; its last lines:", style="red")
        console.print(apply["tail"], markup=False, highlight=False)
