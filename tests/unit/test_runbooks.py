"""Runbooks: the schema, the cross-checks, and `remedy runbooks list|show|check|apply`.

Every test builds its own project under tmp_path: a copy of the real runbooks,
a fixture operations package with real pyinfra @operation functions, deploys,
and, where git matters, a real git repository made with gitpython.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import uuid
from dataclasses import replace
from pathlib import Path

import git
import pytest
from click.testing import CliRunner

from remedy import audit
from remedy import runbooks as core
from remedy.cli.runbooks import runbooks as runbooks_cli
from remedy.core.run.steps import TEMPLATES
from remedy.errors import ConfigError
from remedy.runbooks import flow
from remedy.runbooks.operation_index import OperationIndex

REPO = Path(__file__).resolve().parents[2]
REAL_RUNBOOKS = REPO / "runbooks"
RUNBOOK_001 = "runbooks/001-toolcalling-run-only.yaml"

# The operations the runbooks name (the restore deploy's contract).
OPERATIONS = {
    "nix": [
        "flake_input_updated",
        "managed_file_written",
        "fix_proven",
        "flake_lock_committed",
        "system_switched",
        "system_rolled_back",
        "scratch_removed",
    ],
    "memory": ["hugepages_reduced", "headroom_gated"],
    "serving": [
        "run_begun",
        "drained",
        "runtime_override_removed",
        "runtime_carriers_removed",
        "runtime_override_written",
        "restarted",
        "toolcalling_verified",
        "outcome_reported",
    ],
}


# --------------------------------------------------------------------------- fixtures


def write_ops_package(project: Path, extra: dict[str, list[str]] | None = None) -> str:
    """A package of real pyinfra operations under ``project``; returns its (unique) name."""
    package = f"fixture_ops_{uuid.uuid4().hex[:10]}"
    root = project / package
    root.mkdir()
    (root / "__init__.py").write_text("")
    modules = {name: list(functions) for name, functions in OPERATIONS.items()}
    for name, functions in (extra or {}).items():
        modules.setdefault(name, []).extend(functions)
    for module, functions in modules.items():
        body = ["from pyinfra.api import operation", "", ""]
        for function in functions:
            body += [
                "@operation()",
                f"def {function}():",
                f'    """Fixture operation {module}.{function}."""',
                "    yield from ()",
                "",
                "",
            ]
        body += ["def helper_not_an_operation():", "    return 1", ""]
        (root / f"{module}.py").write_text("\n".join(body))
    return package


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, str]:
    """A project with the real runbooks, fixture operations and the real deploys."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(REAL_RUNBOOKS, root / "runbooks")
    package = write_ops_package(root)
    shutil.copytree(REPO / "deploys", root / "deploys", ignore=shutil.ignore_patterns("__*"))
    yield root, package
    for name in list(sys.modules):
        if name == package or name.startswith(package + "."):
            del sys.modules[name]


def line_of(path: Path, needle: str, occurrence: int = 1) -> int:
    """1-based line of the n-th line containing ``needle``."""
    seen = 0
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if needle in line:
            seen += 1
            if seen == occurrence:
                return number
    raise AssertionError(f"{needle!r} not in {path}")


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def problems_of(root: Path, package: str) -> list[str]:
    return [str(p) for p in core.check_project(root, package).problems]


def invoke(*args: str):
    return CliRunner().invoke(runbooks_cli, list(args), catch_exceptions=True)


# --------------------------------------------------------------------------- the real runbooks


@pytest.mark.parametrize(
    "path", sorted(REAL_RUNBOOKS.glob("*.yaml")), ids=lambda p: p.name.split("-")[0]
)
def test_real_runbooks_validate_against_the_schema(path: Path):
    schema = core.load_schema(REPO)
    runbook = core.load_runbook(path, REPO)
    assert core.validate_runbook(runbook, schema) == []


def test_the_seed_runbooks_and_converge_name_their_issues():
    runbooks = {e.id: e.runbook for e in core.discover(REPO)}
    assert sorted(runbooks) == ["001", "002", "003", "004", "005", "006", "007"]
    assert runbooks["006"].issues == ["tt-stack#49", "tt-stack#44", "tt-stack#52"]
    assert runbooks["006"].deploy == "deploys/converge.py"
    assert runbooks["001"].issues == ["tt-stack#49", "tt-stack#34", "tt-stack#44"]
    assert runbooks["002"].issues == ["tt-stack#49"]
    assert runbooks["003"].issues == ["tt-stack#49", "tt-stack#44"]
    assert runbooks["004"].issues == ["tt-stack#49"]
    assert runbooks["005"].issues == ["tt-stack#52"]
    assert runbooks["007"].issues == ["tt-stack#49"]
    assert runbooks["002"].data["owner_decision_pending"] is True
    assert runbooks["001"].deploy == "deploys/restore_toolcalling.py"


