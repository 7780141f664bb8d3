"""Host data the engine reads: every key, its type and default, in one place.

Inventory files pass their hosts through ``checked_hosts`` so that unknown or
misspelled keys and wrong types are rejected when the inventory loads, before
pyinfra connects. ``--data KEY=VALUE`` on pyinfra's command line is checked the
same way there. pyinfra's own keys (``ssh_*``, ``_sudo`` …) pass through.

=====================  ======================================  ==========================
key                    default                                 meaning
=====================  ======================================  ==========================
unit                   tenstorrent-serving.service             the serving unit
flake_dir              /etc/nixos                              host flake checkout
flake_host             the inventory host name                 nixosConfigurations.NAME
flake_input            tt-stack                                input to bump
required_fix_rev       none                                    must be an ancestor of the
                                                               bumped rev (40 hex)
bump_to                latest                                  latest | required_fix_rev
                                                               | a 40-character rev
trusted_signers        none                                    allowed-signers file (on
                                                               this machine) the bumped
                                                               rev must be signed by
unattended             false                                   a run of the schedule
                                                               (remedy converge
                                                               --unattended)
tool_call_parser       qwen3_xml                               the parser production needs
required_env           {QWEN36_SDPA_STREAMING: "1",            env the start script must
                        QWEN36_MERGE_BATCH_GUARD: "1"}          export (tt-stack#44)
durable                true                                    try the durable path first
server_url             http://127.0.0.1:8000                   the server, seen from host
model                  the first id /v1/models lists           model id for the probe
min_mem_available_gb   4                                       memory gate threshold
hugepages_target       {"1G": 2}                               the hugepage pool, live
                                                               and at next boot
cards                  2                                       Tenstorrent cards (1G
                                                               pages per card = pool/cards)
probe_timeout_s        20                                      one probe request
managed_options        tt-stack's option paths (see below)     the option each value of
                                                               remedy.nix sets
managed_file_conflict  keep                                    a person's commit to
                                                               remedy.nix: keep it, or
                                                               overwrite it
allow_local_build      false                                   let a bump compile on the
                                                               serving host
build_max_jobs         1                                       nix --max-jobs of a build
build_cores            2                                       nix --cores of a build
nix_timeout_s          1800                                    the longest any one nix
                                                               evaluation or build of
                                                               the owner may run
nix_memory_max_gb      MemAvailable - min_mem_available_gb     MemoryMax of the owner's
                                                               nix evaluation and build
ready_timeout_s        300                                     wait for readiness
lock_wait_s            30                                      wait for another run's
                                                               host lock (then exit 5)
restart_window         never                                   when a `window` restart
                                                               may run: always | never |
                                                               "Mon..Fri 02:00-04:00" |
                                                               "02:00-04:00" (host time)
restart_urgency        see remedy/core/config/restarts.py             {setting: now|window|
                                                               reboot} overrides
restart                none                                    this run only (--restart):
                                                               now | window | never
drain_timeout_s        300                                     wait for an idle server
                                                               before a restart
reboot_timeout_s       900                                     remedy reboot: how long a
                                                               host may take to answer
                                                               again over SSH, booted
                                                               anew (30 to 86400)
ignore_volatile        none                                    unmanaged volatile state a
                                                               person accepted: path
                                                               globs, flags, variables,
                                                               kernel parameter names
flake_checks           tt-stack#checks.x86_64-linux.           flake outputs built before
                       tenstorrent-serving, if it exists       a switch (INPUT#attr or
                                                               self#attr); [] for none
audit_log              the user's state dir                    audit log path
remedy_environment     none                                    production | staging | twin
max_restarting         1                                       the fleet's rollout: at most
                                                               this many serving hosts
                                                               restarting at once
canary                 1                                       the rollout's first hosts,
                                                               alone: a count, or a list
                                                               of host names
max_failures           0                                       the rollout stops once more
                                                               hosts than this failed
rotation_out           none                                    argv run here before the
                                                               drain ({host},
                                                               {server_url}); no shell
rotation_in            none                                    argv run here after the
                                                               verify (the same)
host_deadline_s        the sum of the step bounds (see below)  the longest one host's
                                                               part of a run may take,
                                                               its waits for its turn not
                                                               counted; then it is given up
boot_loader            systemd-boot                            systemd-boot | grub |
                                                               other: a trial boot needs
                                                               systemd-boot (refused
                                                               before connecting)
esp_path               /boot                                   where systemd-boot's
                                                               entries and loader.conf
                                                               are (efiSysMountPoint)
=====================  ======================================  ==========================

The rollout keys (``remedy converge`` over a fleet, ``remedy.core.run.rollout``) are the
fleet's: every host of one run must give max_restarting, canary and max_failures the
same value (set them once, for the group). rotation_out and rotation_in are each
host's own, e.g. ``["/usr/local/bin/lb", "disable", "{host}"]``.

host_deadline_s: a host past it (a frozen host, a step that never returns) is given
up and named, its connection closed, and the run reports the others; in a fleet
(``remedy converge``) and in a run of pyinfra's own CLI on its deploys alike, counted
from when the host's part begins. Its default is
what the steps may take at most: lock_wait_s, two nix_timeout_s (the proof, the
switch), two drain_timeout_s and two ready_timeout_s (the restart and the fallback's),
two rotation hooks' bounds and ten minutes for the rest.

managed_options maps each value remedy's managed file carries to the NixOS option
it sets (a partial mapping keeps the other defaults)::

    {"deviceResident": "services.tenstorrent-serving.deviceResident",
     "enablePrefixCaching": "services.tenstorrent-serving.enablePrefixCaching",
     "hugepagesPerCard": "hardware.tenstorrent.hugepagesPerCard"}
"""

