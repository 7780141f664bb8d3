"""``remedy adopt``: turn an entry of the unmanaged volatile state into a managed setting.

``status`` lists what a reboot would revert that no setting covers
(``remedy.core.config.volatile``). ``adoption`` takes one such entry as status prints it,
checks that a kind of data setting can express it, and gives the setting file that
makes the live value the desired one (``remedy.core.config.data_settings``): the next
converge makes it durable. It is pure: it reads one snapshot and touches nothing.

    a = adoption(snapshot, settings, "Environment=VLLM_LOGGING_LEVEL=DEBUG",
                 issue="tt-stack#60", urgency="window")
    a.setting.file, a.text
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyinfra.api.exceptions import FactProcessError

from remedy.core.config import data_settings as data
from remedy.core.config import desired, secrets, volatile
from remedy.core.config.host_data import HostData
from remedy.core.readings import systemd
from remedy.core.readings.snapshot import HostSnapshot
from remedy.errors import ConfigError


class AdoptRefused(ConfigError):
    """What cannot be adopted, and why."""


@dataclass(frozen=True)
class Found:
    """The live state SUBJECT names: its kind, name and value, and where it was seen."""

    kind: str
    name: str
    value: str
    seen: str  # the entry of status, as it prints it


@dataclass(frozen=True)
class Adoption:
    setting: data.DataSetting
    text: str  # the setting file's text
    found: Found


ENV_ASSIGNMENT = re.compile(r"^(?:Environment=)?([A-Z_][A-Z0-9_]*)(?:=(.*))?$")
PROPERTY_ASSIGNMENT = re.compile(r"^([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:=(.*))?$")


def _serving_dropin(path: str, s: HostData) -> bool:
    return any(
        path.startswith(f"/run/systemd/{d}/{s.unit}.d/") for d in ("system", "system.control")
    )


def _assignments(snap: HostSnapshot, s: HostData) -> list[tuple[str, str, str, str]]:
    """(kind, name, value, file) of every Environment= and property a runtime drop-in of
    the serving unit sets (the last one of each name wins, as systemd applies them)."""
    out: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    for f in snap.runtime.files:
        if f.link is not None or not _serving_dropin(f.path, s):
            continue
        for key, value in systemd.UnitFile(f.path, f.path, f.text).service_settings():
            if key == "Environment":
                try:
                    pairs = systemd.parse_environment(value)
                except FactProcessError:
                    continue
                for name, v in pairs.items():
                    out[(data.ENVIRONMENT, name)] = (data.ENVIRONMENT, name, v, f.path)
            elif key not in ("ExecStart", "ExecStartPre", "ExecStartPost") and value:
                out[(data.PROPERTY, key)] = (data.PROPERTY, key, value, f.path)
    return list(out.values())


def _entries(snap: HostSnapshot, s: HostData) -> list[volatile.Unmanaged]:
    """Every entry of the unmanaged volatile state, ignored ones too (a person may adopt
    what they silenced)."""
    return volatile.unmanaged(snap, s)


def _listed(entries: list[volatile.Unmanaged]) -> str:
    return "; ".join(e.subject for e in entries) or "nothing"


def find(snap: HostSnapshot, s: HostData, subject: str) -> Found:
    """The live state SUBJECT names, as an entry of status's unmanaged volatile state
    shows it: a variable (``Environment=NAME=VALUE``, ``NAME=VALUE``, ``NAME``), a
    property of the serving unit (``LimitNOFILE=65536``), a flag (``--max-num-seqs``),
    a sysctl (``vm.max_map_count``), or a runtime drop-in that sets exactly one of
    them. AdoptRefused says why it cannot be adopted."""
    entries = _entries(snap, s)
    by_subject = {e.subject: e for e in entries}
    subject = subject.strip()
    if subject in by_subject:
        return _from_entry(snap, s, by_subject[subject], entries)
    if subject.startswith("--"):
        raise AdoptRefused(_absent(subject, "a flag the server runs with", entries))
    if re.fullmatch(r"[a-z0-9_]+(\.[A-Za-z0-9_-]+)+", subject):
        raise AdoptRefused(_absent(subject, "a sysctl that differs from the next boot", entries))
    return _assignment(snap, s, subject, entries)


def _absent(subject: str, what: str, entries) -> str:
    return (
        f"{subject} is not {what}, in the unmanaged volatile state (status lists: "
        f"{_listed(entries)}): adopt one of those, as status prints it"
    )


def _assignment(snap: HostSnapshot, s: HostData, subject: str, entries) -> Found:
    """SUBJECT as a variable or a property that a runtime drop-in of the serving unit
    sets, or a variable only the server's environment has (systemctl set-environment)."""
    m = ENV_ASSIGNMENT.match(subject)
    kind = data.ENVIRONMENT
    if m is None or re.search(r"[a-z]", m[1]):
        m, kind = PROPERTY_ASSIGNMENT.match(subject), data.PROPERTY
    if m is None:
        raise AdoptRefused(
            f"{subject!r} names nothing a setting can hold: adopt a variable "
            "(Environment=NAME=VALUE), a property (LimitNOFILE=65536), a flag (--name) or a "
            "sysctl (vm.max_map_count), as status prints it"
        )
    name, value = m[1], m[2]
    for k, n, v, path in _assignments(snap, s):
        if (k, n) == (kind, name) and path in {e.subject for e in entries}:
            return _checked(Found(k, n, v, f"{path}: {n}={v}"), value)
    if kind == data.ENVIRONMENT:
        for e in entries:
            if e.kind == volatile.PROCESS and e.subject == name:
                live = (
                    (snap.runtime.process.environ or {}).get(name) if snap.runtime.process else None
                )
                if live is not None:
                    return _checked(Found(kind, name, live, e.text()), value)
    what = f"{data.NOUN[kind]} that a runtime drop-in of {s.unit} sets"
    raise AdoptRefused(_absent(subject, what, entries))