def test_runbook_001_steps_name_every_restore_operation_in_order():
    runbook = core.find_runbook(REPO, "001")
    named = [step["operation"] for step in runbook.steps if "operation" in step]
    expected = {f"{m}.{f}" for m, functions in OPERATIONS.items() for f in functions}
    assert set(named) == expected
    # durable path first, fallback after, audit last
    assert named.index("nix.flake_input_updated") < named.index("nix.fix_proven")
    assert named.index("nix.fix_proven") < named.index("nix.flake_lock_committed")
    assert named.index("memory.headroom_gated") < named.index("nix.system_switched")
    assert named.index("nix.system_switched") < named.index("serving.runtime_override_written")
    assert named.index("serving.restarted") < named.index("serving.toolcalling_verified")
    # the override goes back before the rollback: never hermes on disk with no override
    assert named.index("serving.runtime_override_written") < named.index("nix.system_rolled_back")
    assert named[-1] == "serving.outcome_reported"


def test_restarting_runbooks_carry_the_memory_gate_precondition():
    for entry in core.discover(REPO):
        runbook = entry.runbook
        if runbook.step_operations() & core.RESTARTING_OPERATIONS:
            gates = [p.get("check", {}).get("operation") for p in runbook.data["preconditions"]]
            assert core.MEMORY_GATE in gates, runbook.file


def test_004_reboots_by_hand_and_005_greps_for_prefix_caching():
    reboot = core.find_runbook(REPO, "004")
    commands = [c for s in reboot.steps if "manual" in s for c in s["manual"]["commands"]]
    assert "systemctl reboot" in commands
    assert reboot.deploy == "deploys/restore_toolcalling.py"
    phase2a = core.find_runbook(REPO, "005")
    verification = " ".join(c for v in phase2a.data["verification"] for c in v.get("commands", []))
    assert "--enable-prefix-caching" in verification
    assert "--no-async-scheduling" in verification


@pytest.mark.skipif(
    not (REPO / "remedy" / "operations" / "nix.py").exists(),
    reason="remedy/operations/nix.py is not written yet; `runbooks check` on the tree needs it",
)
def test_check_passes_on_the_real_tree():
    report = core.check_project(REPO)
    assert [str(p) for p in report.problems] == []


# --------------------------------------------------------------------------- check


def test_fixture_project_checks_clean(project):
    root, package = project
    assert problems_of(root, package) == []
    result = invoke("check", "--project", str(root), "--operations-package", package)
    assert result.exit_code == 0, result.output
    assert "7 runbooks OK" in result.output


def test_a_flow_runbook_out_of_the_runs_order_is_named_with_where_the_step_belongs(project):
    """The run's order lives in remedy/core/run/steps.py: runbook 001 listed the managed file
    after the fallback while the run writes it second."""
    root, package = project
    path = root / RUNBOOK_001
    text = path.read_text()
    a, b = text.index("  - id: managed-file\n"), text.index("  - id: prove-fix\n")
    block, text = text[a:b], text[:a] + text[b:]
    at = text.index("  - id: remove-scratch\n")
    path.write_text(text[:at] + block + text[at:])
    (problem,) = [p for p in problems_of(root, package) if "order" in p]
    assert problem.startswith(f"{RUNBOOK_001}:{line_of(path, 'id: managed-file') + 4}:")
    assert "$.steps[20].operation: nix.managed_file_written is out of the run's order" in problem
    assert "step 4, after nix.flake_input_updated" in problem


def test_missing_field_names_file_line_and_path(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "title: Tool calling is /run-only", "titel: Tool calling is /run-only")
    problems = problems_of(root, package)
    assert f"{RUNBOOK_001}:1: $: missing required field 'title'" in problems
    line = line_of(path, "titel:")
    expected = f"{RUNBOOK_001}:{line}: $.titel: unknown field 'titel'"
    assert any(p.startswith(expected) for p in problems), problems


def test_missing_nested_field_points_at_its_parent(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "risk:\n  level: high\n", "risk:\n")
    line = line_of(path, "  notes: >-", occurrence=1)
    assert f"{RUNBOOK_001}:{line}: $.risk: missing required field 'level'" in problems_of(
        root, package
    )


def test_extra_field_names_file_line_and_path(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "  - id: commit-lock\n", "  - id: commit-lock\n    colour: red\n")
    line = line_of(path, "colour: red")
    problems = problems_of(root, package)
    assert len(problems) == 1, problems
    expected = f"{RUNBOOK_001}:{line}: $.steps[9].colour: unknown field 'colour'; allowed here:"
    assert problems[0].startswith(expected), problems


