"""Deciding how to restore tool calling on one host, before anything is touched.

``plan_restore`` is pure: from one ``HostSnapshot`` and the host's settings it
picks the path (noop, durable, fallback) and says why; ``--dry`` prints it.
``remedy.core.run.steps`` turns the plan into the run's steps with their values.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from remedy.core.config import desired, options, restarts
from remedy.core.config.host_data import HostData
from remedy.core.readings import memory as mem
from remedy.core.readings import review
from remedy.core.readings.snapshot import HostSnapshot

NOOP, DURABLE, FALLBACK = "noop", "durable", "fallback"


@dataclass
class SettingPlan:
    """One managed setting: its drift and what this run will do about it."""

    drift: desired.Drift
    action: str
    # when live takes the desired value: "now", "in the next window, …", "at next boot"
    takes_effect: str = ""


@dataclass
class RestorePlan:
    path: str
    reasons: list[str]
    durable_blockers: list[str] = field(default_factory=list)
    rebuild: bool = False  # build, prove, fast-forward the checkout, switch
    remove_override: bool = False
    restart_expected: bool = False
    update_input: bool = False  # bump the flake input in the scratch clone
    managed_text: str | None = None  # write remedy's managed Nix file with this text
    release_hugepages: bool = False
    write_override: bool = False  # the fallback needs the /run override (if it runs)
    finish_switch: str | None = None  # activate this profile generation (no build)
    scope: tuple[str, ...] = desired.TOOL_CALLING
    prove: tuple[str, ...] = ()  # the settings the built system must hold
    settings: list[SettingPlan] = field(default_factory=list)
    # a person's commit to remedy's managed file that differs from host data
    managed_conflict: str | None = None
    # why the bump may not run (an unattended run with nothing to verify it by)
    bump_blocked: str | None = None
    # the restart policy's decision (remedy.core.config.restarts): may this run restart, and
    # when the settings that wait take effect
    restart: restarts.RestartDecision | None = None
    # switch-to-configuration boot: durable at next boot, nothing activated, no restart
    boot_only: bool = False

    @property
    def deferred(self) -> tuple[str, ...]:
        """The settings this run leaves for a window or the next boot (the verification
        does not require them live)."""
        return tuple(self.restart.pending) if self.restart and not self.restart.allowed else ()

    @property
    def urgent(self) -> bool:
        """A restart this run makes is for a setting that cannot wait, or a person asked
        for it now (--restart now): a drain past its bound restarts anyway and says what
        it cuts. A window restart is postponed instead."""
        return bool(
            self.restart
            and self.restart.urgent
            and self.restart.when in ("now", restarts.ASKED_NOW)
        )

    def summary(self, host: str) -> str:
        """The plan for people, at most 80 columns wide: the path, why, and per setting
        its drift and what this run does about it."""

        def bullet(mark: str, text: str, indent: int = 2) -> list[str]:
            pad = " " * indent
            return textwrap.wrap(
                text,
                80,
                initial_indent=f"{pad}{mark} ",
                subsequent_indent=pad + " " * (len(mark) + 1),
                break_on_hyphens=False,
            )

        lines = [f"{host}: path {self.path}"]
        for r in self.reasons:
            lines += bullet("-", r)
        for b in self.durable_blockers:
            lines += bullet("-", f"durable path not possible: {b}")
        if self.path != NOOP:
            lines += bullet(
                "-",
                "the server WILL restart (memory-gated, after waiting for an idle server)"
                if self.restart_expected
                else "the server will not restart",
            )
        if self.restart and self.restart.pending:
            lines += bullet("-", self.restart.why)
        for sp in self.settings:
            d = sp.drift
            lines += bullet(
                "*",
                f"{d.label}: {d.state}; want {d.desired}, live {d.live}, next boot {d.next_boot}",
            )
            if not d.in_sync:
                lines += bullet("->", sp.action, 6)
                if sp.takes_effect:
                    lines += bullet("  ", f"takes effect {sp.takes_effect}", 6)
        return "\n".join(lines)


override_dropins = desired.override_dropins


def override_present(snap: HostSnapshot, s: HostData) -> bool:
    return bool(desired.live(snap, s).overrides)


SERVING_PARSER_ENV = ("tool_call_parser", "QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD")


def serving_lacks(view, s: HostData, deferred=()) -> list[str]:
    """What a running configuration lacks of the parser and environment (desired's
    judgement; the verification and the override check share it), but for the DEFERRED
    settings (the restart policy leaves them for a window or the next boot)."""
    scope = tuple(k for k in SERVING_PARSER_ENV if k not in deferred)
    return desired.missing(desired.serving(view), s, scope)


def override_in_place(snap: HostSnapshot, s: HostData, scope: tuple[str, ...] = ()) -> bool:
    """What systemd runs now is an override with the wanted parser and environment, and
    with what it carries of the data settings in SCOPE (their live values).

    Judged by effect, not by text: a hand-made override that works is left alone."""
    now = snap.unit.now
    running = bool(now.exec_start and now.exec_start.startswith("/run/"))
    carried = desired.fallback_carried(s, scope, snap) if scope else desired.Carried()
    return running and not serving_lacks(now, s) and not carried.lacking


def hugepage_releases(s: HostData, headroom: mem.MemoryHeadroom) -> list[tuple[int, int, int]]:
    """(size_kb, current total, new total) for pools with free pages above the target."""
    return mem.releases(s.hugepages_target, headroom)


UNATTENDED = "unattended and neither bump_to nor trusted_signers is set"


def bump_approval(s: HostData) -> str:
    """What approves the rev a bump takes (remedy.core.readings.review): a person's
    pin (bump_to), a signature (trusted_signers), or nothing."""
    if s.pinned_rev:
        return review.PINNED
    return review.SIGNED if s.trusted_signers else review.UNCHECKED


def bump_blocked(s: HostData) -> str | None:
    """Why a bump may not run: an unattended run (the schedule's) never takes an
    unverified latest, which anyone who can push to the input's branch controls."""
    if s.unattended and s.bump_to == "latest" and not s.trusted_signers:
        return UNATTENDED
    return None


def managed_conflict(snap: HostSnapshot, s: HostData) -> str | None:
    """A person's commit to remedy's managed file that differs from what host data gives
    (the seed calls such a value an owner decision), or None: the file is absent, is
    what remedy writes, or was last committed by remedy itself."""
    m = snap.managed
    want = desired.managed_nix(s, desired.ALL)
    if m.content is None or m.untracked or want is None or m.content == want:
        return None
    rev, email, name = m.last_commit or ("?", "?", "?")
    if email == f"remedy@{s.flake_host}":
        return None  # remedy's own earlier version: host data changed since
    values = lambda text: {ln.strip() for ln in text.splitlines() if " = " in ln}  # noqa: E731
    theirs = sorted(values(m.content) - values(want)) or ["other text"]
    ours = sorted(values(want) - values(m.content)) or ["its own text"]
    return (
        f"{s.managed_file} differs from host data: commit {rev[:12]} by {name} <{email}> "
        f"sets {' '.join(theirs)} where host data gives {' '.join(ours)}"
    )


def managed_import_missing(snap: HostSnapshot, s: HostData) -> str:
    return (
        f"no .nix file in {s.flake_dir} imports {desired.MANAGED_IMPORT} "
        f"({s.managed_file}, remedy's managed file): add the line "
        f"`imports = [ {desired.MANAGED_IMPORT} ];` to "
        f"hosts/{s.flake_host}/configuration.nix, commit it, and run again"
    )


def durable_blockers(snap: HostSnapshot, s: HostData) -> list[str]:
    """Why the durable path cannot run on this host, each with what to do."""
    out = []
    if not s.durable:
        out.append("disabled by host data (durable=false)")
    if snap.nix is None and snap.nix_unreadable:
        out.append(f"Nix's version could not be read ({snap.nix_unreadable})")
    elif snap.nix is None:
        out.append("Nix is not installed on the host")
    if snap.flake_input is None:
        out.append(snap.flake_error or f"no flake input {s.flake_input!r} in {s.flake_dir}")
    checkout = snap.checkout
    if checkout.problem:
        out.append(f"{s.flake_dir}: {checkout.problem}")
    else:
        other = [c for c in checkout.changes if not c.endswith(" flake.lock")]
        if other:
            out.append(
                f"{s.flake_dir} has uncommitted changes ({'; '.join(other[:3])}); "
                "commit or stash them first, remedy only commits its own files"
            )
        if any(c.endswith(" flake.lock") for c in checkout.changes):
            out.append(
                f"{s.flake_dir}/flake.lock has uncommitted changes; commit or revert "
                "them first, remedy will not mix its bump with them"
            )
    if checkout.owner and checkout.owner != "root":
        if not snap.tools.runuser:
            out.append(
                f"{s.flake_dir} belongs to {checkout.owner} and runuser (util-linux) is "
                "missing: remedy runs git and nix as the checkout's owner"
            )
        if not snap.tools.daemon_socket:
            out.append(
                f"{s.flake_dir} belongs to {checkout.owner} and no nix-daemon listens on "
                "/nix/var/nix/daemon-socket/socket: nix as that user needs the daemon "
                "(nix.enable on NixOS)"
            )
    g = snap.generations
    if g.current_system and g.profile and g.current_system != g.profile:
        gen = g.current_generation
        out.append(
            f"the system profile (generation {gen if gen is not None else '?'}, {g.profile}) "
            f"differs from /run/current-system ({g.current_system}): an earlier switch did "
            "not finish, or `nixos-rebuild boot/test` was used; reconcile them by hand "
            "(switch to one of the two) before remedy switches, or a rollback could land "
            "on the wrong generation"
        )
    if not snap.unit.found:
        out.append(f"{s.unit} is not loaded (LoadState={snap.unit.load_state})")
    out += shadowing_dropins(snap, s)
    return out


def shadowing_dropins(snap: HostSnapshot, s: HostData) -> list[str]:
    """Drop-ins a person put under /etc that set ExecStart= for the unit: they override
    what NixOS builds (and the /run override), so a switch would not take effect."""
    out = []
    for d in snap.unit.dropins:
        if d.origin != "admin":
            continue
        if any(ln.strip().startswith("ExecStart=") for ln in d.content.splitlines()):
            out.append(
                f"{d.path} (not from the store) sets ExecStart= for {s.unit}: it overrides "
                "what NixOS builds and the /run override alike; remove it, or move what it "
                "sets into the configuration, then daemon-reload and run again"
            )
    return out


def _actions(plan: RestorePlan, snap: HostSnapshot, s: HostData, import_note: str | None):
    """Fill in, per setting, what the run will do (for --dry and the report)."""
    durable = plan.path == DURABLE
    for d in plan.settings:
        m, drift = desired.BY_KEY[d.drift.key], d.drift
        if drift.in_sync:
            d.action = "none"
            continue
        next_ok = drift.next_boot == drift.desired or m.durable == desired.NOWHERE
        if m.durable == desired.FLAKE_INPUT and not next_ok:
            d.action = (
                f"bump {s.flake_input}, switch"
                if durable and plan.update_input
                else f"{m.runtime} (volatile: a reboot reverts it)"
                if m.runtime
                else "left drifted"
            )
        elif m.durable == desired.FLAKE_INPUT:
            d.action = "restart onto the durable configuration"
        elif m.durable == desired.MANAGED_FILE and not next_ok:
            if durable and plan.managed_text is not None:
                d.action = f"write {s.managed_file.rsplit('/', 1)[-1]}, switch"
            elif durable and plan.rebuild and import_note is None:
                d.action = "switch (remedy.nix already says so)"
            elif import_note:
                d.action = import_note
            else:
                d.action = "durable path not possible"
            if m.key == "hugepages" and plan.release_hugepages:
                d.action += "; release free pages"
            elif m.runtime is None:
                d.action += "; it has no runtime form"
        elif m.key == "hugepages":
            d.action = (
                "release free pages above the target"
                if plan.release_hugepages
                else "no free pages to release: the next reboot gives the target"
            )
        elif m.key == "runtime_override":
            # the fallback rests on it; on the durable path it holds live right until
            # the next boot (or the restart that activates the pending generation)
            d.action = (
                "remove it"
                if plan.remove_override
                else "kept until the next boot: it holds live right until then"
                if drift.next_boot == drift.desired and (durable or plan.path == NOOP)
                else "kept: the fallback rests on it"
            )
        else:
            d.action = "restart onto the durable configuration"


@dataclass(frozen=True)
class Situation:
    """What the snapshot says, for the settings in scope: the facts every path reads."""

    snap: HostSnapshot
    s: HostData
    scope: tuple[str, ...]
    serving_scope: tuple[str, ...]
    serving_lacks: list[str]  # of the running server
    input_lacks: list[str]  # of the next boot, from the flake input
    managed_lacks: list[str]  # of the next boot, from remedy's managed file
    import_note: str | None  # the managed file is not imported: what to add
    keep: bool  # a person's commit to the managed file stands
    write_managed: bool
    override: bool  # a /run override is present
    probe_fine: bool  # parsed, busy, or only prose
    release: bool  # free hugepages above the target, the pool being in scope
    restart: bool
    rebuild: bool
    base: dict  # what every path's RestorePlan carries
    decision: restarts.RestartDecision | None = None  # may this run restart


def situation(snap: HostSnapshot, s: HostData, scope: tuple[str, ...]) -> Situation:
    drifts = desired.drifts(snap, s, scope)
    now, nxt = desired.live(snap, s), desired.next_boot(snap, s)
    serving_scope = tuple(k for k in scope if desired.BY_KEY[k].serving)
    serving_lacks = desired.missing(now, s, serving_scope)
    input_lacks = desired.missing(nxt, s, scope, desired.FLAKE_INPUT)
    managed_lacks = desired.missing(nxt, s, scope, desired.MANAGED_FILE)
    imported = bool(snap.managed.imported_by)
    import_note = managed_import_missing(snap, s) if managed_lacks and not imported else None
    managed_text = desired.managed_nix(s, scope)
    conflict = managed_conflict(snap, s)
    keep = conflict is not None and s.managed_file_conflict == "keep"
    if keep:
        # A person's value stands (managed_file_conflict=keep): remedy neither writes the
        # file nor proves what it carries; those settings stay as they are, reported.
        managed_lacks = []
    elif conflict:
        managed_lacks = managed_lacks or ["the managed file as host data gives it"]
    write_managed = bool(managed_lacks) and imported and snap.managed.content != managed_text
    override = override_present(snap, s)
    active = snap.unit.active_state == "active"
    busy = snap.probe.outcome == "unreachable" and snap.probe.timed_out and active
    probe_fine = snap.probe.parsed or busy or snap.probe.inconclusive
    release = "hugepages" in scope and bool(hugepage_releases(s, snap.memory))
    prove = tuple(
        k
        for k in scope
        if desired.BY_KEY[k].provable
        and (
            desired.BY_KEY[k].durable == desired.FLAKE_INPUT
            or (desired.BY_KEY[k].durable == desired.MANAGED_FILE and imported and not keep)
        )
    )
    base = dict(
        scope=scope,
        prove=prove,
        settings=[SettingPlan(d, "none") for d in drifts],
        release_hugepages=release,
        write_override=bool(serving_lacks) or not probe_fine or override,
        managed_conflict=conflict
        if any(desired.BY_KEY[k].durable == desired.MANAGED_FILE for k in scope)
        else None,
        bump_blocked=bump_blocked(s) if input_lacks else None,
    )
    needs = {k: desired.urgency(k, s) for k in serving_scope if not desired.BY_KEY[k].holds(now, s)}
    if override and "runtime_override" in scope:
        needs.setdefault("runtime_override", s.urgency("runtime_override"))
    if not probe_fine:
        needs[f"tool calls {snap.probe.outcome}"] = restarts.NOW
    if "hugepages" in scope and not desired.BY_KEY["hugepages"].holds(now, s) and not release:
        needs["hugepages"] = s.urgency("hugepages")
    decision = restarts.decide(needs, s.window, s.restart, snap.clock)
    base["restart"] = decision
    return Situation(
        snap,
        s,
        scope,
        serving_scope,
        serving_lacks,
        input_lacks,
        managed_lacks,
        import_note,
        keep,
        write_managed,
        override,
        probe_fine,
        release,
        restart=bool(serving_lacks) or override or not probe_fine,
        rebuild=bool(input_lacks) or (bool(managed_lacks) and imported),
        base=base,
        decision=decision,
    )


def plan_restore(
    snap: HostSnapshot, s: HostData, scope: tuple[str, ...] = desired.TOOL_CALLING
) -> RestorePlan:
    """Pick the path for the settings in SCOPE (tool calling, or all six for converge)."""
    sit = situation(snap, s, scope)
    g = snap.generations
    unfinished = bool(g.current_system and g.profile and g.current_system != g.profile)
    if not (sit.restart or sit.rebuild or sit.release):
        plan = _noop(sit)
    elif not snap.unit.found:
        plan = _not_loaded(sit)
    elif unfinished and not sit.rebuild and _boot_pending(snap) and not sit.serving_lacks:
        plan = _awaiting_reboot(sit)
    elif not sit.rebuild and sit.restart and unfinished and s.durable:
        plan = _finish_switch(sit) if sit.decision.allowed else _boot_pending_wait(sit)
    elif not sit.rebuild:
        plan = _clean_up(sit)
    elif not (blockers := _rebuild_blockers(sit)):
        plan = _rebuild(sit)
    else:
        plan = _fallback(sit, blockers)
    return _described(plan, sit)


def _described(p: RestorePlan, sit: Situation) -> RestorePlan:
    """P with, per setting, what the run does about it, and the managed file's conflict."""
    s = sit.s
    _actions(p, sit.snap, s, sit.import_note)
    if p.boot_only:
        for sp in p.settings:
            sp.action = sp.action.replace(", switch", ", make it the boot default")
    _takes_effect(p)
    if p.managed_conflict:
        if sit.keep:
            p.reasons.append(
                f"kept: {p.managed_conflict}; remedy does not overwrite a person's "
                "commit (managed_file_conflict=keep): change host data to match, or "
                "set managed_file_conflict=overwrite"
            )
            for sp in p.settings:
                if sp.drift.durable == desired.MANAGED_FILE:
                    sp.action = f"kept: {s.managed_file.rsplit('/', 1)[-1]} is a person's"
        else:
            p.reasons.append(f"overwrites: {p.managed_conflict} (managed_file_conflict=overwrite)")
    switching, last = sit.snap.journal.get("switching"), sit.snap.last_switch
    if switching and last.exit_code is not None and not last.running:
        # a run that died mid-switch (its SSH session dropped): what systemd recorded
        p.reasons.append(
            f"the earlier run {sit.snap.journal.get('run_id', '?')} switched to {switching}: "
            f"its switch-to-configuration exited {last.exit_code} (systemd's journal of "
            "nixos-rebuild-switch-to-configuration)"
        )
    if p.managed_text is not None:
        defs = sit.snap.definitions
        for line in options.overrides(defs, s, sit.scope):
            p.reasons.append(f"overrides: {line}")
        for path in options.missing_options(defs, s, sit.scope):
            p.reasons.append(
                f"the configuration declares no option {path}: remedy's file would not "
                "evaluate (the build will say so, and the fallback runs)"
            )
        if defs is not None and defs.error:
            p.reasons.append(f"what remedy's file overrides: {defs.error}")
    return p


def _takes_effect(p: RestorePlan) -> None:
    """Per drifted setting, when live takes its desired value (the restart policy)."""
    decision = p.restart
    for sp in p.settings:
        d = sp.drift
        if d.in_sync:
            continue
        live_ok = d.live == d.desired or d.state == desired.VOLATILE
        if d.key == "runtime_override":
            live_ok = False  # gone at the next restart (or reboot)
        if live_ok and d.key != "runtime_override":
            sp.takes_effect = "at next boot (live is right now)" if p.rebuild else ""
        elif d.key == "hugepages":
            sp.takes_effect = "now (free pages)" if p.release_hugepages else "at next boot"
        elif decision is None or decision.allowed and p.restart_expected:
            sp.takes_effect = "now (one restart)"
        elif decision.pending and d.key in decision.pending:
            sp.takes_effect = decision.when
        elif p.path == NOOP and decision.pending:
            sp.takes_effect = decision.when


def _noop(sit: Situation) -> RestorePlan:
    probe = sit.snap.probe
    reasons = ["every managed setting in scope holds its desired value, live and at next boot"]
    if sit.import_note:
        reasons = [f"nothing remedy can do now: {sit.import_note}"]
    if probe.parsed:
        reasons.append("the probe is parsed")
    elif probe.inconclusive:
        reasons.append(
            "the probe was inconclusive (the model answered in prose): not a reason "
            "to restart a server that is configured correctly"
        )
    else:
        reasons.append(
            "the probe timed out: not restarting a running server that is "
            "configured correctly (check `remedy status` again)"
        )
    return RestorePlan(NOOP, reasons, **sit.base)


def _not_loaded(sit: Situation) -> RestorePlan:
    unit = sit.snap.unit
    return RestorePlan(
        FALLBACK,
        [],
        [f"{sit.s.unit} is not loaded (LoadState={unit.load_state}); nothing to restore"],
        **{**sit.base, "release_hugepages": False},
    )


def _boot_pending(snap: HostSnapshot) -> bool:
    """The profile's switch exited 100 in this boot (the init interface changed), or NixOS'
    switch inhibitors would refuse a live switch of it (its switch-inhibitors differ from
    the booted system's: the system's state, whoever switched): a reboot activates it
    (another switch would be refused again)."""
    last = snap.last_switch
    return (last.exit_code == 100 or last.inhibited) and not last.running


def _awaiting_reboot(sit: Situation) -> RestorePlan:
    """Durable at next boot; live is right (on the /run override): nothing to do but
    wait for the reboot that activates it, with no restart."""
    g = sit.snap.generations
    why = (
        "its switch-inhibitors differ from the booted system's: NixOS refuses to switch to it live"
        if sit.snap.last_switch.inhibited
        else "its switch-to-configuration exited 100: the init interface changed"
    )
    return RestorePlan(
        NOOP,
        [
            f"durable at next boot; reboot to activate: {g.profile} is the boot default "
            f"({why}); live is right until then, so nothing restarts"
        ],
        **sit.base,
    )


def _finish_switch(sit: Situation) -> RestorePlan:
    """The profile the host boots holds every setting, but it was never activated (a
    switch cut short, or `nixos-rebuild boot`): finish the switch, no build."""
    g = sit.snap.generations
    reasons = [
        f"the system profile ({g.profile}) holds every setting in scope but is not "
        "running: activate it (switch-to-configuration switch), no build"
    ]
    if sit.override:
        reasons.append("remove the stale /run override first, so the server restarts once")
    return RestorePlan(
        DURABLE, reasons, [], False, sit.override, True, finish_switch=g.profile, **sit.base
    )


def _boot_pending_wait(sit: Situation) -> RestorePlan:
    """The profile the host boots holds every setting (remedy's own pending generation,
    or a person's `nixos-rebuild boot`), live needs nothing now: wait for a reboot or a
    restart window; release free hugepages meanwhile."""
    g = sit.snap.generations
    reasons = [
        f"boot pending: the system profile ({g.profile}) holds every setting in scope; "
        f"running the old generation {restarts.old_generation_until(sit.s.restart_window)}",
        sit.decision.why,
    ]
    if sit.release:
        reasons.append("release free hugepages above the target")
        return RestorePlan(DURABLE, reasons, [], False, False, False, **sit.base)
    return RestorePlan(NOOP, reasons, **sit.base)


def _clean_up(sit: Situation) -> RestorePlan:
    """The durable configuration is deployed: cleaning up needs no Nix and no checkout."""
    reasons = ["the deployed configuration holds every setting in scope; no rebuild"]
    if sit.import_note:
        reasons.append(sit.import_note)
    if sit.restart and not sit.decision.allowed:
        reasons.append(sit.decision.why)
        if sit.override:
            reasons.append("the /run override stays until then (it keeps live right)")
        if sit.release:
            reasons.append("release free hugepages above the target")
        return RestorePlan(DURABLE, reasons, [], False, False, False, **sit.base)
    if sit.override:
        reasons.append(
            "remove the stale /run override, daemon-reload, restart onto the durable configuration"
        )
    elif sit.restart:
        reasons.append(
            f"the server runs without {'; '.join(sit.serving_lacks)}; restart it"
            if sit.serving_lacks
            else f"the probe is {sit.snap.probe.outcome}; restart the server"
        )
    if sit.release:
        reasons.append("release free hugepages above the target")
    return RestorePlan(DURABLE, reasons, [], False, sit.override, sit.restart, **sit.base)


def _rebuild_blockers(sit: Situation) -> list[str]:
    s, snap = sit.s, sit.snap
    blockers = durable_blockers(snap, s)
    blocked = bump_blocked(s) if sit.input_lacks else None
    if blocked:
        blockers.append(
            f"bump skipped: {blocked}; set bump_to (a rev a person approved) or "
            "trusted_signers (the keys that may sign it) for the schedule to deploy "
            f"{s.flake_input}, or run remedy by hand"
        )
    if sit.write_managed and snap.managed.untracked:
        blockers.append(
            f"{s.flake_dir}/{s.managed_file} exists but is not committed: remedy writes "
            "and commits that file itself, and git would refuse to overwrite it; move it "
            "away (or commit it) and run again"
        )
    return blockers


def _rebuild(sit: Situation) -> RestorePlan:
    s, snap = sit.s, sit.snap
    lock = snap.flake_input
    steps = []
    if sit.input_lacks and s.pinned_rev:
        steps.append(
            f"lock {s.flake_input} to bump_to {s.pinned_rev[:12]} (locked "
            f"{(lock.rev or '?')[:12]}; approval: pinned by a person; refused if it is "
            "not on the input's branch)"
        )
    elif sit.input_lacks and s.trusted_signers:
        steps.append(
            f"bump {s.flake_input} to its branch's tip (locked {(lock.rev or '?')[:12]}; "
            "approval: signed, the tip's rev is known once fetched)"
        )
    elif sit.input_lacks:
        steps.append(
            f"bump {s.flake_input} to its branch's tip (locked {(lock.rev or '?')[:12]}; "
            "approval: unchecked, neither bump_to nor trusted_signers is set: whatever "
            "the tip is when fetched)"
        )
    if sit.input_lacks and s.trusted_signers:
        steps.append(
            f"check the new rev's signature against trusted_signers {s.trusted_signers} "
            "before the build (known once it is fetched)"
        )
    if sit.write_managed:
        steps.append(f"write and commit {s.managed_file}")
    reasons = [
        f"the next boot lacks {'; '.join(sit.input_lacks + sit.managed_lacks)}; "
        + ", ".join(steps or ["rebuild"])
        + ", prove the build holds it (all in a scratch clone), fast-forward the "
        "checkout, switch to the proven system"
    ]
    if sit.import_note:
        reasons.append(sit.import_note)
    if sit.override:
        reasons.append(
            "remove the stale /run override before switching, so the server restarts once"
        )
    nxt = desired.next_boot(snap, s)
    restart = sit.restart or bool(desired.missing(nxt, s, sit.serving_scope))
    managed_text = desired.managed_nix(s, sit.scope) if sit.write_managed else None
    if restart and not sit.decision.allowed:
        # Nothing live needs a restart now: make the proven generation the boot default
        # (switch-to-configuration boot) and keep the /run override until a reboot or a
        # restart window activates it.
        reasons[0] = reasons[0].replace(
            "switch to the proven system",
            "make the proven system the boot default (switch-to-configuration boot), "
            "activating nothing",
        )
        reasons = [r for r in reasons if "remove the stale /run override" not in r]
        reasons.append(
            "durable at next boot; running the old generation "
            + restarts.old_generation_until(sit.s.restart_window)
        )
        return RestorePlan(
            DURABLE,
            reasons,
            [],
            True,
            False,
            False,
            update_input=bool(sit.input_lacks),
            managed_text=managed_text,
            boot_only=True,
            **sit.base,
        )
    return RestorePlan(
        DURABLE,
        reasons,
        [],
        True,
        sit.override,
        restart,
        update_input=bool(sit.input_lacks),
        managed_text=managed_text,
        **sit.base,
    )


def _fallback(sit: Situation, blockers: list[str]) -> RestorePlan:
    s, snap = sit.s, sit.snap
    needs_override = sit.base["write_override"]
    fallback_restart = sit.restart and not (
        override_in_place(snap, s, sit.scope) and (snap.probe.parsed or snap.probe.inconclusive)
    )
    if fallback_restart and not sit.decision.allowed:
        reasons = [
            f"the running server lacks {'; '.join(sit.serving_lacks)}: no restart now "
            f"({sit.decision.why}); the running /run override stays"
        ]
        return RestorePlan(
            FALLBACK, _released(reasons, sit), blockers, False, False, False, **sit.base
        )
    if not needs_override or not fallback_restart:
        reasons = (
            [
                "the /run override is in place with the wanted parser "
                f"and environment, and the probe is {snap.probe.outcome}; nothing to rewrite"
            ]
            if sit.override
            else ["the server runs the wanted configuration; nothing to rewrite"]
        )
        return RestorePlan(
            FALLBACK, _released(reasons, sit), blockers, False, False, False, **sit.base
        )
    reasons = [
        f"write {s.override_script} and {s.override_dropin} from the store start "
        f"script with --tool-call-parser {s.tool_call_parser}, daemon-reload, restart"
    ]
    return RestorePlan(FALLBACK, _released(reasons, sit), blockers, False, False, True, **sit.base)


def _released(reasons: list[str], sit: Situation) -> list[str]:
    """REASONS, and the release of free hugepages when the run makes one, and what the
    fallback carries of the data settings."""
    if sit.release:
        reasons.append("release free hugepages above the target")
    carried = desired.fallback_carried(sit.s, sit.scope, sit.snap)
    if carried.lacking:
        reasons.append(
            f"the /run override carries {', '.join(carried.lacking)} (volatile: a reboot "
            "reverts it)"
        )
    if carried.sysctls:
        words = ", ".join(f"{k}={v}" for k, v in carried.sysctls.items())
        reasons.append(f"sysctl -w {words} (volatile: a reboot reverts it)")
    return reasons


@dataclass
class Proof:
    toplevel: str
    script: str | None
    parser: str
    env: dict[str, str]
    flags: tuple[str, ...] = ()
    kernel_params: str | None = None
    # its sysctl.d files' and its unit's [Service] settings (None: not read: the data
    # settings of those kinds are then not proven)
    sysctl: dict[str, str] | None = None
    properties: dict[str, str] | None = None
    conditions: tuple[str, ...] | None = None  # its unit's ExecCondition= (the guard)

    def observed(self) -> desired.Observed:
        return desired.built(
            self.parser,
            self.env,
            self.flags,
            self.kernel_params,
            self.sysctl,
            self.properties,
            self.conditions,
        )

    def missing(self, s: HostData, prove: tuple[str, ...] = desired.TOOL_CALLING) -> list[str]:
        """What the built configuration lacks of the settings it must hold."""
        return desired.missing(self.observed(), s, prove)


def unhealthy(plan: RestorePlan, snap: HostSnapshot) -> str | None:
    """Why the run ends with tool calls not working although it does nothing (a hung
    server is not restarted: a person must look), or None."""
    if plan.path != NOOP:
        return None
    probe = snap.probe
    if probe.parsed or probe.inconclusive:
        return None
    return (
        f"unhealthy: the probe is {probe.outcome} ({probe.reason}) and the server was "
        "not restarted (a timeout can be a long generation, a card or the pinned-page "
        "leak): look at the host, or restart it by hand"
    )
