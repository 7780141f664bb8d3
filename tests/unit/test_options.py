"""remedy's managed file as a NixOS module: its text, what it overrides, and NixOS's
evaluation errors, read from output recorded on twins (python -m tests.facts.record)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remedy.core.config import desired, options
from remedy.core.config.host_data import MANAGED_OPTIONS, from_host_data

FACTS = Path(__file__).parents[1] / "facts"
RAW = FACTS / "raw"
NIX_TAGS = ("nix_2_26", "nix_2_8")


def recorded_definitions(case: str) -> options.OptionDefinitions:
    data = json.loads((FACTS / "nix.OptionDefinitions" / f"{case}.json").read_text())
    found = options.parse(data["output"], {})
    return options.named(found, data["arg"]["managed_options"])


def test_the_managed_file_is_a_module_that_forces_each_value_at_its_option_path():
    s = from_host_data("cfx-llm2", {})
    text = desired.managed_nix(s)
    # the guard program is a let binding before the module's body (issue 46)
    assert text.splitlines()[3:6] == ["{ lib, ... }:", "let", "  guard = builtins.toFile "
                                      '"remedy-memory-guard" \'\'']  # fmt: skip
    assert text.splitlines().index("in") + 1 == text.splitlines().index("{")
    assert "  hardware.tenstorrent.hugepagesPerCard = lib.mkForce 1;" in text.splitlines()
    assert "  services.tenstorrent-serving.deviceResident = lib.mkForce false;" in text
    # a comment per value names its issue
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if " = lib.mkForce " in line:
            assert lines[i - 1].startswith("  # tt-stack#"), lines[i - 1]
    assert desired.managed_nix(from_host_data("cfx-llm2", {})) == text  # same bytes


def test_managed_options_move_the_paths_and_are_checked():
    s = from_host_data("cfx-llm2", {"managed_options": {"hugepagesPerCard": "tt.host.pages"}})
    assert "  tt.host.pages = lib.mkForce 1;" in desired.managed_nix(s).splitlines()
    assert s.managed_options["deviceResident"] == MANAGED_OPTIONS["deviceResident"]
    for bad, said in (
        ({"hugepages": "a.b"}, "managed_options.hugepages' is not a value"),
        ({"hugepagesPerCard": "a..b"}, "must be a NixOS option path"),
        ({"hugepagesPerCard": 'a."b"'}, "must be a NixOS option path"),
        ({"hugepagesPerCard": "a.let.b"}, "has a Nix keyword"),
        ("[]", "must be a mapping"),
    ):
        with pytest.raises(Exception, match=said):
            from_host_data("cfx-llm2", {"managed_options": bad})


def test_what_the_hosts_configuration_defines_is_named_as_overridden():
    s = from_host_data("cfx-llm2", {})
    defs = recorded_definitions("fresh")
    pages = defs.options["hugepagesPerCard"]
    assert pages.exists and pages.highest_prio == 100 and pages.defined_by_host
    assert options.short_file(pages.definitions[0].file) == "hosts/cfx-llm2/configuration.nix"
    # the Phase 2a options have only tt-stack's defaults: nothing of the host's to name
    assert not defs.options["deviceResident"].defined_by_host
    assert options.overrides(defs, s, desired.ALL) == [
        "configuration.nix sets hugepagesPerCard = 2; remedy.nix forces 1 (tt-stack#49)"
    ]
    # out of scope: not named
    assert options.overrides(defs, s, desired.TOOL_CALLING) == []


def test_an_option_path_the_configuration_does_not_declare_is_named_with_its_key():
    s = from_host_data(
        "cfx-llm2", {"managed_options": {"deviceResident": "services.tenstorrent.nope"}}
    )
    defs = recorded_definitions("no_such_option")
    assert not defs.options["deviceResident"].exists
    assert options.missing_options(defs, s, desired.ALL) == [
        "services.tenstorrent.nope (managed_options.deviceResident)"
    ]


@pytest.mark.parametrize("tag", NIX_TAGS)
def test_nixos_does_not_exist_message_becomes_a_blocker_with_the_key(tag):
    said = (RAW / f"{tag}.option_does_not_exist.txt").read_text()
    s = from_host_data(
        "cfx-llm2",
        {"managed_options": {"deviceResident": "services.tenstorrent-serving.devicResident"}},
    )
    why = options.evaluation_blocker(said, s)
    assert why.startswith(
        "the new configuration does not evaluate: The option "
        "`services.tenstorrent-serving.devicResident' does not exist."
    ), why
    assert "In `hosts/cfx-llm2/remedy.nix'" in why  # the store path made relative
    assert "host data managed_options.deviceResident names an option" in why
    # with the default paths the option is not remedy's: NixOS's message alone
    plain = options.evaluation_blocker(said, from_host_data("cfx-llm2", {}))
    assert "does not exist" in plain and "managed_options" not in plain


@pytest.mark.parametrize("tag", NIX_TAGS)
def test_nixos_conflicting_definitions_message_names_both_files(tag):
    said = (RAW / f"{tag}.option_conflict.txt").read_text()
    why = options.evaluation_blocker(said, from_host_data("cfx-llm2", {}))
    assert (
        "The option `hardware.tenstorrent.hugepagesPerCard' has conflicting definition values:"
    ) in why, why
    assert "In `hosts/cfx-llm2/configuration.nix': 2" in why
    assert "In `hosts/cfx-llm2/remedy.nix': 1" in why
    assert "managed_options.hugepagesPerCard" in why


def test_output_without_an_option_error_is_not_a_blocker():
    said = (RAW / "nix_2_26.dry_run_links.txt").read_text()
    assert options.evaluation_blocker(said, from_host_data("cfx-llm2", {})) is None


def test_a_failed_or_cut_evaluation_says_why():
    assert options.parse(["error: flake 'x' does not exist", "@@remedy:exit 1"], {}).error == (
        "flake 'x' does not exist"
    )
    assert "cut short" in options.parse(["{}"], {}).error
    assert "unreadable" in options.parse(["nonsense", "@@remedy:exit 0"], {}).error


def test_the_plan_that_writes_the_file_names_what_it_overrides():
    import dataclasses

    from remedy.core.run import plan
    from tests.unit.test_plan import snapshot

    s = from_host_data("cfx-llm2", {})
    snap = dataclasses.replace(
        snapshot("emergency_override"), definitions=recorded_definitions("fresh")
    )
    p = plan.plan_restore(snap, s, desired.ALL)
    assert p.managed_text is not None
    assert (
        "overrides: configuration.nix sets hugepagesPerCard = 2; remedy.nix forces 1 (tt-stack#49)"
    ) in p.reasons
    assert "overrides: configuration.nix" in p.summary("cfx-llm2")
    # nothing read: nothing named, and the plan is the same otherwise
    bare = plan.plan_restore(snapshot("emergency_override"), s, desired.ALL)
    assert [r for r in p.reasons if not r.startswith("overrides: ")] == bare.reasons


def test_each_nixs_answer_is_read_and_an_answer_without_a_newline_too():
    for tag in ("nix_2_26", "nix_2_8"):
        defs = recorded_definitions(tag)
        assert defs.error is None and defs.options["hugepagesPerCard"].highest_prio == 100, tag
    # Nix 2.8 ends `nix eval --json` without a newline: the exit marker follows on the line
    glued = (
        '{"hugepagesPerCard":{"definitions":[],"exists":true,"highestPrio":1500}}@@remedy:exit 0'
    )
    found = options.parse([glued], {"hugepagesPerCard": "a.b"})
    assert found.error is None and found.options["hugepagesPerCard"].exists