@pytest.mark.parametrize("bad", ["tt-stack 34", "#34", "tt-stack#", "tt-stack#0", "tt stack#34"])
def test_malformed_issue_ref_names_file_line_and_path(project, bad):
    root, package = project
    path = root / RUNBOOK_001
    edit(
        path,
        "issues: [tt-stack#49, tt-stack#34, tt-stack#44]",
        f'issues: [tt-stack#49, "{bad}", tt-stack#44]',
    )
    problems = problems_of(root, package)
    assert problems == [
        f"{RUNBOOK_001}:3: $.issues[1]: malformed issue reference {bad!r}: write repo#N or "
        "owner/repo#N with N a positive number, e.g. tt-stack#49"
    ]


def test_owner_qualified_issue_refs_are_valid():
    assert core.issue_ref_is_valid("bitpartner/tt-stack#49")
    assert core.issue_ref_is_valid("nixos-llm#12")
    assert not core.issue_ref_is_valid("tt-stack#49x")


def test_step_naming_a_missing_operation_fails(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "operation: serving.restarted\n", "operation: serving.restarted_twice\n")
    line = line_of(path, "serving.restarted_twice")
    problems = problems_of(root, package)
    assert problems == [
        f"{RUNBOOK_001}:{line}: $.steps[11].operation: operation serving.restarted_twice does "
        f"not exist: {package}.serving has no 'restarted_twice'"
    ]


def test_step_naming_a_missing_module_or_a_helper_fails(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "operation: serving.restarted\n", "operation: kernel.module_reloaded\n")
    edit(path, "serving.outcome_reported\n", "serving.helper_not_an_operation\n")
    problems = "\n".join(problems_of(root, package))
    assert f"there is no module {package}.kernel" in problems
    assert "helper_not_an_operation is not a pyinfra @operation" in problems


def test_step_with_both_operation_and_manual_fails(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(
        path,
        "    operation: nix.flake_lock_committed\n",
        "    operation: nix.flake_lock_committed\n    manual:\n      commands: [true]\n",
    )
    problems = problems_of(root, package)
    assert any(
        "$.steps[9]: a step has exactly one of operation or manual, not operation and manual" in p
        for p in problems
    ), problems


def test_step_or_verification_with_nothing_to_do_fails(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "    operation: nix.flake_lock_committed\n", "")
    edit(
        path,
        "    operation: serving.toolcalling_verified\n  - description: The script",
        ("  - description: The script"),
    )
    problems = problems_of(root, package)
    commit_line = line_of(path, "- id: commit-lock")
    verify_line = line_of(path, "- description: Effective parser qwen3_xml")
    assert f"{RUNBOOK_001}:{commit_line}: $.steps[9]: a step needs one of operation or manual" in (
        problems
    )
    assert (
        f"{RUNBOOK_001}:{verify_line}: $.verification[0]: needs at least one of operation or "
        "commands"
    ) in problems


def test_unquoted_id_says_to_quote_it(project):
    root, package = project
    edit(root / RUNBOOK_001, 'id: "001"', "id: 001")
    problems = problems_of(root, package)
    assert f'{RUNBOOK_001}:1: $.id: id must be quoted (id: "001"): unquoted it is a number' in (
        problems
    )


def test_id_must_match_the_file_name(project):
    root, package = project
    edit(root / RUNBOOK_001, 'id: "001"', 'id: "007"')
    problems = problems_of(root, package)
    assert f"{RUNBOOK_001}:1: $.id: id '007' differs from the file name prefix '001'" in problems


def test_a_file_name_without_id_and_slug_fails(project):
    root, package = project
    shutil.copy(root / RUNBOOK_001, root / "runbooks" / "7-x.yaml")
    assert (
        "runbooks/7-x.yaml:1: file name must be <id>-<slug>.yaml, e.g. "
        "001-toolcalling-run-only.yaml"
    ) in problems_of(root, package)


def test_two_runbooks_with_one_id_fail(project):
    root, package = project
    shutil.copy(root / RUNBOOK_001, root / "runbooks" / "001-copy.yaml")
    assert problems_of(root, package) == [
        f"{RUNBOOK_001}:1: $.id: id 001 is also used by runbooks/001-copy.yaml"
    ]


def test_a_step_id_used_twice_fails(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "  - id: commit-lock\n", "  - id: managed-file\n")
    line = line_of(path, "id: managed-file", occurrence=2)
    assert problems_of(root, package) == [
        f"{RUNBOOK_001}:{line}: $.steps[9].id: step id 'managed-file' is already used by steps[3]"
    ]


@pytest.mark.parametrize(
    "old, new, message",
    [
        (
            "operation: serving.restarted\n",
            "operation: Serving.Restarted\n",
            "$.steps[11].operation: 'Serving.Restarted' is not an operation name: write "
            "<module>.<function>, e.g. serving.restarted",
        ),
        ('id: "001"', 'id: "01"', "$.id: id '01' must be three digits, e.g. \"001\""),
        (
            "deploy: deploys/restore_toolcalling.py",
            "deploy: restore.sh",
            "$.deploy: 'restore.sh' must be a deploy file like deploys/restore_toolcalling.py",
        ),
        (
            "  - id: commit-lock\n",
            "  - id: Commit_Lock\n",
            "$.steps[9].id: 'Commit_Lock' does not match ^[a-z0-9]+(?:-[a-z0-9]+)*$",
        ),
        (
            "issues: [tt-stack#49, tt-stack#34, tt-stack#44]",
            "issues: []",
            "$.issues: must not be empty",
        ),
    ],
    ids=["operation", "id", "deploy", "slug", "empty"],
)
def test_a_value_off_the_schema_says_what_to_write(project, old, new, message):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, old, new)
    expected = f"{RUNBOOK_001}:{line_of(path, new.strip())}: {message}"
    assert expected in problems_of(root, package)