from __future__ import annotations

import difflib
import json
import math
import re
import sys
from dataclasses import dataclass, field, fields
from typing import Any

from pyinfra.api.exceptions import InventoryError

from remedy.core.programs.builder import Builder, tag_of
from remedy.errors import ConfigError

PARSERS = ("qwen3_xml", "qwen3_coder", "hermes")  # the allowlist
ENVIRONMENTS = ("production", "staging", "twin")
BOOT_LOADERS = ("systemd-boot", "grub", "other")  # remedy.core.run.trial
UNIT_RE = re.compile(r"^[A-Za-z0-9@_.:-]+\.service$")
ENV_KEY_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9_./:,=+-]*$")
PATH_RE = re.compile(r"^/[A-Za-z0-9_./+-]*$")
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
REV_RE = re.compile(r"^[0-9a-f]{40}$")
URL_RE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:\d+)?(/[A-Za-z0-9._~/-]*)?$")
PAGE_SIZE_RE = re.compile(r"^(2M|1G)$")
# A NixOS option path: Nix identifiers joined by dots (no quoted names).
OPTION_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_'-]*(\.[A-Za-z_][A-Za-z0-9_'-]*)*$")
# What tt-stack's own NixOS check of the durable settings is called (seed).
DEFAULT_CHECK = "checks.x86_64-linux.tenstorrent-serving"
# A flake output of flake_checks: an input of the host flake (or self), then an attr path.
FLAKE_CHECK_RE = re.compile(
    r"^[A-Za-z0-9_-]+#[A-Za-z_][A-Za-z0-9_'-]*(\.[A-Za-z_][A-Za-z0-9_'-]*)*$"
)
# A pattern of ignore_volatile: a path glob, a flag, a variable or a parameter name.
IGNORE_RE = re.compile(r"^[A-Za-z0-9_./*?\[\]!@:+=-]+$")
NIX_KEYWORDS = {"assert", "else", "if", "in", "inherit", "let", "or", "rec", "then", "with"}
# The values remedy's managed file carries, and the options tt-stack declares for them
# (as the twin's fixture does; the README says how to check them against tt-stack).
MANAGED_OPTIONS = {
    "deviceResident": "services.tenstorrent-serving.deviceResident",
    "enablePrefixCaching": "services.tenstorrent-serving.enablePrefixCaching",
    "hugepagesPerCard": "hardware.tenstorrent.hugepagesPerCard",
}


