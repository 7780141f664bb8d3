"""What a switch-to-configuration's exit code means, and what remedy does on each.

Checked against switch-to-configuration-ng (``src/main.rs``), nixos-rebuild-ng
(``nixos_rebuild/nix.py``, ``services.py``) and NixOS 26.05's switch inhibitors
(``nixos/modules/system/activation/switchable-system.nix``):

====  =====================================================  ===============================
exit  what happened                                          remedy
====  =====================================================  ===============================
0     the boot entry is installed and the system activated   verify
4     activated, but some units (or a user's activation)     serving unit active: done, the
      failed                                                 failed units named; else the
                                                             fallback, and the rollback
100   the init interface changed: the boot entry is          the /run override keeps live
      installed, nothing is activated; a reboot is needed    right; the boot entry is kept:
                                                             "durable at next boot"
1     "Pre-switch check 'switchInhibitors' failed": the      switch-to-configuration boot
      new generation changes a package listed as a switch    (which skips that check): the
      inhibitor; nothing was done                            boot default, as after 100
lock  another switch holds /run/nixos/switch-to-             change nothing durable (the
      configuration.lock (or its transient unit runs)        profile goes back); wait
                                                             lock_wait_s, then give up
else  the activation script failed (2), the boot loader      roll back: the profile, then the
      could not be installed, a pre-switch check failed, …   restored generation's switch-
                                                             to-configuration (boot entry)
====  =====================================================  ===============================
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

DONE, UNITS_FAILED, BOOT_PENDING, INHIBITED, LOCKED, FAILED = (
    "done",
    "units failed",
    "boot pending",
    "inhibited",
    "locked",
    "failed",
)

_LOCK_SAID = re.compile(
    r"Could not acquire lock|nixos-rebuild-switch-to-configuration\.service "
    r"(was already loaded|already exists)|Unit nixos-rebuild-switch-to-configuration\S* "
    r"(was already loaded|already exists)"
)
_FAILED_UNITS = re.compile(r"the following units failed: (.+)")
# NixOS 26.05's preSwitchChecks script, for its switchInhibitors check (`boot` skips it)
_INHIBITED = re.compile(r"Pre-switch check 'switchInhibitors' failed")


@dataclass(frozen=True)
class Outcome:
    kind: str
    code: int | None
    failed_units: tuple[str, ...] = ()
    holders: tuple[str, ...] = ()


def outcome(code: int | None, said: str) -> Outcome:
    """The outcome of a switch that exited CODE (None: no exit code came back) and
    printed SAID."""
    if code == 0:
        return Outcome(DONE, 0)
    # switch-to-configuration-ng dies with the errno as its exit code (main.rs die():
    # 11, EWOULDBLOCK, for a lock another holds): its words decide, before any number
    if code is not None and _LOCK_SAID.search(said):
        lines = [ln.strip() for ln in said.splitlines() if _LOCK_SAID.search(ln)]
        return Outcome(LOCKED, code, holders=tuple(dict.fromkeys(lines)))
    if code == 4:
        units: list[str] = []
        for m in _FAILED_UNITS.finditer(said):
            units += [u.strip() for u in m.group(1).split(",") if u.strip()]
        return Outcome(UNITS_FAILED, 4, tuple(dict.fromkeys(units)))
    if code == 100:
        return Outcome(BOOT_PENDING, 100)
    if code == 1 and _INHIBITED.search(said):
        return Outcome(INHIBITED, 1)
    return Outcome(FAILED, code)


def locked(holders, waited_s: float) -> str:
    """Why a switch did not run: another holds it."""
    wait = f" after waiting {waited_s:g} s (lock_wait_s)" if waited_s else ""
    return (
        f"another switch holds the system{wait}: {'; '.join(holders)}; nothing durable "
        "changed: let it finish, then run again"
    )


@dataclass(frozen=True)
class LastSwitch:
    """The transient unit's last switch in this boot, as systemd recorded it, and what
    the system's state says of the next one. Never the switch's words: a person's
    switch (released nixos-rebuild-ng: ``systemd-run --pipe``) says them on their
    terminal, not in the journal."""

    running: bool = False  # a switch is running now (a person's, or a dropped run's)
    exit_code: int | None = None  # of the last one that ended (None: none this boot)
    failed_units: tuple[str, ...] = field(default_factory=tuple)  # failed now
    # NixOS 26.05's switch inhibitors would refuse a live switch of the boot default: its
    # switch-inhibitors differ from the *booted* system's (switchable-system.nix), so a
    # reboot activates it (a `boot` may have made it the default)
    inhibited: bool = False

    @property
    def units_failed(self) -> tuple[str, ...]:
        """The units still failed after a switch that exited 4."""
        return self.failed_units if self.exit_code == 4 else ()


def parse_last_switch(lines: list[str]) -> LastSwitch:
    """The ``nix.switch`` section: ``state``, ``journal <json>`` (systemd's records of the
    transient unit: its exit status), ``failed`` and ``inhibitors booted|profile SHA``
    lines."""
    state, code, failed = "", None, []
    inhibitors: dict[str, str] = {}
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "state":
            state = rest.strip()
        elif word == "failed" and rest.strip():
            failed.append(rest.strip())
        elif word == "inhibitors":
            which, _, sha = rest.strip().partition(" ")
            inhibitors[which] = sha.strip() or "none"
        elif word == "journal":
            try:
                entry = json.loads(rest)
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            message = str(entry.get("MESSAGE") or "")
            if entry.get("EXIT_STATUS") not in (None, ""):
                try:
                    code = int(entry["EXIT_STATUS"])
                except (TypeError, ValueError):
                    pass
            elif re.search(r"Deactivated successfully|^Succeeded", message):
                code = 0
            elif message.startswith("Started ") or message.startswith("Starting "):
                code = None  # a later start: its end decides
    running = state in ("active", "activating", "deactivating")
    booted, profile = inhibitors.get("booted", "none"), inhibitors.get("profile", "none")
    # the check's own rule: a side without the file has nothing to check
    inhibited = "none" not in (booted, profile) and booted != profile
    return LastSwitch(running, code, tuple(failed), inhibited)