def test_a_runbook_that_is_not_a_mapping_fails(project):
    root, package = project
    (root / "runbooks" / "007-list.yaml").write_text("- id: x\n")
    assert (
        "runbooks/007-list.yaml:1: $: a runbook is a YAML mapping of fields (id, title, ...)"
    ) in problems_of(root, package)


def test_a_project_without_runbooks_fails(project):
    root, package = project
    for path in (root / "runbooks").glob("*.yaml"):
        path.unlink()
    assert problems_of(root, package) == ["runbooks: no runbooks found (runbooks/<id>-<slug>.yaml)"]


def test_a_missing_or_broken_schema_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"runbooks/schema.json not found in .*--project DIR"):
        core.load_schema(tmp_path)
    schema = tmp_path / "runbooks" / "schema.json"
    schema.parent.mkdir()
    schema.write_text("{")
    with pytest.raises(ConfigError, match="cannot read the runbook schema"):
        core.load_schema(tmp_path)
    schema.write_text('{"type": 5}')
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        core.load_schema(tmp_path)


def test_an_operations_module_that_does_not_import_is_named(project):
    root, package = project
    (root / package / "broken.py").write_text("raise RuntimeError('half-written')\n")
    path = root / RUNBOOK_001
    edit(path, "operation: serving.restarted\n", "operation: broken.restarted\n")
    line = line_of(path, "broken.restarted")
    assert problems_of(root, package) == [
        f"{RUNBOOK_001}:{line}: $.steps[11].operation: operation broken.restarted does not "
        f"exist: importing {package}.broken failed: RuntimeError: half-written"
    ]


def test_a_manual_restart_needs_the_memory_gate_too(project):
    """Runbooks 002 and 005 switch by hand: the gate is required of them as well."""
    root, package = project
    path = root / "runbooks" / "005-phase2a-options-off.yaml"
    edit(path, "      operation: memory.headroom_gated\n", '      commands: ["true"]\n')
    line = line_of(path, "preconditions:")
    assert problems_of(root, package) == [
        f"runbooks/005-phase2a-options-off.yaml:{line + 1}: $.preconditions: the steps restart "
        "the server (a manual restart at $.steps[2]) but no precondition checks the memory "
        "gate; add one with `check: {operation: memory.headroom_gated}`"
    ]


def test_restarting_runbook_without_memory_gate_fails(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "    check:\n      operation: memory.headroom_gated\n", "")
    line = line_of(path, "preconditions:")
    problems = problems_of(root, package)
    assert any(
        p.startswith(f"{RUNBOOK_001}:{line + 1}: $.preconditions: the steps restart the server")
        for p in problems
    ), problems


def test_duplicate_keys_are_reported(project):
    root, package = project
    path = root / RUNBOOK_001
    edit(path, "summary: >-", "title: again\nsummary: >-")
    line = line_of(path, "title: again")
    assert f"{RUNBOOK_001}:{line}: $.title: duplicate key (first at line 2)" in problems_of(
        root, package
    )


def test_yaml_syntax_error_gives_file_line_column(project):
    root, package = project
    (root / "runbooks" / "006-broken.yaml").write_text('id: "006"\ntitle: x\n  bad: indent\n')
    problems = problems_of(root, package)
    expected = (
        "runbooks/006-broken.yaml:3:6: YAML syntax error: mapping values are not allowed here"
    )
    assert expected in problems
    result = invoke("check", "--project", str(root), "--operations-package", package)
    assert result.exit_code == 1
    assert "runbooks/006-broken.yaml:3:6: YAML syntax error" in result.output
    with pytest.raises(core.RunbookSyntaxError, match=r"006-broken.yaml:3:6"):
        core.find_runbook(root, "006")