def _list_checked(snap: HostSnapshot, found: Found) -> None:
    """A list-valued property (EnvironmentFile=) is adopted as an item remedy's file adds
    to the module's list, never forced (a lib.mkForce drops the module's own items):
    refused when its drop-in resets the list first (``NAME=``), which would replace them."""
    path = found.seen.split(": ", 1)[0]
    for f in snap.runtime.files:
        if f.path != path or f.link is not None:
            continue
        settings = systemd.UnitFile(f.path, f.path, f.text).service_settings()
        if any(k == found.name and not v.strip() for k, v in settings):
            raise AdoptRefused(
                f"{path} resets {found.name}= before {found.name}={found.value}: it "
                f"replaces the unit's list, and remedy only adds an item to the serving "
                f"module's list (forcing it would drop the module's own {found.name}): "
                f"drop the reset to adopt the item, or change the module's list itself"
            )


def _checked(found: Found, asked: str | None) -> Found:
    if asked is not None and asked != found.value:
        seen = secrets.masked(found.seen)
        if secrets.secret(found.name, found.value):  # its value is never said
            raise AdoptRefused(
                f"{found.name} is not the value given live ({seen}): adopt what runs, or "
                "change it first"
            )
        raise AdoptRefused(
            f"{found.name} is {found.value} live, not {asked} ({seen}): adopt what runs, or "
            "change it first"
        )
    return found


def _from_entry(snap: HostSnapshot, s: HostData, e: volatile.Unmanaged, entries) -> Found:
    """The setting an entry of status gives, or why no kind can hold it."""
    if e.kind == volatile.SYSCTL:
        value = (snap.readings.sysctl_now or {}).get(e.subject, "")
        return Found(data.SYSCTL, e.subject, value, e.text())
    if e.kind == volatile.KERNEL_PARAM:
        raise AdoptRefused(
            f"{e.subject} is a kernel parameter of the command line, which no kind of "
            "setting holds: set boot.kernelParams in the host's configuration"
        )
    if e.kind == volatile.PROCESS and e.subject.startswith("--"):
        flags = desired.flag_map(list(desired.live(snap, s).argv or ()))[1]
        if e.subject not in flags:
            raise AdoptRefused(f"{e.subject}: the server does not run with it ({e.text()})")
        return Found(data.FLAG, e.subject, data.text(flags[e.subject] or True), e.text())
    if e.kind == volatile.PROCESS:
        return _assignment(snap, s, e.subject, entries)
    carried = [a for a in _assignments(snap, s) if a[3] == e.subject]
    if not _serving_dropin(e.subject, s) or len(carried) != 1:
        listed = ", ".join(secrets.shown(n, v) for _k, n, v, _p in carried)
        why = (
            f"it sets {listed}: adopt one of them by name"
            if carried
            else f"only a drop-in of {s.unit} that sets one variable or property can be adopted"
        )
        raise AdoptRefused(f"{e.subject}: {why}")
    kind, name, value, path = carried[0]
    return Found(kind, name, value, f"{path}: {name}={value}")


