"""The keys a step may record for the outcome and the audit, with their types: pure.

A step records what it found out (``remedy.operations.said.say``) on its own
pyinfra result; ``remedy.core.run.outcome`` reads it from there. Both ends name the
keys declared here: recording an undeclared key, or a value of another type, is a
bug and raises at once (a test fails), never a value nobody reads.
"""

from __future__ import annotations

from types import MappingProxyType

from remedy.core.programs.signers import Signature

NoneType = type(None)
SEQUENCE = (list, tuple)  # said as a list in the audit

# key -> the types its value may have
KEYS = MappingProxyType(
    {
        # why the step gave up (it failed, ignored where the run goes on)
        "why": (str,),
        # what the workstation adds to a give-up (the host data to fix): the outcome line
        "hint": (str,),
        # the fallback could not restore tool calling: the run failed
        "failed": (str,),
        # a durable step that gave up: why (remedy/host/lib.sh: the fallback takes over)
        "durable_failed": (str,),
        # why a step's stage is off (its program did not run it)
        "stage_off": (str,),
        # the memory gate refused: the run is refused
        "refused": (str,),
        # notes for the outcome line and the audit
        "notes": SEQUENCE,
        # the bump: the rev it takes, and its signature state
        "new_rev": (str,),
        "signature": (Signature, dict, NoneType),
        # the proof: derivations compiled on the host, the proven toplevel, what the
        # switch changes beyond the settings, the flake checks' results
        "local_builds": SEQUENCE,
        "toplevel": (str,),
        "built_on": (str,),  # the builder that built it (host data build_host)
        "switch_changes": (dict,),
        "flake_checks": SEQUENCE,
        # the fast-forward: the lock commit the checkout holds
        "lock_commit": (str, NoneType),
        # the switch: its exit code, the units that failed, who held it
        "switch_exit": (int, NoneType),
        "switch_failed_units": (*SEQUENCE, NoneType),
        "switch_locked": SEQUENCE,
        "boot_pending": (str,),
        "boot_pending_reason": (str,),
        # the rollback
        "lock_reverted": (str,),
        "rolled_back": (bool,),
        "rollback_failed": (str,),
        "rollback_not_run": (str,),
        # the restart: how many, why, the requests it cut, a postponed one
        "restarts": (int,),
        "restart_reason": (str,),
        "requests_cut": (int,),
        "restart_postponed": (str,),
        # the server's starts in the run, counted in the host's journal (the verify)
        "server_starts": (int,),
        # the fallback's override was written
        "override_written": (bool,),
        # the verification: the last probe, a configuration right but unverified, why
        # it failed
        "probe_after": (str,),
        "unverified": (str,),
        "verification": (str,),
        # the memory gate passed
        "gate": (str,),
        # the trial boot (remedy/host/trial, remedy.core.readings.trial): the loader,
        # the systems and entries, the state of a trial, and the entries a piece
        # named (the default it falls back to, the one tried, the one that booted)
        "loader": (str,),
        "loader_info": (str,),
        "loader_why": (str,),
        "running_system": (str,),
        "booted_system": (str,),
        "running_entry": (str,),
        "conf_default": (str,),
        "booted_entry": (str,),
        "default_entry": (str,),
        "oneshot_entry": (str,),
        "next_entry": (str,),
        "trial_state": (str,),
        "previous": (str,),
        "trial_entry": (str,),
        # settle, after a fall back: the failed entry, its toplevel and generation,
        # and the booted generation the system profile goes back to
        "failed_entry": (str,),
        "failed_system": (str,),
        "failed_generation": (str,),
        "booted_generation": (str,),
        # remedy reboot (remedy.reboots): the boot id and MemAvailable (kB) a step
        # read, the boot default, an earlier reboot never verified, the serving unit's
        # state after the boot
        "boot_id": (str,),
        "mem_available_kb": (str,),
        "boot_default": (str,),
        "earlier": (str,),
        "unit_state": (str,),
        # the run's outcome, as the host's outcome program classified it
        # (remedy/host/steps/outcome.sh): result, path, exit code, the line, why it
        # is not ok, the rev the checkout locks after, the server's starts
        "outcome_result": (str,),
        "outcome_path": (str,),
        "outcome_exit": (int, NoneType),
        "outcome_line": (str,),
        "outcome_why": (str,),
        "outcome_new_rev": (str,),
        "outcome_restarts": (int, NoneType),
    }
)


def checked(values: dict) -> dict:
    """VALUES if every key is declared and its value has a declared type, else raise."""
    for key, value in values.items():
        if key not in KEYS:
            raise KeyError(f"a step recorded {key!r}, which remedy.core.run.report_keys lacks")
        if not isinstance(value, KEYS[key]):
            raise TypeError(
                f"a step recorded {key}={value!r}: not "
                + " or ".join(t.__name__ for t in KEYS[key])
            )
    return values