@dataclass(frozen=True)
class HostData:
    unit: str = "tenstorrent-serving.service"
    flake_dir: str = "/etc/nixos"
    flake_host: str = ""  # filled with the inventory name
    flake_input: str = "tt-stack"
    required_fix_rev: str | None = None
    # What a bump takes: "latest" (the branch's head), "required_fix_rev" (the smallest
    # bump that carries the fix), or a full rev of the same input.
    bump_to: str = "latest"
    # git's gpg.ssh.allowedSignersFile format, on the host that runs remedy: the bumped rev
    # must carry a good signature by one of its keys before anything is built.
    trusted_signers: str | None = None
    # Started by the schedule's service: never bump to an unverified "latest".
    unattended: bool = False
    tool_call_parser: str = "qwen3_xml"
    required_env: dict[str, str] = field(
        default_factory=lambda: {"QWEN36_SDPA_STREAMING": "1", "QWEN36_MERGE_BATCH_GUARD": "1"}
    )
    durable: bool = True
    server_url: str = "http://127.0.0.1:8000"
    model: str | None = None  # None: the first id /v1/models lists
    min_mem_available_gb: float = 4.0
    # tt-stack's verified default: one 1 GiB page per card (only one channel is used)
    hugepages_target: dict[str, int] = field(default_factory=lambda: {"1G": 2})
    cards: int = 2
    probe_timeout_s: int = 20
    ready_timeout_s: int = 300
    lock_wait_s: float = 30.0
    allow_local_build: bool = False
    # A person committed remedy's managed file with other values: "keep" their commit
    # (report the conflict; those settings are not made durable) or "overwrite" it.
    managed_file_conflict: str = "keep"
    # The NixOS option each value of the managed file sets (MANAGED_OPTIONS' keys).
    managed_options: dict[str, str] = field(default_factory=lambda: dict(MANAGED_OPTIONS))
    build_max_jobs: int = 1
    build_cores: int = 2
    # The memory bound of the owner's nix evaluation and build client (None: what the
    # host can spare above the memory gate's threshold at the time).
    nix_memory_max_gb: float | None = None
    # The longest one evaluation or build of the owner's nix (a flake check that hangs
    # held the host lock forever): stopped then, and the step gives up, naming the bound.
    nix_timeout_s: int = 1800
    # When a `window` restart may run (remedy.core.config.restarts): always, never, or a window
    # of the serving host's local time ("Mon..Fri 02:00-04:00", "02:00-04:00").
    restart_window: str = "never"
    # What a setting's live drift justifies, over restarts.DEFAULT_URGENCY.
    restart_urgency: dict[str, str] = field(default_factory=dict)
    # This run only (remedy converge --restart, pyinfra --data restart=): now | window | never
    restart: str | None = None
    # How long to wait for vLLM's /metrics to show no request in flight before a restart.
    drain_timeout_s: int = 300
    # remedy reboot: how long the host may take to answer over a new SSH session with
    # a new boot id; past it, it is named as not back and no further host reboots.
    reboot_timeout_s: int = 900
    # Unmanaged volatile state a person accepted (remedy.core.config.volatile): fnmatch globs of
    # /run/systemd paths, vLLM flags, environment variables or kernel parameter names.
    ignore_volatile: tuple[str, ...] = ()
    # Flake outputs built for the bumped lock before a switch, each INPUT#attr.path (an
    # input of the host flake) or self#attr.path (the host flake). None: the default check.
    flake_checks: tuple[str, ...] | None = None
    audit_log: str | None = None
    remedy_environment: str | None = None
    # The fleet's rollout (remedy converge, remedy.core.run.rollout): at most this many serving
    # hosts between "about to restart" and "verified after the restart", fleet-wide.
    max_restarting: int = 1
    # The first host(s) to change, alone: how many (in inventory order), or their names.
    canary: int | tuple[str, ...] = 1
    # Once more hosts than this have failed, no further host starts its durable work.
    max_failures: int = 0
    # Run on the machine that runs remedy, never through a shell, before the drain and
    # after the verify: {host} and {server_url} are replaced.
    rotation_out: tuple[str, ...] | None = None
    rotation_in: tuple[str, ...] | None = None
    # The longest this host's part of a fleet run may take (its waits for its turn not
    # counted): then it is given up (remedy.fleet). None: deadline_s, from the bounds.
    host_deadline_s: float | None = None
    # Where the new system is evaluated and built (issue 29): "serving" (this host), or
    # the name of a builder host of the inventory (remedy_role builder), which root of
    # this host reaches over SSH with builder_key; the closure is copied here.
    build_host: str = "serving"
    builder_key: str = "/root/.ssh/remedy-builder"
    # The copy from the builder checks signatures: the builder signs what it builds (its
    # nix.conf secret-key-files) and this host trusts the key (trusted-public-keys), and
    # the copied closure is verified against the trusted keys (nix store verify -r).
    # True: the copy passes --no-check-sigs and root takes whatever the builder's user
    # serves (only the contents' hashes are checked); remedy status lists it as a risk.
    builder_unsigned_copy: bool = False
    # A builder's own data: its role, the unprivileged user the serving hosts' root
    # logs in as, and the address they reach it at (default: its ssh_hostname).
    remedy_role: str = "serving"
    builder_user: str = "remedy-build"
    builder_address: str | None = None
    # The trial boot (remedy.core.run.trial): the host's boot loader, as its data says
    # (systemd-boot: its one-shot entry makes the trial; grub, other: no trial boot),
    # and its ESP (NixOS's boot.loader.efi.efiSysMountPoint).
    boot_loader: str = "systemd-boot"
    esp_path: str = "/boot"

    def snapshot_kwargs(self) -> dict:
        """Arguments of facts.serving.HostSnapshot for this host."""
        return {
            "unit": self.unit,
            "flake_dir": self.flake_dir,
            "flake_input": self.flake_input,
            "server_url": self.server_url,
            "model": self.model,
            "timeout_s": self.probe_timeout_s,
            "managed_file": self.managed_file,
        }

    @property
    def deadline_s(self) -> float:
        """host_deadline_s, or what this host's steps may take at most (their bounds)."""
        if self.host_deadline_s is not None:
            return self.host_deadline_s
        return (
            self.lock_wait_s
            + 2 * self.nix_timeout_s
            + 2 * self.drain_timeout_s
            + 2 * self.ready_timeout_s
            + 2 * ROTATION_BOUND_S
            + DEADLINE_SLACK_S
        )

    @property
    def hugepages_per_card(self) -> int | None:
        """tenstorrent-host's hugepagesPerCard for the 1G target (None: no 1G target)."""
        pool = self.hugepages_target.get("1G")
        return None if pool is None else pool // self.cards

    @property
    def pinned_rev(self) -> str | None:
        """The rev a bump must lock (bump_to), or None for the branch's latest."""
        if self.bump_to == "latest":
            return None
        return self.required_fix_rev if self.bump_to == "required_fix_rev" else self.bump_to

    @property
    def managed_file(self) -> str:
        """remedy's Nix file, relative to flake_dir, next to the host's configuration."""
        return f"hosts/{self.flake_host}/remedy.nix"

    def urgency(self, key: str) -> str:
        """What KEY's live drift justifies: host data's restart_urgency, else the default."""
        from remedy.core.config.restarts import DEFAULT_URGENCY, NOW

        return self.restart_urgency.get(key) or DEFAULT_URGENCY.get(key, NOW)

    @property
    def window(self):
        from remedy.core.config.restarts import parse_window

        return parse_window(self.restart_window)

    @property
    def checks(self) -> tuple[tuple[str, ...], bool]:
        """(the flake checks to build, whether they are the default one: built only when
        the output exists, and said as "no check" otherwise)."""
        if self.flake_checks is None:
            return (f"{self.flake_input}#{DEFAULT_CHECK}",), True
        return self.flake_checks, False

    @property
    def override_script(self) -> str:
        return "/run/tt-serving-override/start"

    @property
    def override_dropin(self) -> str:
        return f"/run/systemd/system/{self.unit}.d/override.conf"


