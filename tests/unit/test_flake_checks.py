"""The flake check gate: an absent output told from a failure in what Nix printed on both
twin bases (tests/facts/raw/), and its host data."""

from __future__ import annotations

from pathlib import Path

import pytest

from remedy import host
from remedy.core.config.host_data import from_host_data
from remedy.core.programs import commands
from remedy.errors import ConfigError

RAW = Path(__file__).parent.parent / "facts" / "raw"
NIXES = ["nix_2_26", "nix_2_8"]


# The words the check expression throws for an output that does not exist, and the
# prove step's program reads.
CHECK_ABSENT = "remedy: no such flake output"


@pytest.mark.parametrize("nix", NIXES)
def test_an_absent_output_is_told_from_a_failure(nix):
    assert CHECK_ABSENT in commands.CHECK_EXPR
    assert f'*"{CHECK_ABSENT}"*)' in host.text("steps/prove.sh")
    assert CHECK_ABSENT in (RAW / f"{nix}.check_absent.txt").read_text()
    assert CHECK_ABSENT not in (RAW / f"{nix}.check_failed.txt").read_text()


def test_the_default_check_is_tt_stacks_own_and_optional():
    s = from_host_data("h", {})
    assert s.checks == (("tt-stack#checks.x86_64-linux.tenstorrent-serving",), True)
    assert from_host_data("h", {"flake_checks": []}).checks == ((), False)
    named = from_host_data("h", {"flake_checks": '["self#checks.x86_64-linux.vm"]'})
    assert named.checks == (("self#checks.x86_64-linux.vm",), False)


@pytest.mark.parametrize(
    "value, key",
    [
        (["checks.x86_64-linux.tenstorrent-serving"], "flake_checks[0]"),  # no input
        (["tt-stack#checks.x86 64"], "flake_checks[0]"),
        (["tt-stack#a.b", "tt stack#a"], "flake_checks[1]"),
        ("tt-stack#a;rm -rf /", "flake_checks[0]"),
        ({"a": 1}, "flake_checks"),
    ],
)
def test_a_bad_flake_check_is_refused_naming_the_host_and_the_item(value, key):
    with pytest.raises(ConfigError) as err:
        from_host_data("cfx-llm2", {"flake_checks": value})
    assert f"host cfx-llm2: data key {key!r}" in str(err.value)


def test_host_data_reaches_the_check_only_through_the_environment():
    argv = commands.flake_check("/tmp/s", "tt-stack#checks.x86_64-linux.a", dry=True)
    assert argv[:4] == [
        "env",
        "REMEDY_FLAKE_DIR=/tmp/s",
        "REMEDY_CHECK_INPUT=tt-stack",
        "REMEDY_CHECK_ATTR=checks.x86_64-linux.a",
    ]
    assert argv[-1] == commands.CHECK_EXPR and "--dry-run" in argv and "--impure" in argv
