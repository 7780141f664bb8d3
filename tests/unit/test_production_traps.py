"""Issue 8, pure parts: what the engine reads from production's traps, from recorded output.

The recordings come from twins (``python -m tests.facts.record``): Nix 2.26 on
trixie, Nix 2.8 on bookworm, the `script =` unit, the checkout owned by `ops`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyinfra.api.exceptions import FactProcessError

import facts.nix
import facts.serving
from remedy.core.config.host_data import from_host_data
from remedy.core.programs import commands
from remedy.core.readings import nix, probe, startscript
from remedy.errors import ConfigError
from remedy.twin.fixtures import HEAVY_VLLM_VERSION

FIXTURES = Path(__file__).parent.parent / "facts"
RAW = FIXTURES / "raw"
VERSIONS = ["nix_2_26", "nix_2_8"]


def fact(folder: str, case: str, cls):
    data = json.loads((FIXTURES / folder / f"{case}.json").read_text())
    return cls().process(data["output"])


# -- Nix: what a bump would build -------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_a_bump_that_only_links_builds_config_derivations_only(version):
    dry = nix.parse_dry_run((RAW / f"{version}.dry_run_links.txt").read_text().splitlines())
    assert dry.built, "a bump to the fix builds the new start script and the toplevel"
    assert all(d.endswith(".drv") for d in dry.built)
    assert not any("vllm-tt" in d for d in dry.built)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_bump_that_compiles_is_told_apart_by_prefer_local_build(version):
    dry = nix.parse_dry_run((RAW / f"{version}.dry_run_compiles.txt").read_text().splitlines())
    assert any("vllm-tt" in d for d in dry.built)
    heavy = nix.local_build_derivations((RAW / f"{version}.derivation_show.json").read_text())
    assert [h.rsplit("/", 1)[-1].split("-", 1)[1] for h in heavy] == [
        f"vllm-tt-{HEAVY_VLLM_VERSION}.drv"
    ]


def test_derivation_show_garbage_is_a_clear_error():
    with pytest.raises(FactProcessError, match="not JSON"):
        nix.local_build_derivations("warning: Git tree is dirty")


@pytest.mark.parametrize(
    "version, new_cli", [("2.8.0", False), ("2.14.1", False), ("2.15.0", True), ("2.26.3", True)]
)
def test_derivation_show_command_follows_the_version(version, new_cli):
    info = nix.parse_nix_version([f"nix (Nix) {version}"])
    assert nix.derivation_show_is_new(info) is new_cli


@pytest.mark.parametrize("version", VERSIONS)
def test_every_nix_call_passes_the_flake_features(version):
    info = fact("nix.NixInfo", version, facts.nix.NixInfo)
    argv = commands.update_input(info.update_input_argv, "/etc/nixos", "tt-stack")
    assert argv[:3] == ["nix", "--extra-experimental-features", "nix-command flakes"]
    assert argv[-1] in ("tt-stack", "/etc/nixos")
    for built in (
        commands.build_toplevel("/etc/nixos", "cfx-llm2", 1, 2),
        commands.dry_run_toplevel("/etc/nixos", "cfx-llm2"),
        commands.show_derivations(True, ["/nix/store/x.drv"]),
    ):
        assert built[1:3] == ["--extra-experimental-features", "nix-command flakes"]
    assert commands.build_toplevel("/d", "h", 1, 3)[6:10] == ["--max-jobs", "1", "--cores", "3"]


# -- issue 28 item 6: `nix --version` may warn first -----------------------------------


@pytest.mark.parametrize("version", ["nix_2_26", "nix_2_8"])
def test_a_warning_before_the_version_line_is_passed_over(version):
    """Recorded: `lazy-trees = true` (Determinate Nix's setting) in nix.conf makes the
    twin's Nix print `warning: unknown setting 'lazy-trees'` before its version."""
    case = f"{version}_unknown_setting"
    data = json.loads((FIXTURES / "nix.NixInfo" / f"{case}.json").read_text())
    assert any(ln.startswith("warning: unknown setting 'lazy-trees'") for ln in data["output"])
    info = fact("nix.NixInfo", case, facts.nix.NixInfo)
    plain = fact("nix.NixInfo", version, facts.nix.NixInfo)
    assert info == plain and info.version.startswith(version[4:].replace("_", "."))


def _snapshot_with_nix_version(lines: list[str]):
    """The recorded fresh snapshot, its nix.version section replaced by LINES."""
    data = json.loads((FIXTURES / "serving.HostSnapshot" / "fresh.json").read_text())
    out, skip = [], False
    for ln in data["output"]:
        if ln.startswith("@@remedy:section "):
            skip = ln.startswith("@@remedy:section nix.version")
            if skip:
                out += [ln, *(f"{x}$" for x in lines)]
                continue
        if not skip:
            out.append(ln)
    return facts.serving.HostSnapshot().process(out)


def test_an_unreadable_nix_version_is_named_with_what_was_read():
    from remedy.core.run.plan import durable_blockers

    s = from_host_data("cfx-llm2", {})
    broken = "nix: error while loading shared libraries: libnixexpr.so"
    snap = _snapshot_with_nix_version([broken])
    assert snap.nix is None and broken in (snap.nix_unreadable or "")
    (blocker,) = [b for b in durable_blockers(snap, s) if "Nix" in b]
    assert blocker.startswith("Nix's version could not be read (nix --version printed no")
    assert broken in blocker and "not installed" not in blocker
    warned = _snapshot_with_nix_version(
        ["warning: unknown setting 'lazy-trees'", "nix (Nix) 2.26.3"]
    )
    assert warned.nix is not None and warned.nix.version == "2.26.3"
    assert not [b for b in durable_blockers(warned, s) if "Nix" in b]
    absent = _snapshot_with_nix_version([])
    assert "Nix is not installed on the host" in durable_blockers(absent, s)


# -- the checkout and its owner -----------------------------------------------------


def test_git_and_nix_run_as_the_checkout_owner():
    argv = ["git", "-C", "/etc/nixos", "status"]
    assert commands.as_owner("ops", "/home/ops", argv) == [
        "runuser", "-u", "ops", "--", "env", "-C", "/", "HOME=/home/ops", *argv,
    ]  # fmt: skip
    assert commands.as_owner("root", "/root", argv) == argv


def test_the_recorded_checkout_names_its_owner_and_ignores_untracked_files():
    clean = fact("nix.FlakeCheckout", "clean", facts.nix.FlakeCheckout)
    assert (clean.owner, clean.home, clean.is_checkout) == ("ops", "/home/ops", True)
    assert clean.problem is None and clean.changes == []
    assert facts.nix.FlakeCheckout().command().get_raw_value().count("--untracked-files=no") == 1


def test_an_ownership_refusal_is_named_as_such_not_as_no_checkout():
    refused = fact("nix.FlakeCheckout", "owner_refused", facts.nix.FlakeCheckout)
    assert not refused.is_checkout
    assert "dubious ownership" in refused.error
    assert "owned by ops" in refused.problem and "not a git checkout" not in refused.problem


# -- the `script =` unit --------------------------------------------------------------


def test_the_flags_are_read_through_the_unit_scripts_exec():
    unit = fact("serving.ServingUnit", "fresh", facts.serving.ServingUnit)
    assert "-unit-script-tenstorrent-serving-start/bin/" in unit.now.exec_start
    assert not unit.now.exec_start.endswith(" ")
    assert unit.now.parser.value == "hermes"
    assert unit.now.parser.source.endswith("-start-tenstorrent-serving")
    assert unit.store_script.path == unit.now.parser.source


def test_the_parser_flag_counts_on_any_line_and_an_exec_is_followed_once():
    flags = startscript.parse(
        "/nix/store/b-start",
        "#!/bin/sh\nFLAGS='--tool-call-parser qwen3_xml'\nexec vllm serve M $FLAGS\n",
    )
    assert (flags.tool_call_parser, flags.parser_flag_count) == ("qwen3_xml", 1)
    wrapper = startscript.parse(
        "/nix/store/a-start", "#!/bin/sh\nset -e\nexec /nix/store/b-start\n"
    )
    assert wrapper.execs == "/nix/store/b-start"
    scripts = {"/nix/store/b-start": flags}
    assert startscript.resolve(wrapper, scripts) is flags
    loop = startscript.parse("/nix/store/b-start", "exec /nix/store/a-start\n")
    assert startscript.resolve(loop, {"/nix/store/a-start": wrapper}) is wrapper  # one level


# -- the probe ------------------------------------------------------------------------


def test_a_recorded_prose_answer_is_inconclusive_with_the_served_model():
    result = fact("serving.ToolCallProbe", "prose", facts.serving.ToolCallProbe)
    assert result.outcome == probe.INCONCLUSIVE
    assert result.model == "qwen3.6-27b-tt"


def test_the_recorded_fresh_probe_is_unparsed_and_asked_the_served_model():
    result = fact("serving.ToolCallProbe", "fresh", facts.serving.ToolCallProbe)
    assert result.outcome == probe.UNPARSED and result.model == "qwen3.6-27b-tt"


def _answer(message: dict) -> str:
    return json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]})