KEYS = {f.name for f in fields(HostData)}
ROTATION_BOUND_S = 300  # a rotation hook's bound (remedy.rollout.ROTATION_TIMEOUT_S)
DEADLINE_SLACK_S = 600  # host_deadline_s's default: the steps without a bound of their own


def _passthrough(key: str) -> bool:
    """pyinfra's own data keys and private keys are not ours to check."""
    return key.startswith(("ssh_", "_", "winrm_", "docker_", "chroot_", "local_"))


CLI_DATA = "pyinfra --data"  # the "host" of values given on the command line


def _fail(host: str, key: str, problem: str) -> ConfigError:
    where = host if host == CLI_DATA else f"host {host}"
    return ConfigError(f"{where}: data key {key!r} {problem}")


def _bool(host, key, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
        return value.lower() in ("true", "yes", "1")
    raise _fail(host, key, f"must be true or false, not {value!r}")


def _number(host, key, value, kind):
    if isinstance(value, bool):
        raise _fail(host, key, f"must be a number, not {value!r}")
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise _fail(host, key, f"must be a number, not {value!r}") from None
    if not math.isfinite(number):
        raise _fail(host, key, f"must be a finite number, not {value!r}")
    if number < 0:
        raise _fail(host, key, f"must not be negative (got {value!r})")
    return number


def _string(host, key, value, pattern, what):
    if not isinstance(value, str) or not pattern.match(value):
        raise _fail(host, key, f"must be {what}, not {value!r}")
    return value


def _at_least_one(host, key, value):
    number = _number(host, key, value, int)
    if number < 1:
        raise _fail(host, key, f"must be at least 1 (got {value!r})")
    return number


def _positive(host, key, value):
    number = _number(host, key, value, float)
    if number <= 0:
        raise _fail(host, key, f"must be more than 0 (got {value!r})")
    return number


REBOOT_TIMEOUT_RANGE = (30, 86400)  # under half a minute no host boots; a day is a lost host


def _reboot_timeout(host, key, value):
    if isinstance(value, float) and not value.is_integer():
        raise _fail(host, key, f"must be a whole number of seconds, not {value!r}")
    number = _number(host, key, value, float)
    low, high = REBOOT_TIMEOUT_RANGE
    if not low <= number <= high:
        raise _fail(host, key, f"must be between {low} and {high} seconds (got {value!r})")
    if not number.is_integer():
        raise _fail(host, key, f"must be a whole number of seconds, not {value!r}")
    return int(number)


def _optional(check):
    return lambda host, key, value: None if value in (None, "") else check(host, key, value)


def _pattern(pattern, what):
    return lambda host, key, value: _string(host, key, value, pattern, what)


def _choice(allowed):
    def check(host, key, value):
        if value not in allowed:
            raise _fail(host, key, f"must be one of {', '.join(allowed)} (got {value!r})")
        return value

    return check


def _env_map(host, key, value):
    if not isinstance(value, dict):
        raise _fail(host, key, 'must be a mapping like {"QWEN36_SDPA_STREAMING": "1"}')
    for k, v in value.items():
        _string(host, f"{key}.{k}", k, ENV_KEY_RE, "an environment variable name")
        _string(host, f"{key}.{k}", str(v), ENV_VALUE_RE, "a plain value (no spaces/quotes)")
    return {k: str(v) for k, v in value.items()}


def _pool_map(host, key, value):
    if not isinstance(value, dict):
        raise _fail(host, key, 'must be a mapping like {"1G": 2, "2M": 0}')
    out = {}
    for size, count in value.items():
        _string(host, f"{key}.{size}", size, PAGE_SIZE_RE, "a page size: 2M or 1G")
        out[size] = _number(host, f"{key}.{size}", count, int)
    return out


def _mapping(host, key, value, example: str) -> dict:
    """VALUE as a mapping: as given in an inventory, or JSON from --data."""
    if isinstance(value, str):  # --data on the command line
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, dict):
        raise _fail(host, key, f"must be a mapping like {example}")
    return value