def test_check_json_lists_problems_and_exits_1(project):
    root, package = project
    edit(root / RUNBOOK_001, "tt-stack#34,", '"tt-stack 34",')
    result = invoke("check", "--json", "--project", str(root), "--operations-package", package)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["problems"] == [
        {
            "file": RUNBOOK_001,
            "line": 3,
            "column": None,
            "path": "$.issues[1]",
            "message": "malformed issue reference 'tt-stack 34': write repo#N or owner/repo#N "
            "with N a positive number, e.g. tt-stack#49",
        }
    ]


def test_deploy_names_a_missing_runbook_deploy(project):
    root, package = project
    (root / "deploys" / "restore_toolcalling.py").unlink()
    path = root / RUNBOOK_001
    line = line_of(path, "deploy: deploys/restore_toolcalling.py")
    assert (
        f"{RUNBOOK_001}:{line}: $.deploy: deploys/restore_toolcalling.py does not exist "
        "in the project"
    ) in problems_of(root, package)


# --------------------------------------------------------------------------- deploys


def write_deploy(root: Path, body: str) -> Path:
    path = root / "deploys" / "x.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_deploy_that_imports_operations_of_its_own_is_refused(project):
    """A deploy runs the run's step list: an operation it imports is a step that the
    runbooks, --dry and the manual script do not know."""
    root, package = project
    write_deploy(
        root,
        f"""\
        from {package} import memory, serving
        from {package}.nix import system_switched
        import {package}.nix as nx
        from {package}.serving import helper_not_an_operation
        from pyinfra.operations import server
        from remedy.operations.flow import converge

        serving.restarted(name="restart the server")
        """,
    )
    why = (
        "a deploy runs the run's step list (remedy.operations.flow), not operations of "
        "its own: make this a step of TEMPLATES (remedy/core/run/steps.py)"
    )
    assert problems_of(root, package) == [
        f"deploys/x.py:1: memory: {why}",
        f"deploys/x.py:1: serving: {why}",
        f"deploys/x.py:2: nix.system_switched: {why}",
        f"deploys/x.py:3: nix: {why}",
    ]


def test_deploy_syntax_error_is_located(project):
    root, package = project
    write_deploy(root, "def broken(:\n")
    assert problems_of(root, package) == ["deploys/x.py:1:12: Python syntax error: invalid syntax"]


# --------------------------------------------------------------------------- the step list


def step_list_line(key: str) -> int:
    return line_of(REPO / flow.STEP_LIST_FILE, f'"{key}"')


def test_each_step_of_the_run_is_named_by_a_runbook_step():
    named = {op for e in core.discover(REPO) for op in e.runbook.step_operations()}
    operations = OperationIndex(REPO)
    assert flow.check_step_list(REPO, named, operations) == []
    problems = flow.check_step_list(REPO, named - {"serving.drained"}, operations)
    assert [str(p) for p in problems] == [
        f"remedy/core/run/steps.py:{step_list_line(key)}: serving.drained: no runbook step names "
        "this operation; add a step with `operation: serving.drained` to the runbook it serves"
        for key in ("drain", "drain_fallback")
    ]
    # a project of runbooks alone has no step list of its own to check
    assert flow.check_step_list(REPO / "runbooks", set(), operations) == []


def test_a_step_of_the_run_without_an_operation_or_an_issue_is_named():
    gate, bump, managed, prove = TEMPLATES[1:5]
    templates = (
        replace(gate, op="serving.restarted_twice"),
        replace(bump, op="flow.converge"),
        replace(managed, op="restarted"),
        replace(prove, issue="#34"),
    )
    named = {t.op for t in TEMPLATES}
    problems = flow.check_step_list(REPO, named, OperationIndex(REPO), templates)
    lines = [step_list_line(t.key) for t in templates]
    assert [str(p) for p in problems] == [
        f"remedy/core/run/steps.py:{lines[0]}: serving.restarted_twice: no such operation: "
        "remedy.operations.serving has no 'restarted_twice'",
        f"remedy/core/run/steps.py:{lines[1]}: flow.converge: no such operation: "
        "remedy.operations.flow.converge is not a pyinfra @operation (no _inner attribute)",
        f"remedy/core/run/steps.py:{lines[2]}: restarted: no such operation: 'restarted' is not "
        "<module>.<function>",
        f"remedy/core/run/steps.py:{lines[3]}: nix.fix_proven: step 'Prove the build holds the "
        "desired state' carries no issue reference ('#34'); write repo#N, e.g. tt-stack#49",
    ]


