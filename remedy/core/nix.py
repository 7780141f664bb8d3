"""Nix: version and update command, flake.lock inputs, system generations."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from pyinfra.api.exceptions import FactProcessError


@dataclass
class NixInfo:
    version: str
    update_input_argv: list[str]  # without the input name; see update_input()

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])


def parse_nix_version(lines: list[str]) -> NixInfo | None:
    """``nix (Nix) 2.8.0``. None when Nix is not installed.

    ``nix flake lock --update-input`` works up to 2.18, was removed in
    2.19.0-2.19.1 and is a deprecated alias later; ``nix flake update NAME``
    works from 2.19 on (before, its positional argument is the flake).
    """
    text = " ".join(lines).strip()
    if not text or "not found" in text:
        return None
    # "nix (Nix) 2.8.0", "nix (Lix, like Nix) 2.91.1", "nix (Determinate Nix 3.6.2) 2.29.0":
    # the Nix-compatible version is the last one on the line.
    found = re.findall(r"(?<![\w.])(\d+\.\d+(?:\.\d+)?)(?![\w.])", text)
    if not text.startswith("nix") or not found:
        raise FactProcessError(f"nix --version: unreadable answer {text[:120]!r}")
    version = found[-1]
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    if major_minor >= (2, 19):
        argv = ["nix", "flake", "update"]
    else:
        argv = ["nix", "flake", "lock", "--update-input"]
    return NixInfo(version, argv)


def update_input_argv(info: NixInfo, name: str) -> list[str]:
    return [*info.update_input_argv, name]


@dataclass
class FlakeInput:
    name: str
    node: str
    rev: str | None
    nar_hash: str | None
    last_modified: int | None
    url: str | None


def parse_flake_lock(text: str, name: str, path: str = "flake.lock") -> FlakeInput:
    """``nodes[root].inputs[NAME]`` → node key (or a ``follows`` path) → ``locked``."""
    try:
        lock = json.loads(text)
    except ValueError as exc:
        raise FactProcessError(
            f"{path}: not valid JSON ({exc}); cannot read input {name!r}"
        ) from exc
    if not isinstance(lock, dict) or "nodes" not in lock:
        raise FactProcessError(f"{path}: no 'nodes'; not a flake.lock (input {name!r})")
    nodes = lock["nodes"]
    root = nodes.get(lock.get("root", "root"), {})
    ref = root.get("inputs", {}).get(name)
    if ref is None:
        known = ", ".join(sorted(root.get("inputs", {}))) or "none"
        raise FactProcessError(f"{path}: the flake has no input {name!r} (inputs: {known})")
    key = _resolve(nodes, lock.get("root", "root"), ref, path, name)
    node = nodes.get(key) or {}
    locked = node.get("locked") or {}
    original = node.get("original") or {}
    return FlakeInput(
        name,
        key,
        locked.get("rev"),
        locked.get("narHash"),
        locked.get("lastModified"),
        _url(locked) or _url(original),
    )


def _resolve(nodes: dict, root: str, ref, path: str, name: str, depth: int = 0) -> str:
    """A list is a ``follows`` path from the root: walk it input by input."""
    if isinstance(ref, str):
        return ref
    if depth > 16 or not isinstance(ref, list):
        raise FactProcessError(f"{path}: input {name!r} has an unreadable reference {ref!r}")
    key = root
    for hop in ref:
        inputs = nodes.get(key, {}).get("inputs", {})
        if hop not in inputs:
            raise FactProcessError(
                f"{path}: input {name!r} follows {'/'.join(ref)}, which does not exist"
            )
        key = _resolve(nodes, root, inputs[hop], path, name, depth + 1)
    return key


def _url(spec: dict) -> str | None:
    kind = spec.get("type")
    if not kind:
        return None
    if kind == "path" and "path" in spec:
        return "path:" + spec["path"]
    if kind in ("git", "tarball", "file") and "url" in spec:
        url = spec["url"]
        prefix = "" if url.startswith(f"{kind}+") or kind in ("tarball", "file") else f"{kind}+"
        return prefix + url if kind == "git" else url
    if kind in ("github", "gitlab", "sourcehut"):
        return f"{kind}:{spec.get('owner')}/{spec.get('repo')}"
    return spec.get("url")


@dataclass
class Generation:
    number: int
    path: str


@dataclass
class SystemGenerations:
    current_system: str | None
    booted_system: str | None
    profile: str | None  # what the next boot runs
    generations: list[Generation] = field(default_factory=list)

    @property
    def current_generation(self) -> int | None:
        for g in self.generations:
            if g.path == self.profile:
                return g.number
        return None


def parse_generations(lines: list[str]) -> SystemGenerations:
    """Lines ``current PATH``, ``booted PATH``, ``profile PATH``, ``gen N PATH``."""
    values: dict[str, str | None] = {"current": None, "booted": None, "profile": None}
    gens = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0] in values:
            values[parts[0]] = parts[1]
        elif len(parts) == 3 and parts[0] == "gen" and parts[1].isdigit():
            gens.append(Generation(int(parts[1]), parts[2]))
        elif len(parts) == 1 and parts[0] in values:
            continue  # absent link
        elif line.strip():
            raise FactProcessError(f"system generations: unexpected line {line[:120]!r}")
    return SystemGenerations(
        values["current"], values["booted"], values["profile"], sorted(gens, key=lambda g: g.number)
    )


@dataclass
class DryRun:
    """What ``nix build --dry-run`` says a build needs."""

    built: list[str] = field(default_factory=list)  # .drv paths to build locally
    fetched: list[str] = field(default_factory=list)  # store paths to substitute


def parse_dry_run(lines: list[str]) -> DryRun:
    """``these 3 derivations will be built:`` / ``this path will be fetched (…):`` headers,
    each followed by indented store paths (Nix 2.8 to 2.26 print the same shape)."""
    out, target = DryRun(), None
    for line in lines:
        if re.match(r"^(this|these)\b.*\bwill be built\b", line.strip()):
            target = out.built
        elif re.match(r"^(this|these)\b.*\bwill be fetched\b", line.strip()):
            target = out.fetched
        elif target is not None and re.match(r"^\s+/nix/store/\S+$", line):
            target.append(line.strip())
        elif line.strip():
            target = None
    return out


def local_build_derivations(show_json: str) -> list[str]:
    """The derivations of ``nix derivation show`` that would be compiled: those without
    ``preferLocalBuild`` (NixOS marks its config derivations, unit files, ``etc`` and the
    toplevel, with it; a package such as vLLM has none)."""
    try:
        doc = json.loads(show_json)
    except ValueError as exc:
        raise FactProcessError(f"nix derivation show: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise FactProcessError("nix derivation show: not a JSON object")
    heavy = []
    for path, drv in sorted(doc.items()):
        env = (drv or {}).get("env") or {}
        if env.get("preferLocalBuild") != "1":
            heavy.append(path if path.startswith("/nix/store/") else f"/nix/store/{path}")
    return heavy


def derivation_show_is_new(info: NixInfo) -> bool:
    """``nix derivation show`` exists from Nix 2.15; before it is ``nix show-derivation``."""
    return info.version_tuple[:2] >= (2, 15)