def _option_map(host, key, value):
    value = _mapping(
        host, key, value, '{"hugepagesPerCard": "hardware.tenstorrent.hugepagesPerCard"}'
    )
    out = dict(MANAGED_OPTIONS)
    for name, path in value.items():
        if name not in MANAGED_OPTIONS:
            raise _fail(
                host,
                f"{key}.{name}",
                f"is not a value remedy's managed file carries: use {', '.join(MANAGED_OPTIONS)}",
            )
        _string(host, f"{key}.{name}", path, OPTION_PATH_RE, "a NixOS option path like a.b.c")
        if NIX_KEYWORDS & set(path.split(".")):
            raise _fail(host, f"{key}.{name}", f"has a Nix keyword as a name ({path!r})")
        out[name] = path
    return out


def _string_list(pattern, what, example):
    def check(host, key, value):
        if isinstance(value, str):  # --data on the command line: JSON, or one item
            try:
                value = json.loads(value)
            except ValueError:
                value = [value]
        if not isinstance(value, (list, tuple)):
            raise _fail(host, key, f"must be a list like {example}")
        for i, item in enumerate(value):
            _string(host, f"{key}[{i}]", item, pattern, what)
        return tuple(value)

    return check


def _window(host, key, value):
    from remedy.core.config.restarts import WindowError, parse_window

    if not isinstance(value, str):
        raise _fail(host, key, f"must be a string, not {value!r}")
    try:
        parse_window(value)
    except WindowError as exc:
        raise _fail(host, key, f"{exc} (got {value!r})") from None
    return value.strip()


