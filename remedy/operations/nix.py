"""Nix operations of the durable path: bump the input, prove the fix, commit, switch,
roll back, and the scratch clone's removal.

Each takes its step's values (``remedy.core.programs.step_values``) and runs its host
program (``remedy/host/steps/*.sh``), which decides when it runs, from the host and the
run journal (``remedy.core.programs.journal``): the scratch clone, the proven toplevel
and the lock commit go there, not through Python memory. git and nix run as the flake
checkout's owner, with the flake features on the command line; only the profile and
the activation run as root. A step that gives up fails with its reason (ignored: the
run goes on to the fallback); it never leaves production half-changed.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import operation

from remedy.core.config import options
from remedy.core.programs import step_values as sv
from remedy.core.run.stop import NOT_STOPPED, StopRequest
from remedy.operations import program


def _run(values: sv.RunValues, stop: StopRequest, reason=None, said: str | None = None):
    """The step (``program.operate``), REASON saying a give-up better."""
    yield from program.operate(values, stop=stop, said=said, reason=reason)


@operation(is_idempotent=False)
def flake_input_updated(values: sv.Bump, stop: StopRequest = NOT_STOPPED):
    """In a scratch clone of the checkout (as its owner), bump the input with the host's
    Nix command, or lock it to bump_to, and commit flake.lock there. The checkout itself
    is not touched until the fix is proven. The scratch clone's path goes into the run
    journal. A fetch that fails, a rev off the branch or an untrusted signature gives up
    the durable path.

    + values: the step's values (``step_values.Bump``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from _run(values, stop)


@operation(is_idempotent=False)
def managed_file_written(values: sv.Managed, stop: StopRequest = NOT_STOPPED):
    """Write remedy's managed Nix file (imported by the host's configuration) with the
    host data's values in the scratch clone, as the checkout's owner, and commit it
    there naming its issues. The checkout moves only with the proven commits.

    + values: the step's values (``step_values.Managed``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from _run(values, stop)


@operation()
def fix_proven(values: sv.Prove, stop: StopRequest = NOT_STOPPED):
    """Ask Nix what the scratch clone's configuration needs (``--dry-run``): derivations
    to compile (no ``preferLocalBuild``, no text file) give up the durable path unless
    ``allow_local_build``. Then, memory-gated and bounded, build its toplevel and read
    the built system: it must hold every setting it proves. Then the flake checks. The
    proven toplevel goes into the run journal.

    + values: the step's values (``step_values.Prove``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    if values.builder:
        said = "the builder builds: see the plan"
    else:
        named = ", ".join(values.checks) or "none: flake_checks is empty"
        said = (
            "will ask Nix what the bump builds, then build the bumped configuration and "
            f"read its start script, then build the flake checks ({named}); what the "
            "switch changes beyond the managed settings (kernel, kernel parameters, "
            "package versions) is known after the build"
        )

    def reason(a) -> str | None:  # what host data to fix, when Nix names an option
        if not a.output or "does not evaluate" not in a.text and "does not build" not in a.text:
            return None
        return options.evaluation_blocker("\n".join(a.output), values.host_data)

    yield from _run(values, stop, reason, said)


@operation(is_idempotent=False)
def flake_lock_committed(values: sv.FastForward, stop: StopRequest = NOT_STOPPED):
    """Bring the proven commits (the lock naming tt-stack#49 and the revs, the managed
    file) from the scratch clone into the checkout, as its owner, by a fast-forward:
    HEAD and flake.lock move in one short step, or not at all if someone committed
    meanwhile. The new HEAD goes into the run journal, for a rollback.

    + values: the step's values (``step_values.FastForward``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from _run(values, stop)


@operation(is_idempotent=False)
def system_switched(values: sv.Switch, stop: StopRequest = NOT_STOPPED):
    """Switch to the proven toplevel (the run journal's, or one known beforehand), as
    ``nixos-rebuild switch`` ends: wait for a switch that another holds, set the system
    profile, then run its ``switch-to-configuration`` in nixos-rebuild-ng's transient
    unit. What was proven is what runs. Its exit code decides
    (``remedy.core.readings.switch``): 0 is done; 4 is done if the serving unit is
    active, else the fallback takes over; 100 made the new generation the boot default
    and activated nothing; a switch held by another changes nothing durable; anything
    else is rolled back.

    + values: the step's values (``step_values.Switch``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from _run(values, stop)


@operation(is_idempotent=False)
def system_rolled_back(values: sv.Rollback, stop: StopRequest = NOT_STOPPED):
    """After a failed switch or verification, return to exactly the generation recorded
    when the run began, as ``nixos-rebuild --rollback`` does: the profile back, then
    always the restored generation's switch-to-configuration, so the boot entry is
    right again; and revert the commits the run brought into the checkout. Not after a
    switch that exited 100 or that the switch inhibitors turned into a boot, nor one
    another switch held. A failed rollback fails this step (ignored): the run goes on
    to the fallback.

    + values: the step's values (``step_values.Rollback``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    yield from program.operate(
        values, stop=stop, prepare="runs only if the switch or its verification fails"
    )


@operation(is_idempotent=False)
def scratch_removed(values: sv.ScratchRemoved, stop: StopRequest = NOT_STOPPED):
    """Remove the scratch clone the run made, whatever happened before, and any a killed
    run left: every run that makes one holds the host lock, so none of them is in use.

    + values: the step's values (``step_values.ScratchRemoved``)
    + stop: the run's stop request (the program then starts nothing new)
    """
    if not (values.made or values.left):
        host.noop("no scratch clone")
        return
    yield from _run(values, stop)