# --------------------------------------------------------------------------- list


def init_repo(root: Path) -> git.Repo:
    repo = git.Repo.init(root)
    with repo.config_writer() as config:
        config.set_value("user", "name", "Runbook Author")
        config.set_value("user", "email", "author@example.invalid")
    repo.git.add(A=True)
    repo.index.commit("runbooks for tt-stack#49")
    return repo


def test_list_outside_git_says_not_tracked(project):
    root, _ = project
    result = invoke("list", "--project", str(root))
    assert result.exit_code == 0, result.output
    assert "not tracked" in result.output
    rows = json.loads(invoke("list", "--json", "--project", str(root)).stdout)
    assert [r["id"] for r in rows] == ["001", "002", "003", "004", "005", "006", "007"]
    assert {r["state"] for r in rows} == {"not tracked"}
    assert all(r["commit"] is None for r in rows)


def test_list_marks_modified_and_untracked_runbooks(project):
    root, _ = project
    repo = init_repo(root)
    edit(root / RUNBOOK_001, "risk:\n  level: high", "risk:\n  level: medium")
    shutil.copy(root / RUNBOOK_001, root / "runbooks" / "006-copy.yaml")
    listing = json.loads(invoke("list", "--json", "--project", str(root)).stdout)
    rows = {r["file"].split("/")[1][:3]: r for r in listing}
    assert rows["001"]["state"] == "modified"
    assert rows["002"]["state"] == "clean"
    assert rows["001"]["commit"]["short"] == repo.head.commit.hexsha[:7]
    assert rows["001"]["commit"]["author"] == "Runbook Author"
    assert rows["001"]["title"].startswith("Tool calling is /run-only")
    assert rows["001"]["issues"] == ["tt-stack#49", "tt-stack#34", "tt-stack#44"]
    # the copy still says id 001 inside; list shows the file as untracked, without a commit
    assert rows["006"]["id"] == "001"
    assert rows["006"]["state"] == "untracked" and rows["006"]["commit"] is None
    text = invoke("list", "--project", str(root)).output
    assert "modified" in text and "untracked" in text


def test_list_survives_a_broken_runbook(project):
    root, _ = project
    (root / "runbooks" / "006-broken.yaml").write_text("id: [\n")
    result = invoke("list", "--json", "--project", str(root))
    rows = json.loads(result.stdout)
    broken = next(r for r in rows if r["id"] == "006")
    assert broken["title"] is None and "YAML syntax error" in broken["error"]
    assert result.exit_code == 1  # listed, but a broken runbook is not a clean list


def test_list_exits_1_naming_a_runbook_that_parses_but_is_invalid(project):
    root, _ = project
    edit(root / RUNBOOK_001, "title: Tool calling is /run-only", "titel: Tool calling is /run-only")
    result = invoke("list", "--project", str(root))
    assert result.exit_code == 1
    assert "1 runbook(s) broken: runbooks/001-toolcalling-run-only.yaml" in " ".join(
        result.output.split()
    )
    clean = invoke("list", "--project", str(REPO))
    assert clean.exit_code == 0, clean.output


# --------------------------------------------------------------------------- show


def test_show_unknown_id_lists_known_ids(project):
    root, _ = project
    result = invoke("show", "042", "--project", str(root))
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "no runbook '042'" in str(result.exception)
    assert "known ids: 001, 002, 003, 004, 005" in str(result.exception)


def test_show_renders_for_a_person(project):
    root, _ = project
    result = invoke("show", "1", "--project", str(root))
    assert result.exit_code == 0, result.output
    for text in (
        "Tool calling is /run-only",
        "tt-stack#49, tt-stack#34, tt-stack#44",
        "Preconditions",
        "1. record-the-start",
        "2. gate-memory-before-nix",
        "23. report-outcome",
        "operation: serving.runtime_override_written",
        "Verification",
        "Rollback",
        "git -C /etc/nixos -c user.name=remedy -c user.email=remedy@cfx-llm2 revert",
        "Survives a reboot: depends",
    ):
        assert text in result.output, text
    data = json.loads(invoke("show", "002", "--json", "--project", str(root)).stdout)
    assert data["id"] == "002" and data["owner_decision_pending"] is True


def test_show_refuses_an_invalid_runbook(project):
    root, _ = project
    edit(root / RUNBOOK_001, "tt-stack#34,", '"tt-stack 34",')
    result = invoke("show", "001", "--project", str(root))
    assert isinstance(result.exception, core.RunbookInvalid)
    assert f"{RUNBOOK_001}:3: $.issues[1]: malformed issue reference" in str(result.exception)