def _urgency_map(host, key, value):
    from remedy.core.config.restarts import DEFAULT_URGENCY, URGENCIES

    value = _mapping(host, key, value, '{"QWEN36_MERGE_BATCH_GUARD": "now"}')
    for name, urgency in value.items():
        if name not in DEFAULT_URGENCY and name not in _data_keys():
            valid = ", ".join((*DEFAULT_URGENCY, *_data_keys()))
            raise _fail(host, f"{key}.{name}", f"is not a managed setting: use {valid}")
        if urgency not in URGENCIES:
            raise _fail(
                host, f"{key}.{name}", f"must be one of {', '.join(URGENCIES)} (got {urgency!r})"
            )
    return dict(value)


def _data_keys() -> tuple[str, ...]:
    """The keys of the data settings that are managed (settings/*.yaml; a lazy import:
    desired imports this module)."""
    from remedy.core.config import desired

    return tuple(d.key for d in desired.DATA)


HOST_NAME_RE = re.compile(r"^[A-Za-z0-9@_.:-]+$")
ROTATION_FIELDS = ("host", "server_url")  # what a rotation command may name


def _canary(host, key, value):
    """How many hosts go first (a number), or which (a list of inventory names)."""
    if isinstance(value, str):  # --data on the command line: a number, JSON, or one name
        try:
            value = json.loads(value)
        except ValueError:
            value = [value]
    if isinstance(value, (list, tuple)):
        if not value:
            raise _fail(host, key, "must name at least one host, or be a number (0: none)")
        for i, name in enumerate(value):
            _string(host, f"{key}[{i}]", name, HOST_NAME_RE, "an inventory host name")
        return tuple(value)
    return _number(host, key, value, int)


def _argv(host, key, value):
    """A command as an argv list, with {host} and {server_url} as the only placeholders."""
    import string

    example = '["/usr/local/bin/lb", "disable", "{host}"]'
    if isinstance(value, str):  # --data on the command line: JSON only
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, (list, tuple)) or not value:
        raise _fail(
            host, key, f"must be a list of arguments like {example} (run without a shell), "
            f"not {value!r}"
        )  # fmt: skip
    for i, arg in enumerate(value):
        if not isinstance(arg, str) or "\0" in arg or "\n" in arg:
            raise _fail(host, f"{key}[{i}]", f"must be a one-line string, not {arg!r}")
        try:
            names = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as exc:
            raise _fail(host, f"{key}[{i}]", f"has a stray brace ({exc}): {arg!r}") from None
        for name in names:
            if name not in ROTATION_FIELDS:
                raise _fail(
                    host, f"{key}[{i}]", f"names {{{name}}}: only {{host}} and "
                    "{server_url} are replaced"
                )  # fmt: skip
    return tuple(value)


ROLES = ("serving", "builder")
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]*$")
ADDRESS_RE = re.compile(r"^[A-Za-z0-9_.:-]+$")


def _build_host(host, key, value):
    if value == "local":
        raise _fail(
            host,
            key,
            "is local, which remedy cannot do yet: give the machine that runs remedy an "
            'entry in the inventory with remedy_role = "builder" and name it here',
        )
    return _string(
        host, key, value, NAME_RE, "serving, or the name of a builder host of the inventory"
    )


