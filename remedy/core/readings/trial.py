"""What the trial boot's programs answered (``remedy.core.programs.trial``): pure."""

from __future__ import annotations

from dataclasses import dataclass

from remedy.core.readings import answer as answers

SUPPORTED_LOADER = "systemd-boot"


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
        why=get("loader_why") or (ans.text if get("trial_state") == "unsupported" else ""),
        trial=get("trial_state") or "none",
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
    """What ``arm``, ``bless``, ``fall_back`` or ``settle`` answered: the verdict (act in check
    mode, done, noop, give-up), why, and the entries it named."""

    verdict: str
    text: str
    previous: str = ""  # the default a trial falls back to
    trial: str = ""  # the entry tried (arm)
    booted: str = ""  # the entry that booted (bless, fall back)
    failed_entry: str = ""  # settle: the failed trial's entry, and its generation
    failed_system: str = ""
    failed_generation: str = ""
    booted_generation: str = ""  # settle: the generation the profile goes back to

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
        trial=str(said.get("trial_entry") or ""),
        booted=str(said.get("booted_entry") or ""),
        failed_entry=str(said.get("failed_entry") or ""),
        failed_system=str(said.get("failed_system") or ""),
        failed_generation=str(said.get("failed_generation") or ""),
        booted_generation=str(said.get("booted_generation") or ""),
    )
