"""Each step's values, one typed dataclass a step: what its host program is run with.

The planner (``remedy.core.run.steps``) builds them; the deploy's operation hands them
to the step's program (``remedy/host/steps/NAME.sh``) and the manual script renders
the same words (``words``). A field marked ``local`` stays with remedy (why a step is
skipped, what ``--dry`` says); every other field is a ``KEY=VALUE`` argument of the
program, and ``items`` its list after ``--``. A builder is its fields ``builder_*``.
Pure: no host is read here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from remedy.core.programs.builder import Builder
from remedy.core.programs.commands import SWITCH_BOUND_S


def local(default=None):
    """A value remedy keeps (never sent to the host program)."""
    return field(default=default, metadata={"local": True})


@dataclass(frozen=True, kw_only=True)
class StepValues:
    """What every step's values carry: its program's name and why it is skipped."""

    PROGRAM: ClassVar[str] = ""
    skip: str | None = local()  # why this host does not need the step (the planner's)
    contingent: bool = local(False)  # runs only if the durable path fails

    def words(self) -> list[str]:
        """The program's arguments: KEY=VALUE for each value it takes, then ``--`` and
        the items (a list value), if any."""
        out: list[str] = []
        items: tuple[str, ...] = ()
        for f in dataclasses.fields(self):
            if f.metadata.get("local"):
                continue
            value = getattr(self, f.name)
            if f.name == "items":
                items = tuple(value)
            elif isinstance(value, Builder) or (f.name == "builder" and value is None):
                out += _builder_words(value)
            else:
                out.append(f"{f.name}={_word(value)}")
        return [*out, "--", *items] if items else out


def _word(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _builder_words(b: Builder | None) -> list[str]:
    if b is None:
        return []
    values = {
        "name": b.name, "user": b.user, "address": b.address, "port": b.port, "key": b.key,
        "tag": b.tag, "signed": b.signed, "max_jobs": b.max_jobs, "cores": b.cores,
        "timeout_s": b.timeout_s,
    }  # fmt: skip
    return [f"builder_{k}={_word(v)}" for k, v in values.items()]


@dataclass(frozen=True, kw_only=True)
class RunValues(StepValues):
    """A step of a run that keeps a run journal on the host. When it runs (its stage)
    its program decides (remedy/host/lib.sh ``stage_off``), from WHEN, FAILURE, the
    plan's PATH, a stop request (STOPPED, its driver's at execution) and the run
    journal."""

    journal: str
    run_id: str
    when: str = ""  # always, durable, override, rollback, fallback ("": no stage)
    failure: str = ""  # gives-up (a failure gives up its stage) or stops (the run)
    path: str = ""  # the plan's: durable or fallback
    stopped: str = ""  # why the run was asked to stop (its driver's, at execution)


@dataclass(frozen=True, kw_only=True)
class Begin(RunValues):
    PROGRAM: ClassVar[str] = "begin"
    unit: str
    flake_dir: str
    host: str
    # the host as the plan read it (empty: not read): the run stops if it changed
    expect_machine_id: str = ""
    expect_head: str = ""
    expect_profile: str = ""
    expect_current: str = ""
    expect_exec_start: str = ""
    plan_id: str = ""  # the plan's own id: a run of it finishes an earlier one it killed


@dataclass(frozen=True, kw_only=True)
class Gate(RunValues):
    PROGRAM: ClassVar[str] = "gate"
    min_gb: float
    doing: str
    host: str
    now_gb: float | None = local()  # MemAvailable when the run was planned (for --dry)


@dataclass(frozen=True, kw_only=True)
class Bump(RunValues):
    PROGRAM: ClassVar[str] = "bump"
    flake_dir: str
    flake_input: str
    flake_host: str
    update: bool
    pinned_rev: str | None
    allowed_signers: str | None
    trusted_signers: str | None
    required_fix_rev: str | None
    lock_message: str
    builder: Builder | None = None


@dataclass(frozen=True, kw_only=True)
class Managed(RunValues):
    PROGRAM: ClassVar[str] = "managed"
    flake_dir: str
    managed_file: str
    text: str
    message: str
    flake_host: str
    builder: Builder | None = None


@dataclass(frozen=True, kw_only=True)
class Prove(RunValues):
    PROGRAM: ClassVar[str] = "prove"
    flake_dir: str
    flake_host: str
    flake_input: str
    unit: str
    min_gb: float
    nix_memory_max_gb: float | None
    nix_timeout_s: int
    build_max_jobs: int
    build_cores: int
    allow_local_build: bool
    checks_default: bool
    builder: Builder | None = None
    # check:NAME#ATTR (each flake check), prove:KIND<TAB>LABEL<TAB>VALUE (each setting)
    items: tuple[str, ...] = ()
    checks: tuple[str, ...] = local(())  # the flake checks, for --dry
    host_data: object = local()  # the host's data: what a Nix error names to fix


@dataclass(frozen=True, kw_only=True)
class FastForward(RunValues):
    PROGRAM: ClassVar[str] = "fast_forward"
    flake_dir: str


@dataclass(frozen=True, kw_only=True)
class Hugepages(RunValues):
    PROGRAM: ClassVar[str] = "hugepages"
    items: tuple[str, ...] = ()  # SIZE_KB:PAGES, each pool's target
    managed: bool = local(False)  # the pool is a managed setting of this run


@dataclass(frozen=True, kw_only=True)
class Drain(RunValues):
    PROGRAM: ClassVar[str] = "drain"
    server_url: str
    timeout_s: int
    urgent: bool
    wait_s: int  # how long one call may wait (the deploy calls again, a slice a call)
    last: bool = True  # the call that ends timeout_s
    first: bool = True  # the first call: it says once that it waits
    decided: str = ""  # a postponement a check of this run found: only recorded


@dataclass(frozen=True, kw_only=True)
class RemoveOverride(RunValues):
    PROGRAM: ClassVar[str] = "remove_override"
    unit: str
    dropin: str
    script: str


@dataclass(frozen=True, kw_only=True)
class Switch(RunValues):
    PROGRAM: ClassVar[str] = "switch"
    toplevel: str | None
    set_profile: bool
    action: str
    unit: str
    lock_wait_s: float
    server_url: str | None
    switch_bound_s: int = SWITCH_BOUND_S  # how long the switch may run (switch_run.sh)


@dataclass(frozen=True, kw_only=True)
class Restart(RunValues):
    PROGRAM: ClassVar[str] = "restart"
    unit: str
    stage: str
    min_gb: float
    may_restart: bool
    reason: str
    override_ran_before: bool
    server_url: str | None
    host: str


@dataclass(frozen=True, kw_only=True)
class Verify(RunValues):
    PROGRAM: ClassVar[str] = "verify"
    unit: str
    stage: str
    server_url: str
    model: str | None
    probe_timeout_s: int
    ready_timeout_s: int
    parsed_before: bool
    probe_head: str
    probe_tail: str
    items: tuple[str, ...] = ()  # want:KEY=VALUE, later:KEY


@dataclass(frozen=True, kw_only=True)
class RemoveCarriers(RunValues):
    PROGRAM: ClassVar[str] = "remove_carriers"
    unit: str
    items: tuple[str, ...] = ()  # the drop-ins


@dataclass(frozen=True, kw_only=True)
class Override(RunValues):
    PROGRAM: ClassVar[str] = "override"
    unit: str
    parser: str
    exports: str
    override_script: str
    override_dropin: str
    dropin_text: str
    min_gb: float
    write: bool
    putting_back: bool = False
    lacking: str = ""
    host: str
    items: tuple[str, ...] = ()  # want:KEY=VALUE, sysctl:KEY=VALUE


@dataclass(frozen=True, kw_only=True)
class Rollback(RunValues):
    PROGRAM: ClassVar[str] = "rollback"
    unit: str
    flake_dir: str
    flake_host: str
    min_gb: float
    lock_wait_s: float
    host: str
    switch_bound_s: int = SWITCH_BOUND_S  # how long its switch may run (switch_run.sh)


@dataclass(frozen=True, kw_only=True)
class ScratchRemoved(RunValues):
    PROGRAM: ClassVar[str] = "scratch_removed"
    flake_dir: str
    builder: Builder | None = None
    made: bool = local(False)  # the run makes a scratch clone
    left: tuple[str, ...] = local(())  # the scratch clones the snapshot found


# remedy reboot's journal on the host: it outlives the reboot (/run does not), so a
# run stopped while its host came back leaves what the next run reads.
REBOOT_JOURNAL = "/var/lib/remedy/reboot.journal"


@dataclass(frozen=True, kw_only=True)
class RebootReady(RunValues):
    """Before remedy reboot: the boot default holds every setting (PROVE items)."""

    PROGRAM: ClassVar[str] = "reboot_ready"
    unit: str
    items: tuple[str, ...] = ()  # prove:KIND<TAB>LABEL<TAB>VALUE (desired.proof_items)


@dataclass(frozen=True, kw_only=True)
class Reboot(RunValues):
    PROGRAM: ClassVar[str] = "reboot"
    host: str
    delay_s: int = 2  # the reboot's timer: its answer is back over SSH before


@dataclass(frozen=True, kw_only=True)
class RebootBack(RunValues):
    PROGRAM: ClassVar[str] = "reboot_back"
    unit: str
    boot_id_before: str
    wait_s: int  # how long systemd may take to finish booting


@dataclass(frozen=True, kw_only=True)
class RebootDone(RunValues):
    PROGRAM: ClassVar[str] = "reboot_done"
    host: str
    min_gb: float
    failed: str = ""  # what the checks after the boot found wrong (empty: nothing)


@dataclass(frozen=True, kw_only=True)
class Outcome(RunValues):
    """The run's outcome: the host's outcome program reads what the steps answered in
    this run and classifies it (result, path, exit code, the line); no stage of its own.
    PLAN_PATH: the plan's (durable, fallback or noop); REASONS: the plan's, "; " between;
    UNHEALTHY: why a run that does nothing leaves a server that does not answer tool
    calls (``plan.unhealthy``)."""

    PROGRAM: ClassVar[str] = "outcome"
    plan_path: str
    reasons: str
    old_rev: str | None = None
    flake_input: str = "tt-stack"
    unhealthy: str | None = None


CHECK, APPLY = "check", "apply"


def argv(values: StepValues, mode: str) -> list[str]:
    """The step's program run in MODE (``check``: decide, change nothing; ``apply``)
    with VALUES: the same text the manual script runs."""
    from remedy import host

    name = values.PROGRAM
    return ["sh", "-c", host.step_program(name), f"remedy-{name}", mode, *values.words()]