def secret(found: Found) -> bool:
    """FOUND looks like it carries a secret (``remedy.core.config.secrets``): a value like
    one whatever its name (a URL with a password or token in it, a private key); a
    variable or flag named like one (SMTP_PASS, HF_TOKEN, --api-key); a property so
    named whose value is not a file reference (SetCredential=name:VALUE, not
    LoadCredential=name:/path or EnvironmentFile=/path)."""
    if secrets.secret_value(found.value):
        return True
    if found.kind == data.PROPERTY and secrets.secret_name(found.name):
        return not data.FILE_REFERENCE_RE.match(found.value)
    return found.kind in (data.ENVIRONMENT, data.FLAG) and secrets.secret_name(found.name)


def _secret_refused(found: Found, host: str) -> AdoptRefused:
    """Why FOUND is not adopted, and what to do: never its value."""
    why = (
        "by its name" if secrets.secret_name(found.name) else "by its value, a URL with a password"
    )
    # a variable named like a secret is refused by `remedy settings check` whatever its
    # value: no flag of adopt can make it a setting
    told = found.kind == data.ENVIRONMENT and secrets.secret_name(found.name)
    return AdoptRefused(
        f"{found.name} looks like a secret {why}: remedy copies no secret into the "
        "repository; adopt a file reference instead: keep the value in a file the unit "
        "reads (from sops-nix or agenix), name it in a drop-in (for example "
        "EnvironmentFile=/run/secrets/vllm.env) and adopt that: `remedy adopt "
        f"INVENTORY --host {host} EnvironmentFile=/run/secrets/vllm.env --issue ...`; "
        + (
            ""
            if told
            else f"or, if it is no secret, say so: `--adopt-secret {found.name}` writes its "
            "value into the repository; "
        )
        + f"else list {found.name} in ignore_volatile"
    )


def _typed(kind: str, value: str) -> str | int | bool:
    """The value as the setting file holds it: a number where the kind takes one."""
    if kind == data.FLAG and value == "on":
        return True
    if kind in (data.SYSCTL, data.PROPERTY) and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    return value


def adoption(
    snap: HostSnapshot,
    s: HostData,
    subject: str,
    issue: str,
    urgency: str,
    host: str,
    flag_option: str | None = None,
    label: str | None = None,
    adopt_secret: str | None = None,
) -> Adoption:
    """The setting file that adopts SUBJECT on HOST, unchecked against the others (the
    caller runs ``data_settings.check`` with it); AdoptRefused says why not. A value that
    looks like a secret is adopted only when ADOPT_SECRET names it (a person said that
    its value may go into the repository)."""
    found = find(snap, s, subject)
    if found.kind == data.PROPERTY and found.name in data.LIST_PROPERTIES:
        _list_checked(snap, found)
    if secret(found) and adopt_secret != found.name:
        raise _secret_refused(found, host)
    if found.kind == data.FLAG and not flag_option:
        raise AdoptRefused(
            f"{found.name}: a flag needs flag_option: the option path your serving module "
            "reads its extra arguments from (--flag-option, a list of strings)"
        )
    d = data.DataSetting(
        f"settings/{data.slug(found.name)}",
        found.kind,
        found.name,
        _typed(found.kind, found.value),
        urgency,
        issue,
        label or found.name,
        flag_option,
        data.RUNTIME if data.RUNTIME_FORM[found.kind] else data.NO_FALLBACK,
    )
    origin = f"Adopted by `remedy adopt` from {host}:\n{found.seen}"
    return Adoption(d, data.render(d, origin), found)
