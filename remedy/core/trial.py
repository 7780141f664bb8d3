"""A trial boot that falls back by itself (issue 46 item 4): the pieces a reboot calls.

Where the next boot is a new generation and the host boots with systemd-boot:

* ``arm`` before the reboot: the new generation's entry boots once (systemd-boot's
  one-shot entry, ``bootctl set-oneshot``) and the boot default stays on the running
  generation's entry (``bootctl set-default``), so a boot that never comes back is
  power-cycled into the previous generation;
* ``bless`` after a passing verify: the entry that booted becomes the default;
* ``fall_back`` after a failed verify on a host that came back: the default is still
  the previous entry; the one-shot is cleared and the host reboots into it;
* ``read``: which loader, which entry booted, the default, the one-shot, and whether
  a trial is armed or under way.

Every decision is the host program's (``remedy/host/trial/*.sh``, with
``boot_loader.sh``); this module builds their argv and reads their answers. A caller
passes a ``Run``: ARGV in, (exit code, stdout, stderr) out, over its own connection
(``remedy.trial_boot`` has one for a pyinfra host and one for plain ssh).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from remedy import host
from remedy.core.readings import answer as answers
from remedy.errors import ConfigError

PROGRAMS = ("read", "arm", "bless", "fallback")
SUPPORTED_LOADER = "systemd-boot"
# What the host's data may say of its loader (``boot_loader``); anything but
# systemd-boot refuses a trial boot before connecting.
LOADERS = ("systemd-boot", "grub", "other")

Run = Callable[[list[str]], tuple[int, str, str]]


def program(name: str) -> str:
    """The text of trial program NAME: the host library, then the program."""
    if name not in PROGRAMS:
        raise ValueError(f"no trial program {name!r} (one of {', '.join(PROGRAMS)})")
    return (
        host.text("lib.sh")
        + "\n# ---- the trial program: "
        + name
        + "\n"
        + host.text(f"trial/{name}.sh")
    )


def argv(name: str, mode: str = "apply", **values: str) -> list[str]:
    """``sh -c PROGRAM remedy-trial-NAME MODE KEY=VALUE...``: every part its own word."""
    if mode not in ("check", "apply"):
        raise ValueError(f"mode {mode!r}: check or apply")
    words = [f"{k}={v}" for k, v in values.items()]
    return ["sh", "-c", program(name), f"remedy-trial-{name}", mode, *words]


@dataclass(frozen=True)
class BootReading:
    """What ``read`` found. ``trial``: none, armed (a one-shot entry other than the
    pinned default), on-trial (the entry that booted is not the pinned default), or
    unsupported (not systemd-boot: ``why``)."""

    loader: str
    loader_info: str
    why: str
    trial: str
    running_entry: str = ""
    booted_entry: str = ""
    default_entry: str = ""
    oneshot_entry: str = ""
    conf_default: str = ""
    next_entry: str = ""
    running_system: str = ""
    booted_system: str = ""

    @property
    def supported(self) -> bool:
        return self.loader == SUPPORTED_LOADER

    @property
    def armed(self) -> bool:
        return self.trial == "armed"

    @property
    def on_trial(self) -> bool:
        return self.trial == "on-trial"


def parse_reading(stdout: str, stderr: str = "", code: int | None = 0) -> BootReading:
    """The reading in ``read``'s answer. A program that answered no verdict (a lost
    connection) raises ValueError with what it said."""
    ans = answers.parse(stdout, stderr, code)
    said = ans.said
    if ans.verdict != answers.NOOP or "loader" not in said:
        raise ValueError(f"the boot loader could not be read: {ans.text or stderr.strip()}")

    def get(key: str) -> str:
        return str(said.get(key) or "")

    return BootReading(
        loader=get("loader"),
        loader_info=get("loader_info"),
        why=get("loader_why") or (ans.text if get("trial") == "unsupported" else ""),
        trial=get("trial") or "none",
        running_entry=get("running_entry"),
        booted_entry=get("booted_entry"),
        default_entry=get("default_entry"),
        oneshot_entry=get("oneshot_entry"),
        conf_default=get("conf_default"),
        next_entry=get("next_entry"),
        running_system=get("running_system"),
        booted_system=get("booted_system"),
    )


@dataclass(frozen=True)
class TrialStep:
    """What ``arm``, ``bless`` or ``fall_back`` answered: the verdict (act in check
    mode, done, noop, give-up), why, and the entries it named."""

    verdict: str
    text: str
    previous: str = ""  # the default a trial falls back to
    trial: str = ""  # the entry tried (arm)
    booted: str = ""  # the entry that booted (bless, fall back)

    @property
    def changed(self) -> bool:
        return self.verdict == answers.DONE

    @property
    def refused(self) -> bool:
        return self.verdict == answers.GIVE_UP


def parse_step(stdout: str, stderr: str = "", code: int | None = 0) -> TrialStep:
    ans = answers.parse(stdout, stderr, code)
    said = ans.said
    return TrialStep(
        verdict=ans.verdict,
        text=ans.text,
        previous=str(said.get("previous") or ""),
        trial=str(said.get("trial") or ""),
        booted=str(said.get("booted_entry") or ""),
    )


class TrialBoot:
    """The trial boot of one host, over RUN (see the module's docstring)."""

    def __init__(self, run: Run, esp: str = "/boot"):
        self._run, self._values = run, {"esp": esp}

    def _call(self, name: str, mode: str, **values: str) -> tuple[int, str, str]:
        return self._run(argv(name, mode, **self._values, **values))

    def read(self) -> BootReading:
        code, out, err = self._call("read", "check")
        return parse_reading(out, err, code)

    def arm(self, trial: str | None = None, check: bool = False) -> TrialStep:
        """Before the reboot. TRIAL: the entry to try (default: loader.conf's)."""
        extra = {"trial": trial} if trial else {}
        return parse_step(*_reordered(self._call("arm", _mode(check), **extra)))

    def bless(self, verify_passed: bool, check: bool = False) -> TrialStep:
        """After the verify; refused unless VERIFY_PASSED."""
        verify = "passed" if verify_passed else "failed"
        return parse_step(*_reordered(self._call("bless", _mode(check), verify=verify)))

    def fall_back(self, reboot: bool = True, check: bool = False) -> TrialStep:
        """After a failed verify on a host that came back: into the default. REBOOT:
        the program reboots the host itself (the connection then drops)."""
        values = {"reboot": "yes" if reboot else "no"}
        return parse_step(*_reordered(self._call("fallback", _mode(check), **values)))


def _mode(check: bool) -> str:
    return "check" if check else "apply"


def _reordered(ran: tuple[int, str, str]) -> tuple[str, str, int]:
    code, out, err = ran
    return out, err, code


def check_host_data(name: str, data: dict) -> None:
    """A trial boot asked of a host whose data says it does not boot with
    systemd-boot: refused before connecting, naming the loader."""
    loader = data.get("boot_loader", SUPPORTED_LOADER)
    if loader not in LOADERS:
        raise ConfigError(f"{name}: boot_loader {loader!r}: expected one of {', '.join(LOADERS)}")
    if loader != SUPPORTED_LOADER:
        raise ConfigError(
            f"{name}: a trial boot needs systemd-boot (its one-shot entry); this "
            f"host's boot_loader is {loader}: not supported (reboot without a trial)"
        )