@pytest.mark.parametrize(
    "message, outcome",
    [
        (
            {"content": None, "tool_calls": [{"type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Paris, France"}'}}]},
            probe.PARSED,
        ),
        ({"content": "<tool_call>\n<function=get_weather>\n", "tool_calls": []}, probe.UNPARSED),
        ({"content": "Paris is mild in spring.", "tool_calls": []}, probe.INCONCLUSIVE),
        ({"content": "Paris is mild in spring."}, probe.INCONCLUSIVE),
        (
            {"content": None, "tool_calls": [{"type": "function", "function": {
                "name": "get_weather", "arguments": '"Paris"'}}]},
            probe.UNPARSED,
        ),
    ],
)  # fmt: skip
def test_probe_classes(message, outcome):
    assert probe.classify(200, _answer(message)).outcome == outcome


# -- host data ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("min_mem_available_gb", "nan", ["min_mem_available_gb", "finite"]),
        ("min_mem_available_gb", "inf", ["min_mem_available_gb", "finite"]),
        ("build_cores", 0, ["build_cores", "at least 1"]),
        ("allow_local_build", "maybe", ["allow_local_build", "true or false"]),
    ],
)
def test_bad_build_and_memory_data_is_rejected_naming_host_and_key(key, value, words):
    with pytest.raises(ConfigError) as err:
        from_host_data("cfx-llm2", {key: value})
    for word in ["cfx-llm2", *words]:
        assert word in str(err.value)


