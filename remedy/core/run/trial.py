"""A trial boot that falls back by itself (issue 46 item 4): the pieces a reboot calls.

Where the next boot is a new generation and the host boots with systemd-boot:

* ``arm`` before the reboot: the new generation's entry boots once (systemd-boot's
  one-shot entry, ``bootctl set-oneshot``) and the boot default stays on the running
  generation's entry (``bootctl set-default``), so a boot that never comes back is
  power-cycled into the previous generation;
* ``disarm`` when the reboot is called off after ``arm`` (Ctrl-C before the reboot):
  the host is as before ``arm``;
* ``bless`` after a passing verify: the entry that booted becomes the default;
* ``fall_back`` after a failed verify on a host that came back: the default is still
  the previous entry; the one-shot is cleared and the host reboots into it;
* ``settle`` once the fall back's boot is back on the previous generation: the system
  profile rolled back to it (the failed generation kept in the profile's history, not
  current), loader.conf's default the booted one, and the pin removed, as upstream's
  ``nixos-rebuild boot --rollback`` leaves a host;
* ``read``: which loader, which entry booted, the default, the one-shot, and whether
  a trial is armed or under way.

Every decision is the host program's (``remedy/host/trial/*.sh``, with
``boot_loader.sh``); this module builds their argv and reads their answers. A caller
passes a ``Run``: ARGV in, (exit code, stdout, stderr) out, over its own connection
(``remedy.trial_boot`` has one for a pyinfra host and one for plain ssh).
"""

from __future__ import annotations

from collections.abc import Callable

from remedy.core.config.host_data import HostData
from remedy.core.programs.commands import SWITCH_BOUND_S
from remedy.core.programs.trial import argv
from remedy.core.readings.trial import (
    SUPPORTED_LOADER,
    BootReading,
    TrialStep,
    parse_reading,
    parse_step,
)
from remedy.errors import ConfigError

Run = Callable[[list[str]], tuple[int, str, str]]


class TrialBoot:
    """The trial boot of one host, over RUN (see the module's docstring)."""

    def __init__(self, run: Run, esp: str = "/boot"):
        self._run, self._values = run, {"esp": esp}

    @classmethod
    def of_host(cls, name: str, data: HostData, run: Run) -> TrialBoot:
        """Host NAME's trial boot from its checked host DATA (its ESP); refused before
        connecting when DATA names another loader than systemd-boot."""
        check_host_data(name, data)
        return cls(run, esp=data.esp_path)

    def _call(self, name: str, mode: str, **values: str) -> tuple[int, str, str]:
        return self._run(argv(name, mode, **self._values, **values))

    def read(self) -> BootReading:
        code, out, err = self._call("read", "check")
        return parse_reading(out, err, code)

    def arm(self, trial: str | None = None, check: bool = False) -> TrialStep:
        """Before the reboot. TRIAL: the entry to try (default: loader.conf's)."""
        extra = {"trial": trial} if trial else {}
        return parse_step(*_reordered(self._call("arm", _mode(check), **extra)))

    def disarm(self, check: bool = False) -> TrialStep:
        """A reboot called off after ``arm``: the one-shot entry and arm's pin go, so
        the next boot is loader.conf's default again."""
        return parse_step(*_reordered(self._call("disarm", _mode(check))))

    def bless(self, verify_passed: bool, check: bool = False) -> TrialStep:
        """After the verify; refused unless VERIFY_PASSED."""
        verify = "passed" if verify_passed else "failed"
        return parse_step(*_reordered(self._call("bless", _mode(check), verify=verify)))

    def fall_back(self, reboot: bool = True, check: bool = False) -> TrialStep:
        """After a failed verify on a host that came back: into the default. REBOOT:
        the program reboots the host itself; the connection then drops, and its
        answer may be lost with it (a give-up that says no answer): read the host
        once it is back. Not REBOOT: the caller reboots it."""
        values = {"reboot": "yes" if reboot else "no"}
        return parse_step(*_reordered(self._call("fallback", _mode(check), **values)))

    def settle(self, lock_wait_s: float = 30, check: bool = False) -> TrialStep:
        """After a fall back, on the previous generation: the profile and loader.conf
        back to it, the pin removed (nothing recorded by a fall back: a noop).
        LOCK_WAIT_S: how long the switch waits for another that holds the system."""
        values = {"lock_wait_s": f"{lock_wait_s:g}", "switch_bound_s": str(SWITCH_BOUND_S)}
        return parse_step(*_reordered(self._call("settle", _mode(check), **values)))


def _mode(check: bool) -> str:
    return "check" if check else "apply"


def _reordered(ran: tuple[int, str, str]) -> tuple[str, str, int]:
    code, out, err = ran
    return out, err, code


def not_back_note(name: str, armed: TrialStep) -> str:
    """What a report says of host NAME when the trial boot ARMED (``arm``'s answer)
    does not come back: a power cycle returns it to the previous generation. Empty
    when nothing was armed."""
    if not (armed.changed or armed.verdict == "noop") or not armed.previous:
        return ""
    if not armed.trial or armed.trial == armed.previous:
        return ""
    return (
        f"{name} did not come back from its trial boot of {armed.trial}: a power cycle "
        f"boots {armed.previous}, the boot default (the generation that ran before); "
        "the one-shot entry was spent on the trial"
    )


def check_host_data(name: str, data: HostData) -> None:
    """A trial boot asked of host NAME whose DATA (checked host data) says it does not
    boot with systemd-boot: refused before connecting, naming the loader."""
    if data.boot_loader != SUPPORTED_LOADER:
        raise ConfigError(
            f"{name}: a trial boot needs systemd-boot (its one-shot entry); this "
            f"host's boot_loader is {data.boot_loader}: not supported (reboot it "
            "without a trial)"
        )
