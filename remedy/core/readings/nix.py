"""Nix: version and update command, flake.lock inputs, system generations."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from pyinfra.api.exceptions import FactProcessError

NIX, LIX, DETERMINATE = "nix", "lix", "determinate"


@dataclass
class NixInfo:
    version: str
    update_input_argv: list[str]  # without the input name; see update_input()
    implementation: str = NIX  # nix | lix | determinate

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])

    @property
    def label(self) -> str:
        names = {NIX: "Nix", LIX: "Lix", DETERMINATE: "Determinate Nix, like Nix"}
        return f"{names.get(self.implementation, self.implementation)} {self.version}"


# A version number, with an optional pre-release or build suffix: "2.8.0",
# "2.12.0pre20220902_0c7f213" (nixVersions.git), "2.93.0-dev-pre20250412-fb8d73c" (Lix),
# "2.26.3+1" (a distribution's). The suffix is dropped: it says which build, not which CLI.
_VERSION = re.compile(r"(?<![\w.])(\d+\.\d+(?:\.\d+)?)(?:(?:pre|rc|-|\+)[\w.+-]*)?(?![\w.])")


def parse_nix_version(lines: list[str]) -> NixInfo | None:
    """``nix (Nix) 2.8.0``. None when Nix is not installed.

    ``nix flake lock --update-input`` works up to 2.18, was removed in
    2.19.0-2.19.1 and is a deprecated alias later; ``nix flake update NAME``
    works from 2.19 on (before, its positional argument is the flake). Lix forked
    from Nix 2.18 and keeps ``--update-input`` (its own numbers, 2.90 and up, say
    nothing about CppNix's CLI), so Lix gets that form.

    The version has a line of its own. Nix warns first about a setting of nix.conf it
    does not know (``warning: unknown setting 'lazy-trees'``: libutil/config.cc,
    ``warnUnknownSettings``, at start-up), so other lines are passed over. An answer
    with no version line is a FactProcessError that quotes what was read.
    """
    text = " ".join(ln.strip() for ln in lines if ln.strip())
    if not text:
        return None
    # "nix (Nix) 2.8.0", "nix (Lix, like Nix) 2.91.1", "nix (Determinate Nix 3.6.2) 2.29.0":
    # the Nix-compatible version is the last one on the line.
    line, found = next(
        (
            (ln.strip(), _VERSION.findall(ln))
            for ln in lines
            if re.match(r"nix \(", ln.strip()) and _VERSION.search(ln)
        ),
        ("", []),
    )
    if not found:
        if "not found" in text:
            return None
        raise FactProcessError(f"nix --version printed no version line: {text[:200]!r}")
    version = found[-1]
    flavour = line.split(")", 1)[0]
    implementation = LIX if "Lix" in flavour else DETERMINATE if "Determinate" in flavour else NIX
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    if major_minor >= (2, 19) and implementation != LIX:
        argv = ["nix", "flake", "update"]
    else:
        argv = ["nix", "flake", "lock", "--update-input"]
    return NixInfo(version, argv, implementation)


@dataclass
class FlakeInput:
    name: str
    node: str
    rev: str | None
    nar_hash: str | None
    last_modified: int | None
    url: str | None
    ref: str | None = None  # the locked ref (refs/heads/master) of a git input


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
        locked.get("ref") or original.get("ref"),
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


_FORGES = {
    "github": "https://github.com",
    "gitlab": "https://gitlab.com",
    "sourcehut": "https://git.sr.ht",
}


def git_remote(url: str) -> str | None:
    """The URL git fetches a flake input from (``git+https://h/r?ref=x`` -> ``https://h/r``,
    ``github:o/r`` -> ``https://github.com/o/r``), or None for a kind git cannot fetch
    (``path:``, ``tarball``). ``git+file`` gives the local path's file URL."""
    base, _, query = url.partition("?")
    if base.startswith("git+"):
        return base[4:] or None
    m = re.fullmatch(r"(github|gitlab|sourcehut):([^/]+)/([^/]+)(?:/.*)?", base)
    if m:
        kind, owner, repo = m.groups()
        return f"{_FORGES[kind]}/{owner}/{repo}"
    if base.startswith(("http://", "https://", "ssh://")) and dict(parse_qsl(query)).get("rev"):
        return base  # a locked git input written without its git+ prefix
    return None


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


# writeTextFile's build command, line by line, in the forms nixpkgs has had (@T@ is its
# target variable, ``target``): pkgs/build-support/trivial-builders/default.nix.
_TEXT_TARGET = re.compile(r"(\w+)=\$out(?:'[^']*'|[\w./+@-]*)")
_TEXT_FILE_LINES = [
    _TEXT_TARGET.pattern.replace(r"(\w+)", "@T@", 1),
    r'mkdir -p "\$\(dirname "\$@T@"\)"',
    r'if \[ -e "\$textPath" \]; then',
    r'mv "\$textPath" "\$@T@"',
    r"else",
    r'echo -n "\$text" > "\$@T@"',
    r"fi",
    r'if \[ -n "\$executable" \]; then',
    r'chmod \+x "\$@T@"',
    r'eval "\$checkPhase"',
    r'\(test -n "\$executable" && chmod \+x "\$@T@"\) \|\| true',
]


@dataclass
class Derivation:
    """One derivation of ``nix derivation show``, whatever the Nix version's shape."""

    path: str  # /nix/store/…drv
    builder: str
    env: dict[str, str]
    input_drvs: list[str]
    input_srcs: list[str]

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1].split("-", 1)[-1].removesuffix(".drv")

    @property
    def config(self) -> bool:
        """NixOS marks its config derivations (unit files, ``etc``, the toplevel) with
        ``preferLocalBuild``."""
        return self.env.get("preferLocalBuild") == "1"

    @property
    def text_file(self) -> bool:
        """nixpkgs' ``writeTextFile`` family (``writeText``, ``writeScript``,
        ``writeShellScript``, ``writeShellApplication``: pkgs/build-support/trivial-builders,
        ``writeTextFile``): a ``runCommand`` whose ``text`` is passed as a file
        (``passAsFile`` holds ``text``) and whose ``buildCommand`` only moves it into place,
        ``target=$out'/bin/NAME'`` then ``mv "$textPath" "$target"``, makes it executable
        and evals its ``checkPhase`` (a dry run or shellcheck of the script).
        ``destination`` is no attribute: it is only inside that command.
        ``writeShellApplication`` sets ``preferLocalBuild = false`` and
        ``allowSubstitutes = true``, so it looks like a package; building it takes a
        moment and no memory to speak of. A build command with any other line is not
        one of these (it may compile)."""
        if "text" not in self.env.get("passAsFile", "").split():
            return False
        lines = [
            ln.strip()
            for ln in self.env.get("buildCommand", "").splitlines()
            if ln.strip() and not ln.strip().startswith("#")
        ]
        target = next((m[1] for ln in lines if (m := _TEXT_TARGET.fullmatch(ln))), None)
        if target is None or f'mv "$textPath" "${target}"' not in lines:
            return False
        shapes = [re.compile(p.replace("@T@", re.escape(target))) for p in _TEXT_FILE_LINES]
        return all(any(p.fullmatch(ln) for p in shapes) for ln in lines)

    @property
    def compiles(self) -> bool:
        """Building it on the serving host is real work: neither a config derivation nor
        a text file."""
        return not (self.config or self.text_file)


def _store_path(key: str) -> str:
    return key if key.startswith("/nix/store/") else f"/nix/store/{key}"


def parse_derivation_show(show_json: str, nix_label: str = "Nix") -> list[Derivation]:
    """``nix derivation show`` (or ``show-derivation``) in each shape Nix has printed:

    * up to 2.31: ``{"/nix/store/…drv": {"env", "builder", "inputDrvs", "inputSrcs", …}}``;
    * 2.32 (derivation format version 3): the keys lose their ``/nix/store/`` prefix;
    * 2.33 (version 4): the inputs move into ``"inputs": {"srcs": […], "drvs": {…}}``;
    * 2.34: the map is wrapped, ``{"version": 4, "derivations": {…}}``.

    An answer in none of them names the Nix that printed it."""

    def unreadable(why: str) -> FactProcessError:
        return FactProcessError(f"cannot read `nix derivation show` of {nix_label}: {why}")

    try:
        doc = json.loads(show_json)
    except ValueError as exc:
        raise unreadable(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise unreadable("not a JSON object")
    if isinstance(doc.get("derivations"), dict):  # 2.34's wrapper
        doc = doc["derivations"]
    out = []
    for key, drv in sorted(doc.items()):
        if not isinstance(drv, dict):
            raise unreadable(f"{key!r} is {type(drv).__name__}, not a derivation")
        env = drv.get("env")
        if not isinstance(env, dict):
            raise unreadable(f"{key!r} has no env object")
        inputs = drv.get("inputs") if isinstance(drv.get("inputs"), dict) else {}
        drvs = inputs.get("drvs", drv.get("inputDrvs", {})) or {}
        srcs = inputs.get("srcs", drv.get("inputSrcs", [])) or []
        out.append(
            Derivation(
                _store_path(key),
                str(drv.get("builder", "")),
                {str(k): str(v) for k, v in env.items()},
                sorted(_store_path(d) for d in drvs),
                sorted(_store_path(s) for s in srcs),
            )
        )
    return out


def local_build_derivations(show_json: str, nix_label: str = "Nix") -> list[str]:
    """The derivations of ``nix derivation show`` that would be compiled on the host:
    those that are neither config derivations (``preferLocalBuild``) nor text files
    (see ``Derivation.text_file``). A package such as vLLM is neither.

    The run decides this on the host, with the program both renderers run
    (``commands.local_builds``); this is the same rule in Python, the oracle that
    tests/twin/test_local_builds.py holds that program to."""
    return [d.path for d in parse_derivation_show(show_json, nix_label) if d.compiles]


def derivation_show_is_new(info: NixInfo) -> bool:
    """``nix derivation show`` exists from Nix 2.15; before it is ``nix show-derivation``."""
    return info.version_tuple[:2] >= (2, 15)