def test_the_model_is_discovered_unless_host_data_sets_it():
    assert from_host_data("h", {}).model is None
    assert from_host_data("h", {"model": "qwen3.6-27b-tt"}).model == "qwen3.6-27b-tt"
    url, model, timeout, tries, head, tail = probe.probe_args("http://x", None, 5, 3)
    assert (url, model, timeout, tries) == ("http://x", "", "5", "3")
    assert json.loads(head + "qwen3.6-27b-tt" + tail)["model"] == "qwen3.6-27b-tt"


def test_a_bad_data_value_on_the_command_line_is_named_as_such_not_as_a_host():
    from pyinfra.api.exceptions import InventoryError

    from remedy.core.config.host_data import checked_hosts

    hosts = [("alpha", {}), ("beta", {})]
    argv = ["pyinfra", "--limit", "beta", "--data", "durable=perhaps", "inv.py", "d.py"]
    with pytest.raises(InventoryError) as err:
        checked_hosts(hosts, argv)
    assert str(err.value).startswith("pyinfra --data: data key 'durable'")
    assert "alpha" not in str(err.value)
    with pytest.raises(InventoryError, match="did you mean 'durable'"):
        checked_hosts(hosts, ["pyinfra", "--data", "durabel=false"])
    assert checked_hosts(hosts, ["pyinfra", "--data", "durable=false"]) == hosts