# Every key's check, in one table: (host, key, value) -> the typed value or ConfigError.
CHECKS = {
    "unit": _pattern(UNIT_RE, "a unit name like tenstorrent-serving.service"),
    "flake_dir": _pattern(PATH_RE, "an absolute path of plain characters"),
    "flake_host": _pattern(NAME_RE, "a plain name (letters, digits, . _ -)"),
    "flake_input": _pattern(NAME_RE, "a plain name (letters, digits, . _ -)"),
    "required_fix_rev": _optional(_pattern(REV_RE, "a full 40-character git commit id")),
    "bump_to": lambda h, k, v: (
        v
        if v in ("latest", "required_fix_rev")
        else _string(
            h, k, v, REV_RE, "latest, required_fix_rev or a full 40-character git commit id"
        )
    ),
    "trusted_signers": _optional(_pattern(PATH_RE, "an absolute path of plain characters")),
    "unattended": _bool,
    "tool_call_parser": _choice(PARSERS),
    "required_env": _env_map,
    "durable": _bool,
    "server_url": _pattern(URL_RE, "an http(s) URL like http://127.0.0.1:8000"),
    "model": _optional(_pattern(re.compile(r"^[A-Za-z0-9_./:-]+$"), "a model id")),
    "min_mem_available_gb": lambda h, k, v: _number(h, k, v, float),
    "hugepages_target": _pool_map,
    "cards": _at_least_one,
    "probe_timeout_s": lambda h, k, v: _number(h, k, v, int),
    "ready_timeout_s": lambda h, k, v: _number(h, k, v, int),
    "lock_wait_s": lambda h, k, v: _number(h, k, v, float),
    "allow_local_build": _bool,
    "managed_file_conflict": _choice(("keep", "overwrite")),
    "managed_options": _option_map,
    "build_max_jobs": _at_least_one,
    "build_cores": _at_least_one,
    "nix_memory_max_gb": _optional(lambda h, k, v: _positive(h, k, v)),
    "nix_timeout_s": _at_least_one,
    "restart_window": _window,
    "restart_urgency": _urgency_map,
    "restart": _optional(_choice(("now", "window", "never"))),
    "drain_timeout_s": lambda h, k, v: _number(h, k, v, int),
    "reboot_timeout_s": _reboot_timeout,
    "ignore_volatile": _string_list(
        IGNORE_RE,
        "a path glob, a flag, a variable or a kernel parameter name",
        '["/run/systemd/system/ssh.service.d/*", "VLLM_LOGGING_LEVEL"]',
    ),
    "flake_checks": _string_list(
        FLAKE_CHECK_RE,
        "a flake output like tt-stack#checks.x86_64-linux.tenstorrent-serving "
        "(an input of the host flake, or self, then #attr.path)",
        f'["tt-stack#{DEFAULT_CHECK}"]',
    ),
    "audit_log": _pattern(PATH_RE, "an absolute path of plain characters"),
    "remedy_environment": _choice(ENVIRONMENTS),
    "max_restarting": _at_least_one,
    "canary": _canary,
    "max_failures": lambda h, k, v: _number(h, k, v, int),
    "rotation_out": _optional(_argv),
    "rotation_in": _optional(_argv),
    "host_deadline_s": _optional(_positive),
    "build_host": _build_host,
    "builder_key": _pattern(PATH_RE, "an absolute path of plain characters (on the host)"),
    "builder_unsigned_copy": _bool,
    "remedy_role": _choice(ROLES),
    "builder_user": _pattern(USER_RE, "a plain user name like remedy-build"),
    "builder_address": _optional(_pattern(ADDRESS_RE, "a host name or IP address")),
    "boot_loader": _choice(BOOT_LOADERS),
    "esp_path": _pattern(PATH_RE, "an absolute path of plain characters"),
}
assert set(CHECKS) == KEYS, set(CHECKS) ^ KEYS


def _coerce(host: str, key: str, value: Any) -> Any:
    return CHECKS[key](host, key, value)


def _check_together(host: str, s: HostData) -> None:
    """Checks across keys: the 1G pool must split evenly over the cards; bump_to
    required_fix_rev needs required_fix_rev."""
    if s.bump_to == "required_fix_rev" and not s.required_fix_rev:
        raise _fail(host, "bump_to", "is required_fix_rev, but required_fix_rev is not set")
    pool = s.hugepages_target.get("1G")
    if pool is not None and pool % s.cards:
        raise _fail(
            host,
            "hugepages_target.1G",
            f"must be a multiple of cards ({s.cards}): tenstorrent-host sets "
            f"hugepagesPerCard (got {pool})",
        )


# Keys that meant something once: what replaced them.
RETIRED = {
    "copy_signed": "is retired: the copy from a builder checks signatures unless "
    "builder_unsigned_copy = true (a risk remedy status lists)",
}