def test_show_manual_renders_a_shell_script_with_default_values(project):
    root, _ = project
    result = invoke("show", "001", "--manual", "--project", str(root))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("#!/bin/sh\n")
    out = result.output
    # The switch activates exactly the proven toplevel, as nixos-rebuild's last two steps.
    assert 'nix-env -p "$profile" --set "$toplevel"' in out
    assert '"$1/bin/switch-to-configuration" "$2"' in out
    # Flakes need not be enabled in nix.conf; git and nix run as the checkout's owner.
    # the bump is the deploy's approved-bump program, run as the owner with the update
    assert 'at sh -c "$(APPROVED_BUMP)" sh "$there" "$flake_input"' in out
    assert "nix --extra-experimental-features 'nix-command flakes' flake update" in out
    assert 'runuser -u "$owner"' in out
    assert "build --dry-run" in out and "preferLocalBuild" in out
    assert "http://127.0.0.1:8000" in out
    assert [line for line in out.splitlines() if line != line.rstrip()] == []


@pytest.mark.parametrize(
    "path", sorted(REAL_RUNBOOKS.glob("*.yaml")), ids=lambda p: p.name.split("-")[0]
)
def test_every_real_runbook_renders_a_manual_script_sh_parses(path: Path):
    """Each runbook's --manual script, the run's flow and the standalone ones (their
    memory gate's program had no journal: `show 004 --manual` ended in a TypeError)."""
    runbook_id = path.name.split("-")[0]
    result = invoke("show", runbook_id, "--manual", "--project", str(REPO))
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.output.startswith("#!/bin/sh\n")
    parsed = subprocess.run(["sh", "-n"], input=result.output, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr


def test_show_host_without_inventory_is_a_usage_error(project):
    root, _ = project
    result = invoke("show", "001", "--manual", "--host", "cfx-llm2", "--project", str(root))
    assert result.exit_code == 2
    assert "--host needs --inventory" in result.output


# --------------------------------------------------------------------------- apply

APPLY_RUNBOOK = """\
id: "001"
title: Fixture runbook whose deploy only records its environment
issues: [tt-stack#49]
summary: Used by the apply tests.
use_when: the apply tests run.
symptoms:
  - description: none
    detect: {facts: [], status_fields: []}
risk: {level: low, notes: changes nothing}
preconditions: []
steps:
  - id: noop
    description: Run true.
    manual: {commands: ["true"]}
verification:
  - description: Nothing to verify.
    commands: ["true"]
rollback: []
survives_reboot: {value: true, explanation: nothing changes}
deploy: deploys/noop.py
"""

NOOP_DEPLOY = """\
import json
import os

from pyinfra.operations import server

with open(os.environ["REMEDY_TEST_ENV_OUT"], "w") as handle:
    json.dump({k: v for k, v in os.environ.items() if k.startswith("REMEDY_")}, handle)

server.shell(name="noop (tt-stack#49)", commands=["true"])
"""


@pytest.fixture
def apply_project(tmp_path: Path, monkeypatch) -> tuple[Path, Path, Path]:
    """(project, production inventory, env dump) in a committed git checkout."""
    root = tmp_path / "project"
    (root / "runbooks").mkdir(parents=True)
    shutil.copy(REAL_RUNBOOKS / "schema.json", root / "runbooks" / "schema.json")
    (root / "runbooks" / "001-fixture.yaml").write_text(APPLY_RUNBOOK)
    (root / "deploys").mkdir()
    (root / "deploys" / "noop.py").write_text(NOOP_DEPLOY)
    (root / "inventory").mkdir()
    inventory = root / "inventory" / "production.py"
    inventory.write_text('hosts = [("@local", {"remedy_environment": "production"})]\n')
    init_repo(root)
    env_out = tmp_path / "env.json"
    monkeypatch.setenv("REMEDY_TEST_ENV_OUT", str(env_out))
    monkeypatch.delenv("REMEDY_FORCE_DIRTY", raising=False)
    return root, inventory, env_out


def test_apply_refuses_a_dirty_runbook_in_production(apply_project, tmp_path):
    root, inventory, env_out = apply_project
    edit(root / "runbooks" / "001-fixture.yaml", "Run true.", "Run true, edited.")
    log = tmp_path / "audit.jsonl"
    result = invoke("apply", "001", str(inventory), "--project", str(root), "--audit-log", str(log))
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    message = str(result.exception)
    assert "runbooks/001-fixture.yaml (modified)" in message
    assert "--force-dirty" in message
    assert not env_out.exists(), "the deploy must not have run"
    [record] = audit.read(log)
    assert record.result == "refused" and record.host == "@local" and record.runbook == "001"
    assert record.details["dirty_files"] == {"runbooks/001-fixture.yaml": "modified"}


def test_apply_refuses_a_dirty_deploy_in_production(apply_project, tmp_path):
    root, inventory, _ = apply_project
    (root / "deploys" / "extra.py").write_text("# new, uncommitted\n")
    result = invoke(
        "apply", "001", str(inventory), "--project", str(root),
        "--audit-log", str(tmp_path / "a.jsonl"),
    )  # fmt: skip
    assert isinstance(result.exception, ConfigError)
    assert "deploys/extra.py (untracked)" in str(result.exception)


def test_apply_force_dirty_runs_and_tells_the_deploy(apply_project, tmp_path):
    root, inventory, env_out = apply_project
    edit(root / "runbooks" / "001-fixture.yaml", "Run true.", "Run true, edited.")
    log = tmp_path / "audit.jsonl"
    result = invoke(
        "apply", "001", str(inventory), "--force-dirty", "--project", str(root),
        "--audit-log", str(log),
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    seen = json.loads(env_out.read_text())
    assert seen["REMEDY_FORCE_DIRTY"] == "1"
    assert seen["REMEDY_RUNBOOK"] == "001"
    assert seen["REMEDY_AUDIT_LOG"] == str(log)


def test_apply_clean_production_runs_without_override(apply_project):
    root, inventory, env_out = apply_project
    result = invoke("apply", "001", str(inventory), "--project", str(root))
    assert result.exit_code == 0, (result.output, result.exception)
    seen = json.loads(env_out.read_text())
    assert "REMEDY_FORCE_DIRTY" not in seen
    assert seen["REMEDY_RUNBOOK"] == "001"


def test_apply_dirty_twin_inventory_is_allowed(apply_project):
    root, _, env_out = apply_project
    edit(root / "runbooks" / "001-fixture.yaml", "Run true.", "Run true, edited.")
    twin = root / "inventory" / "twin.py"
    twin.write_text('hosts = [("@local", {"remedy_environment": "twin"})]\n')
    result = invoke("apply", "001", str(twin), "--project", str(root), "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    report = json.loads(result.stdout)
    assert report["production"] is False and report["exit_code"] == 0
    assert "REMEDY_FORCE_DIRTY" not in json.loads(env_out.read_text())


def test_apply_passes_pyinfra_exit_code_through(apply_project):
    root, _, _ = apply_project
    failing = root / "inventory" / "twin.py"
    failing.write_text('hosts = [("@local", {"remedy_environment": "twin"})]\n')
    (root / "deploys" / "noop.py").write_text(
        NOOP_DEPLOY.replace('commands=["true"]', 'commands=["false"]')
    )
    result = invoke("apply", "001", str(failing), "--project", str(root))
    assert result.exit_code not in (0, None)
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_apply_runbook_without_deploy_is_a_config_error(apply_project):
    root, inventory, _ = apply_project
    edit(root / "runbooks" / "001-fixture.yaml", "deploy: deploys/noop.py\n", "")
    result = invoke("apply", "001", str(inventory), "--project", str(root))
    assert isinstance(result.exception, ConfigError)
    assert "has no `deploy`" in str(result.exception)


def test_list_says_when_to_use_each_runbook_at_80_columns(project):
    root, package = project
    text = invoke("list", "--project", str(root)).output
    assert text.count("use when: ") == 7, text
    assert "006  Converge every managed setting" in text
    assert max(map(len, text.splitlines())) <= 80, text
    # a runbook that does not say when to use it is refused, naming the field
    edit(root / RUNBOOK_001, "use_when: >-", "when_to_use: >-")
    said = problems_of(root, package)
    assert any("missing required field 'use_when'" in p for p in said), said


def test_a_flow_runbook_that_leaves_out_a_step_of_the_run_is_named(project):
    """Issue 33 item 7: runbook 006 listed 15 steps while the run (and its manual script)
    has 22. A flow runbook lists every step of the run, in its order."""
    root, package = project
    edit(
        root / RUNBOOK_001,
        "  - id: gate-memory-before-nix\n",
        "  - id: gate-memory-before-nix\n    when: never listed\n",
    )  # still there: no problem of this kind
    assert not [p for p in problems_of(root, package) if "of the run's 23 steps" in p]
    text = (root / RUNBOOK_001).read_text()
    start = text.index("  - id: gate-memory-before-nix")
    end = text.index("  - id: bump-flake-input")
    (root / RUNBOOK_001).write_text(text[:start] + text[end:])
    said = problems_of(root, package)
    assert any(
        "$.steps: lists 22 of the run's 23 steps: step 2, 'Memory gate before Nix evaluates "
        "and builds' (memory.headroom_gated), is missing" in p
        for p in said
    ), said
