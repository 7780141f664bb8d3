"""What the facts must say about each incident state, from recorded real output.

The fixture tests check every field against the recording; these tests state
the few facts each acceptance case rests on, and the bad-input behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyinfra.api.exceptions import FactProcessError

import facts.memory
import facts.nix
import facts.serving
from remedy.core.readings import nix, systemd
from remedy.core.readings.serving import volatile_entries
from remedy.core.readings.snapshot import read_generations, read_memory

FIXTURES = Path(__file__).parent.parent / "facts"


def output(folder: str, case: str) -> list[str]:
    return json.loads((FIXTURES / folder / f"{case}.json").read_text())["output"]


def fact(folder: str, case: str, cls):
    return cls().process(output(folder, case))


def test_fresh_twin_runs_hermes_from_the_store_script():
    unit = fact("serving.ServingUnit", "fresh", facts.serving.ServingUnit)
    assert unit.now.parser.value == "hermes"
    assert unit.now.parser.source.startswith("/nix/store/")
    assert unit.now.parser.source.endswith("-start-tenstorrent-serving")
    assert unit.runtime_dropins == []
    assert unit.now.script.auto_tool_choice is True
    assert unit.now.script.model == "Qwen/Qwen3.6-27B"
    assert "--tensor-parallel-size" in unit.now.script.flags


def test_emergency_override_says_where_the_parser_comes_from():
    unit = fact("serving.ServingUnit", "emergency_override", facts.serving.ServingUnit)
    assert unit.now.parser.describe("parser") == (
        "parser qwen3_xml from /run/tt-serving-override/start via "
        "/run/systemd/system/tenstorrent-serving.service.d/override.conf"
    )
    assert [d.origin for d in unit.dropins] == ["runtime"]
    assert unit.now.env("QWEN36_SDPA_STREAMING") == "1"
    assert unit.after_reboot.parser.value == "hermes"
    assert unit.after_reboot.env("QWEN36_SDPA_STREAMING") is None
    assert unit.store_script.tool_call_parser == "hermes"


def test_volatile_state_of_the_seed_lists_dropin_script_parser_and_sdpa():
    entries = fact("serving.VolatileState", "emergency_override", facts.serving.VolatileState)
    subjects = {e.subject: e for e in entries}
    assert "/run/systemd/system/tenstorrent-serving.service.d/override.conf" in subjects
    assert "/run/tt-serving-override/start" in subjects
    assert subjects["tool-call parser"].after_reboot == "hermes"
    assert subjects["QWEN36_SDPA_STREAMING"].after_reboot == "unset"


def test_durable_fix_has_no_volatile_state():
    unit = fact("serving.ServingUnit", "durable", facts.serving.ServingUnit)
    assert unit.now.parser.value == unit.after_reboot.parser.value == "qwen3_xml"
    assert unit.now.parser.source.startswith("/nix/store/")
    assert fact("serving.VolatileState", "durable", facts.serving.VolatileState) == []


def test_rebuild_test_is_volatile_until_the_profile_boots():
    entries = fact("serving.VolatileState", "after_rebuild_test", facts.serving.VolatileState)
    assert "/run/current-system" in {e.subject for e in entries}


def test_runtime_hugepage_change_is_volatile():
    parts_unit = output("serving.ServingUnit", "fresh")
    from remedy.core.readings import sections
    from remedy.core.readings.serving import read_unit

    unit = read_unit(sections.split(parts_unit, "t"))
    memory = read_memory(sections.split(output("memory.MemoryHeadroom", "hugepages_2m_4"), "t"))
    gens = read_generations(sections.split(output("nix.SystemGenerations", "fresh"), "t"))
    entries = volatile_entries(unit, memory, gens)
    assert [(e.subject, e.now) for e in entries if e.kind == "hugepages"] == [("2M pages", "4")]


def test_memory_headroom_reads_pools_and_next_boot_params():
    m = fact("memory.MemoryHeadroom", "hugepages_2m_4", facts.memory.MemoryHeadroom)
    assert m.mem_available_kb > 0 and m.mem_total_kb >= m.mem_available_kb
    assert m.pools[2048].total == 4 and m.pools[2048].free == 4
    assert m.next_boot_pools() == {1048576: 4}


def test_stopped_unit_keeps_last_exec_status():
    unit = fact("serving.ServingUnit", "stopped", facts.serving.ServingUnit)
    assert unit.active_state == "inactive"
    assert unit.main_pid is None
    assert unit.exec_start_live[0].code == "exited"
    assert unit.now.parser.value == "hermes"


def test_unknown_unit_is_not_found_with_parser_none():
    unit = fact("serving.ServingUnit", "not_found", facts.serving.ServingUnit)
    assert unit.load_state == "not-found" and not unit.found
    assert unit.now.parser.value == "none"


def test_probe_against_a_dead_port_is_unreachable():
    result = fact("serving.ToolCallProbe", "dead_port", facts.serving.ToolCallProbe)
    assert result.outcome == "unreachable"
    assert "port 9" in result.reason


def test_flake_lock_follows_and_node_keys():
    stack = fact("nix.FlakeInput", "follows", facts.nix.FlakeInput)
    assert stack.node == "tt-stack_2" and stack.rev
    upstream = fact("nix.FlakeInput", "node_key_differs", facts.nix.FlakeInput)
    assert upstream.url == "path:/tmp/inner"


@pytest.mark.parametrize(
    "case, words",
    [
        ("no_such_input", ["/etc/nixos/flake.lock", "'nope'", "tt-stack"]),
        ("no_flake_lock", ["/srv/flake.lock", "does not exist", "'tt-stack'"]),
    ],
)
def test_flake_input_errors_name_the_file_and_input(case, words):
    with pytest.raises(FactProcessError) as err:
        fact("errors/nix.FlakeInput", case, facts.nix.FlakeInput)
    for word in words:
        assert word in str(err.value)


def test_nix_2_8_uses_update_input():
    info = fact("nix.NixInfo", "nix_2_8", facts.nix.NixInfo)
    assert info.update_input_argv == ["nix", "flake", "lock", "--update-input"]
    newer = nix.parse_nix_version(["nix (Nix) 2.24.10"])
    assert newer.update_input_argv == ["nix", "flake", "update"]


@pytest.mark.parametrize(
    "cls",
    [
        facts.serving.ServingUnit,
        facts.serving.HostSnapshot,
        facts.memory.MemoryHeadroom,
        facts.nix.FlakeInput,
    ],
)
@pytest.mark.parametrize(
    "garbage",
    [
        ["Welcome to cfx-llm2!", "@@remedy:section unit.show"],
        ["totally", "unrelated"],
        [],
    ],
)
def test_garbage_gives_a_clear_fact_process_error(cls, garbage):
    with pytest.raises(FactProcessError) as err:
        cls().process(garbage)
    assert str(err.value)  # a sentence, not an empty KeyError


def test_truncated_output_is_detected():
    lines = output("serving.HostSnapshot", "fresh")
    with pytest.raises(FactProcessError, match="cut short"):
        facts.serving.HostSnapshot().process(lines[: len(lines) // 2])


def test_environment_with_quoted_spaces():
    env = systemd.parse_environment('PATH=/usr/bin "TT_METAL_HOME=/opt/tt metal" A=1')
    assert env == {"PATH": "/usr/bin", "TT_METAL_HOME": "/opt/tt metal", "A": "1"}


def test_empty_dropin_paths_and_show_garbage():
    props = systemd.parse_show(["DropInPaths=", "Id=x.service"])
    assert props["DropInPaths"] == ""
    with pytest.raises(FactProcessError, match="not a Key=Value line"):
        systemd.parse_show(["<html>oops</html>"])


def test_etc_overrides_conf_sorts_after_run_override_conf():
    frag = systemd.UnitFile(
        "/etc/systemd/system/u.service",
        "/nix/store/x-u.service",
        "[Service]\nExecStart=/nix/store/a-start\n",
    )
    run = systemd.UnitFile(
        "/run/systemd/system/u.service.d/override.conf",
        "/run/systemd/system/u.service.d/override.conf",
        "[Service]\nExecStart=\nExecStart=/run/o/start\n",
    )
    etc = systemd.UnitFile(
        "/etc/systemd/system/u.service.d/overrides.conf",
        "/nix/store/y-overrides.conf",
        "[Service]\nExecStart=\nExecStart=/nix/store/b-start\n",
    )
    conf = systemd.configure(frag, [run, etc])
    assert conf.exec_start == "/nix/store/b-start"
    assert conf.exec_start_via.endswith("overrides.conf")


def test_start_script_without_the_parser_flag_reports_none():
    from remedy.core.readings import startscript

    unit = fact("serving.ServingUnit", "fresh", facts.serving.ServingUnit)
    recorded = unit.now.script.text
    text = "\n".join(line for line in recorded.splitlines() if "--tool-call-parser" not in line)
    script = startscript.parse(
        unit.now.script.path,
        text.replace("--enable-auto-tool-choice \\", "--enable-auto-tool-choice"),
    )
    assert script.tool_call_parser == "none" and script.parser_flag_count == 0
    assert script.model == "Qwen/Qwen3.6-27B"


def test_unreadable_flake_lock_names_file_and_input():
    lines = output("nix.FlakeInput", "fresh")
    cut = [line for line in lines if not line.strip().startswith('"nodes"')]
    with pytest.raises(FactProcessError) as err:
        facts.nix.FlakeInput().process(cut)
    assert "/etc/nixos/flake.lock" in str(err.value) and "'tt-stack'" in str(err.value)


def test_no_remote_snippet_keeps_a_placeholder():
    """Every @NAME@ in the snippets is replaced. NIX_VERSION's journal_trust_all was once
    given a file named "@MODEL_RECORD@": the probe's record was then asked again, alone,
    with a stat and a grep of its own on every read."""
    import re

    from facts import _remote

    left = {
        name: re.findall(r"@[A-Z][A-Z_]*@", value)
        for name, value in vars(_remote).items()
        if isinstance(value, str)
    }
    assert {name: found for name, found in left.items() if found} == {}


def test_host_data_in_the_exported_assignments_stays_data(tmp_path):
    """The snippets' host data is exported before the script, quoted by pyinfra; run as
    pyinfra runs a fact (`sh -c`, from a login shell), a value with quotes, $(...) and a
    newline reaches the script as it was, and runs nothing."""
    import subprocess

    from pyinfra.connectors.util import make_unix_command

    from facts import _remote, serving
    from remedy.core.readings import sections

    mark = tmp_path / "ran"
    value = f'a\'b$(touch {mark}) `touch {mark}` "q"\nline 2'
    cmd = _remote.command(['printf "%s\\n" "$REMEDY_X"'], {"REMEDY_X": value})
    raw = make_unix_command(cmd, _shell_executable=serving.HostSnapshot.shell_executable)
    out = subprocess.run(["bash", "-c", raw.get_raw_value()], capture_output=True, text=True)
    lines = [sections.unescape(line) for line in out.stdout.splitlines()[1:]]
    assert lines == [*value.split("\n"), "@@remedy:end"]
    assert not mark.exists()
