"""Issue 27: what would compile on the serving host is decided once, on the host, by the
program both renderers run (``commands.LOCAL_BUILDS_NIX``, evaluated by the host's Nix).

It must give what ``remedy.core.readings.nix.Derivation`` (the same rule in Python, the oracle)
gives for every `derivation show` recorded from the twins and documented for Nix
2.32-2.34, and for build commands that only look like nixpkgs' writeTextFile. Run on
both Nix bases (2.26 and 2.8).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remedy.core.programs import commands
from remedy.core.readings import nix

pytestmark = [pytest.mark.twin, pytest.mark.nix_cli]

FACTS = Path(__file__).resolve().parents[1] / "facts"
STRICT = FACTS / "raw" / "nix_2_26.derivation_show_strict_shell.json"
LOOKALIKES = [
    {"passAsFile": "buildCommand"},  # text is not passed as a file
    {"buildCommand": 'make -j8 install\nmv "$textPath" "$out"\n'},
    {"buildCommand": 'target=$out\nmv "$textPath" "$target"\ngcc -O2 x.c -o $out\n'},
    {"buildCommand": 'target=$out\nmv "$textPath" "$elsewhere"\n'},
]


def shows() -> list[tuple[str, str]]:
    found = sorted((FACTS / "raw").glob("*derivation_show*.json"))
    found += sorted((FACTS / "documented").glob("*.derivation_show.json"))
    out = [(p.name, p.read_text()) for p in found]
    base = json.loads(STRICT.read_text())
    for i, change in enumerate(LOOKALIKES):
        doc = {k: {**v, "env": {**v["env"], **change}} for k, v in base.items()}
        out.append((f"lookalike {i}", json.dumps(doc, indent=2)))
    return out


def on_host(twin, text: str):
    """The program as the renderers run it, with the show's command replaced by the
    recorded answer (`cat` of it on the host)."""
    twin.exec(["tee", "/tmp/show.json"], input=text)
    program = commands.local_builds(True, ["/nix/store/x.drv"])
    program = program[: program.index(commands.LOCAL_BUILDS_NIX) + 1]
    return twin.exec([*program, "cat", "/tmp/show.json"], check=False)


def test_the_host_program_decides_as_the_oracle_on_every_recorded_show(twin):
    assert len(shows()) >= 9
    for name, text in shows():
        ran = on_host(twin, text)
        assert ran.returncode == 0, (name, ran.stderr[-2000:])
        assert sorted(ran.stdout.split()) == sorted(nix.local_build_derivations(text)), name


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"version": 4, "derivations": {"x.drv": 4}}', "'x.drv' is not a derivation"),
        ('{"x.drv": {"name": "x"}}', "'x.drv' has no env object"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_an_unreadable_show_fails_the_program_and_says_why(twin, text, says):
    ran = on_host(twin, text)
    assert ran.returncode != 0 and says in ran.stderr, ran.stderr[-2000:]