def check_keys(host: str, data: dict) -> None:
    for key in data:
        if key in KEYS or _passthrough(key):
            continue
        if key in RETIRED:
            raise _fail(host, key, RETIRED[key])
        close = difflib.get_close_matches(key, sorted(KEYS), n=1, cutoff=0.6)
        hint = (
            f"; did you mean {close[0]!r}?"
            if close
            else f"; known keys: {', '.join(sorted(KEYS))} (see remedy/core/config/host_data.py)"
        )
        raise _fail(host, key, "is unknown" + hint)


def from_host_data(host: str, data: dict) -> HostData:
    """Typed host data for HOST from its data (a dict, or pyinfra's host.data)."""
    items = dict(data.dict() if hasattr(data, "dict") else data)
    check_keys(host, items)
    values = {k: _coerce(host, k, v) for k, v in items.items() if k in KEYS and v is not None}
    values.setdefault("flake_host", host.lstrip("@"))
    settings = HostData(**values)
    _check_together(host, settings)
    return settings


def cli_data(argv: list[str]) -> dict[str, str]:
    """``--data KEY=VALUE`` pairs from pyinfra's command line."""
    out = {}
    for i, arg in enumerate(argv):
        if arg == "--data" and i + 1 < len(argv):
            key, _, value = argv[i + 1].partition("=")
            out[key] = value
        elif arg.startswith("--data="):
            key, _, value = arg[len("--data=") :].partition("=")
            out[key] = value
    return out


def checked_hosts(hosts: list, argv: list[str] | None = None) -> list:
    """Validate an inventory's hosts (and pyinfra's --data) before anything connects."""
    extra = cli_data(sys.argv if argv is None else argv)
    try:  # --data applies to every host: its errors are its own, not the first host's
        check_keys(CLI_DATA, extra)
        for key, value in extra.items():
            if key in KEYS:
                _coerce(CLI_DATA, key, value)
    except ConfigError as exc:
        raise InventoryError(str(exc)) from None
    merged = {}
    for entry in hosts:
        name, data = (entry, {}) if isinstance(entry, str) else entry
        try:
            merged[name] = from_host_data(name, {**data, **extra})
        except ConfigError as exc:
            # pyinfra prints its own InventoryError as one line, not a traceback.
            raise InventoryError(str(exc)) from None
    try:
        check_builders(merged)
    except ConfigError as exc:
        raise InventoryError(str(exc)) from None
    return hosts


def check_builders(hosts: dict[str, HostData]) -> None:
    """Each serving host's build_host names another host of the inventory, a builder
    (remedy_role builder). A builder's own build_host is not read."""
    for name, s in hosts.items():
        b = s.build_host
        if s.remedy_role == "builder" or b == "serving":
            continue
        if b == name:
            raise _fail(name, "build_host", 'names the host itself; say "serving" for that')
        if b not in hosts:
            raise _fail(
                name,
                "build_host",
                f"names {b!r}, which is not a host of this inventory; add it with "
                'remedy_role = "builder", or set build_host = "serving"',
            )
        if hosts[b].remedy_role != "builder":
            raise _fail(
                name,
                "build_host",
                f"names {b!r}, which is a serving host; give it remedy_role = "
                '"builder" (a builder serves nothing and remedy never converges it)',
            )


def builder_of(
    s: HostData, builder_name: str, builder_data: dict, host: str = "", where: str = ""
) -> Builder:
    """The builder that S's host builds on (its build_host), from that host's data in
    the inventory: its user, its address (builder_address, else its ssh_hostname, else
    its name), its SSH port and its own bounds; the key and the copy's trust are S's.
    HOST and WHERE: the serving host's inventory name and SSH address (its clones' tag)."""
    b = from_host_data(builder_name, {**builder_data, "remedy_role": "builder"})
    address = b.builder_address or builder_data.get("ssh_hostname") or builder_name
    key = "builder_address" if b.builder_address else "ssh_hostname"
    _string(builder_name, key, str(address), ADDRESS_RE, "a host name or IP address")
    port = _number(builder_name, "ssh_port", builder_data.get("ssh_port") or 22, int)
    if not 0 < port < 65536:
        raise _fail(builder_name, "ssh_port", f"must be a TCP port, not {port!r}")
    return Builder(
        builder_name,
        b.builder_user,
        str(address),
        port,
        s.builder_key,
        not s.builder_unsigned_copy,
        b.build_max_jobs,
        b.build_cores,
        b.nix_timeout_s,
        tag_of(host or s.flake_host, where),
    )
