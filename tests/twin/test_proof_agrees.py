"""Issue 27, then 42: one judgement of a built system, checked against the Python model.

Whether a built NixOS system (a toplevel) holds every managed setting in scope is
judged on the host by the prove step's program (``system_lacks``, remedy/host/
system_lacks.sh), for the deploy and the manual script alike. The Python model of the
same judgement (the BuiltService fact, then ``Proof.missing``) stays as the tests'
oracle: both judge the same real systems of a twin, for converge's scope
(``desired.ALL``): the seed's system (hermes); systems built at the seed from earlier
or later tt-stack commits (#34: the parser only; #44: every fix but the host's own
hugepages; Phase 2a on by default), each lacking other settings; and the system a
converge proved and switched to, which holds every one. They agree when the program
names the same settings, in scope order, as the model.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from pyinfra.context import ctx_host, ctx_state

from facts.serving import BuiltService
from remedy import host as host_programs
from remedy import session
from remedy.core.config import desired
from remedy.core.config import host_data as host_data_mod
from remedy.core.programs import commands
from remedy.core.run.plan import Proof
from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, as_owner, run_deploy

pytestmark = [pytest.mark.twin, pytest.mark.nix_cli]

SCOPE = desired.ALL  # deploys/converge.py's scope
TOPLEVEL_ATTR = f'{fixtures.NIXOS_DIR}#nixosConfigurations."{fixtures.FLAKE_HOST}"'
TOPLEVEL_ATTR += ".config.system.build.toplevel"


def shell_judgement(twin: machine.Twin, s, toplevel: str) -> list[str]:
    """What the prove step's own judgement (system_lacks, after the host library) says
    TOPLEVEL lacks, run by root's sh on the twin."""
    program = (
        host_programs.text("lib.sh")
        + host_programs.text("system_lacks.sh")
        + 'shift "$nargs"\nsystem_lacks "$1" "$2" "$3"'
    )
    proofs = "\n".join(x[len("prove:") :] for x in desired.proof_items(s, proved_scope(twin)))
    proc = subprocess.run(
        [*twin.ssh_argv(), "sh", "-c", _q(program), "remedy-test", "apply", "--",
         _q(toplevel), _q(s.unit), _q(proofs)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [x for x in proc.stdout.strip().split("; ") if x]


def _q(word: str) -> str:
    import shlex

    return shlex.quote(word)


# -- the model (the tests' oracle) -------------------------------------------


# -- the deploy's judgement ---------------------------------------------------


def model_judgement(twin: machine.Twin, toplevel: str):
    """(the labels the Python model says TOPLEVEL lacks, in scope order; the host data
    it judged with): the BuiltService fact read through a pyinfra connection to the
    twin, then ``Proof.missing`` with the host data inventory/twin.py gives it."""
    inventory = os.path.join(PROJECT, "inventory", "twin.py")
    with session.connected(inventory, limit=[twin.name]) as (state, hosts, failed):
        assert not failed, failed
        (host,) = hosts
        s = host_data_mod.from_host_data(host.name, host.data)
        with ctx_state.use(state), ctx_host.use(host):
            service = host.get_fact(BuiltService, toplevel=toplevel, unit=s.unit)
    script = service.script
    proof = Proof(
        toplevel, script.path if script else None,
        script.tool_call_parser if script else "none", dict(service.environment),
        tuple(script.flags) if script else (), service.kernel_params,
        getattr(service, "sysctl", None), getattr(service, "properties", None),
        getattr(service, "conditions", None),
    )  # fmt: skip
    missing = proof.missing(s, proved_scope(twin))
    return [desired.BY_KEY[k].label for k in proved_scope(twin)
            if any(m.startswith(desired.BY_KEY[k].label + " ") for m in missing)], s  # fmt: skip


def proved_scope(twin: machine.Twin) -> tuple[str, ...]:
    """Converge's scope, as the plan proves it here: the managed file's settings only
    where the checkout imports remedy.nix (the twin's does: asserted)."""
    importer = twin.exec(
        ["grep", "-rlF", "--include=*.nix", desired.MANAGED_IMPORT, fixtures.NIXOS_DIR],
        check=False,
    ).stdout
    assert importer.strip(), "the twin's configuration does not import ./remedy.nix"
    return tuple(k for k in SCOPE if desired.BY_KEY[k].provable)


# -- both ---------------------------------------------------------------------


def judge(twin: machine.Twin, toplevel: str) -> dict:
    """Both judgements of TOPLEVEL on TWIN."""
    model, s = model_judgement(twin, toplevel)
    return {"program": shell_judgement(twin, s, toplevel), "model": model}


def assert_agree(found: dict, lacking: list[str]) -> None:
    """Both say the same: the system lacks LACKING (in scope order; []: nothing)."""
    said = json.dumps(found, indent=1)
    assert found["model"] == lacking, said
    assert found["program"] == lacking, said


def current_system(twin: machine.Twin) -> str:
    return twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip()


def build_at(twin: machine.Twin, rev: str) -> str:
    """The toplevel of the twin's checkout with tt-stack at REV (the lock untouched)."""
    url = f"git+file://{fixtures.TT_STACK_DIR}?rev={rev}"
    out = as_owner(
        twin, "nix", "--extra-experimental-features", "nix-command flakes", "build",
        "--no-link", "--json", "--no-write-lock-file", "--override-input", "tt-stack", url,
        TOPLEVEL_ATTR,
    ).stdout  # fmt: skip
    return json.loads(out)[0]["outputs"]["out"]


def tt_stack_rev(twin: machine.Twin, subject: str) -> str:
    """The tt-stack commit whose message holds SUBJECT (exactly one)."""
    out = as_owner(
        twin, "git", "-C", fixtures.TT_STACK_DIR, "log", "--format=%H", "-F",
        f"--grep={subject}",
    ).stdout.split()  # fmt: skip
    assert len(out) == 1, f"tt-stack has {len(out)} commits with {subject!r}: {out}"
    return out[0]


def test_systems_that_lack_settings_lack_the_same_ones_for_program_and_model(twin):
    """At the seed state (no remedy.nix yet; the host's own 2 hugepages per card):
    - the seed's system (hermes) lacks the parser first, for both;
    - a build at tt-stack's #34 (the parser fixed, no SDPA streaming or merge guard)
      lacks SDPA streaming first, and the deploy names the rest;
    - a build at #44 (every tt-stack fix) lacks only the hugepage pool;
    - a build at a commit that turns Phase 2a on by default lacks the hugepage pool
      first, and the deploy names Phase 2a as well."""
    seed = current_system(twin)
    assert_agree(judge(twin, seed), [
        "tool-call parser", "QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD",
        "hugepage pool", "memory guard",
    ])  # fmt: skip

    older = build_at(twin, tt_stack_rev(twin, "tool-call parser (#34)"))
    assert older != seed
    assert_agree(
        judge(twin, older),
        ["QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD", "hugepage pool", "memory guard"],
    )

    fixed = build_at(twin, tt_stack_rev(twin, "(#44)"))
    assert_agree(judge(twin, fixed), ["hugepage pool", "memory guard"])

    phase2a = machine.commit_as_owner(
        twin, fixtures.TT_STACK_DIR, fixtures.phase2a_default_commit()
    )
    assert_agree(
        judge(twin, build_at(twin, phase2a)),
        ["hugepage pool", "Phase 2a options", "memory guard"],
    )


def test_the_system_converge_proved_and_switched_to_holds_everything_for_both(twin):  # noqa
    proc = run_deploy(twin, "converge", restart="now")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    now = current_system(twin)
    profile = twin.exec(["readlink", "-f", commands.SYSTEM_PROFILE]).stdout.strip()
    assert now == profile, (now, profile)
    assert_agree(judge(twin, now), [])
