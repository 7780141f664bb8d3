"""Issue 27: the deploy and the manual script judge a built system the same way.

Whether a built NixOS system (a toplevel) holds every managed setting in scope is
judged twice: by the deploy in Python (``nix_prove._not_proven``: the BuiltService
fact, then ``Proof.missing``) and by the manual script in shell (its ``system_holds``,
made of each setting's ``check_sh``). Here both judge the same real systems of a twin,
for converge's scope (``desired.ALL``): the seed's system (hermes); systems built at
the seed from earlier or later tt-stack commits (#34: the parser only; #44: every fix
but the host's own hugepages; Phase 2a on by default), each lacking a different first
setting; and the system a converge proved and switched to, which holds every one.
The shell stops at the first setting it lacks, so the two agree when the shell prints
the first one the deploy names (settings are judged in scope order on both sides) and
exits 0 exactly when the deploy proves the system. Phase 2a alone (with the hugepage
pool held) needs remedy.nix, which forces it off: no cheap fixture gives that system.

The shell side runs the script's own text: the functions ``system_holds`` calls and
the line that decides whether the managed file is imported, cut from the script
``remedy runbooks show 006 --manual`` renders for the twin, never written again here.
The Python side runs the deploy's own function, with the fact read through pyinfra
as the deploy reads it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess

import pytest
from pyinfra.context import ctx_host, ctx_state

from remedy import session
from remedy.core.config import desired
from remedy.core.config import host_data as host_data_mod
from remedy.core.programs import commands
from remedy.operations import nix_prove
from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, as_owner, run_deploy

pytestmark = [pytest.mark.twin, pytest.mark.nix_cli]

SCOPE = desired.ALL  # deploys/converge.py's scope; runbook 006 renders it too
RUNBOOK = "006"  # converge: every managed setting
# What system_holds calls, and the script's decision whether remedy.nix is imported
# (system_holds judges the managed file's settings only when it is).
NEEDED = ("exec_path", "flags_script", "system_holds")
TOPLEVEL_ATTR = f'{fixtures.NIXOS_DIR}#nixosConfigurations."{fixtures.FLAKE_HOST}"'
TOPLEVEL_ATTR += ".config.system.build.toplevel"


# -- the manual script's judgement -------------------------------------------


def manual_script(twin: machine.Twin) -> str:
    proc = subprocess.run(
        ["remedy", "runbooks", "show", RUNBOOK, "--manual", "--inventory",
         "inventory/twin.py", "--host", twin.name],
        capture_output=True, text=True, cwd=PROJECT, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def shell_function(script: str, name: str) -> str:
    """The definition of shell function NAME in SCRIPT, as written there: one line,
    or from ``NAME() {`` / ``NAME() (`` to the ``}`` / ``)`` that closes it at the
    start of a line."""
    lines = script.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(f"{name}() ")]
    assert len(starts) == 1, f"the manual script defines {name}() {len(starts)} times"
    first = lines[starts[0]]
    opener = first[len(name) + 3 :].lstrip()[:1]
    closer = {"{": "}", "(": ")"}[opener]
    if first.rstrip().endswith(closer) and first.count(opener) == first.count(closer):
        return first
    for end in range(starts[0] + 1, len(lines)):
        if lines[end] == closer:
            return "\n".join(lines[starts[0] : end + 1])
    raise AssertionError(f"{name}() in the manual script is not closed by {closer!r}")


def managed_line(script: str) -> str:
    """The script's line that sets $managed (whether the checkout imports remedy.nix)."""
    found = [line for line in script.splitlines() if line.startswith("managed=")]
    assert len(found) == 1, f"the manual script sets managed= on {len(found)} lines"
    return found[0]


def programs_of(script: str, text: str) -> list[str]:
    """The script's here-document definitions of the programs TEXT names by variable
    (``manual_flow.word`` hoists long programs to the top)."""
    out = []
    for name in sorted(set(re.findall(r"\$\{?(remedy_program_\d+)", text))):
        m = re.search(rf"(?ms)^{name}=\$\(cat <<'(\w+)'\n.*?^\1\n\)$", script)
        assert m, f"the manual script uses ${name} but does not define it"
        out.append(m.group(0))
    return out


def holds_program(script: str) -> str:
    """A POSIX sh program, cut from SCRIPT, that judges the toplevel given as $1 as
    the script does: ``system_holds`` under the script's ``set -eu``."""
    parts = [shell_function(script, name) for name in NEEDED]
    parts = [*programs_of(script, "\n".join(parts)), *parts]
    return "\n".join(
        [
            "set -eu",
            *parts,
            managed_line(script),
            'echo "managed=$managed" >&2',
            'system_holds "$1"',
        ]
    )


def shell_judgement(twin: machine.Twin, program: str, toplevel: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of PROGRAM run by root's sh on the twin for TOPLEVEL."""
    proc = subprocess.run(
        [*twin.ssh_argv(), "sh", "-s", "--", shlex.quote(toplevel)],
        input=program, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


# -- the deploy's judgement ---------------------------------------------------


def deploy_judgement(twin: machine.Twin, toplevel: str):
    """(what ``nix.fix_proven`` says of TOPLEVEL for converge's scope, None when it
    holds every setting; the host data it judged with): its own ``_not_proven``, the
    BuiltService fact read through a pyinfra connection to the twin, the host data
    inventory/twin.py gives it."""
    inventory = os.path.join(PROJECT, "inventory", "twin.py")
    with session.connected(inventory, limit=[twin.name]) as (state, hosts, failed):
        assert not failed, failed
        (host,) = hosts
        s = host_data_mod.from_host_data(host.name, host.data)
        build = nix_prove.Build(
            journal_path="", run_id="test-proof-agrees", owner=fixtures.OWNER, home=None,
            host_data=s, prove=list(proved_scope(twin)), nix_label="", new_derivation_cli=True,
            systemd_run=True, current_system=None,
        )  # fmt: skip
        with ctx_state.use(state), ctx_host.use(host):
            return nix_prove._not_proven(build, toplevel, "test"), s


def proved_scope(twin: machine.Twin) -> tuple[str, ...]:
    """Converge's scope, as the plan proves it here: the managed file's settings only
    where the checkout imports remedy.nix (the twin's does: asserted)."""
    importer = twin.exec(
        ["grep", "-rlF", "--include=*.nix", desired.MANAGED_IMPORT, fixtures.NIXOS_DIR],
        check=False,
    ).stdout
    assert importer.strip(), "the twin's configuration does not import ./remedy.nix"
    return tuple(k for k in SCOPE if desired.BY_KEY[k].provable)


def labels_in(why: str | None, s) -> list[str]:
    """The managed settings the deploy's refusal WHY names as missing, in its order."""
    if why is None:
        return []
    found = []
    for key in SCOPE:
        m = desired.BY_KEY[key]
        at = why.find(f"{m.label} {m.desired(s)} (it has ")
        if at >= 0:
            found.append((at, m.label))
    assert found or not why, f"the deploy refused for a reason that names no setting: {why}"
    return [label for _, label in sorted(found)]


# -- both ---------------------------------------------------------------------


def judge(twin: machine.Twin, toplevel: str) -> dict:
    """Both judgements of TOPLEVEL on TWIN."""
    code, out, err = shell_judgement(twin, holds_program(manual_script(twin)), toplevel)
    assert "managed=yes" in err, f"the script's managed= line did not find the import: {err}"
    why, s = deploy_judgement(twin, toplevel)
    return {"shell_exit": code, "shell_lacks": out, "shell_err": err, "deploy": why,
            "deploy_lacks": labels_in(why, s)}  # fmt: skip


def assert_agree(found: dict, first_lacking: str | None) -> None:
    """Both say the same: FIRST_LACKING is the first setting (in scope order) the
    system lacks (None: it holds every one)."""
    said = json.dumps(found, indent=1)
    if first_lacking is None:
        assert found["deploy"] is None, said
        assert found["shell_exit"] == 0 and found["shell_lacks"] == "", said
        return
    assert found["deploy_lacks"][:1] == [first_lacking], said
    assert found["shell_exit"] == 1 and found["shell_lacks"] == first_lacking, said


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


def test_systems_that_lack_a_setting_lack_the_same_first_one_for_both(twin):
    """At the seed state (no remedy.nix yet; the host's own 2 hugepages per card):
    - the seed's system (hermes) lacks the parser first, for both;
    - a build at tt-stack's #34 (the parser fixed, no SDPA streaming or merge guard)
      lacks SDPA streaming first, and the deploy names the rest;
    - a build at #44 (every tt-stack fix) lacks only the hugepage pool;
    - a build at a commit that turns Phase 2a on by default lacks the hugepage pool
      first, and the deploy names Phase 2a as well."""
    seed = current_system(twin)
    found = judge(twin, seed)
    assert_agree(found, "tool-call parser")
    assert "(it has hermes)" in found["deploy"], found["deploy"]

    older = build_at(twin, tt_stack_rev(twin, "tool-call parser (#34)"))
    assert older != seed
    found = judge(twin, older)
    assert_agree(found, "QWEN36_SDPA_STREAMING")
    assert found["deploy_lacks"] == [
        "QWEN36_SDPA_STREAMING", "QWEN36_MERGE_BATCH_GUARD", "hugepage pool"
    ], found  # fmt: skip

    fixed = build_at(twin, tt_stack_rev(twin, "(#44)"))
    found = judge(twin, fixed)
    assert_agree(found, "hugepage pool")
    assert found["deploy_lacks"] == ["hugepage pool"], found

    phase2a = machine.commit_as_owner(
        twin, fixtures.TT_STACK_DIR, fixtures.phase2a_default_commit()
    )
    found = judge(twin, build_at(twin, phase2a))
    assert_agree(found, "hugepage pool")
    assert found["deploy_lacks"] == ["hugepage pool", "Phase 2a options"], found


def test_the_system_converge_proved_and_switched_to_holds_everything_for_both(twin):
    proc = run_deploy(twin, "converge", restart="now")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    now = current_system(twin)
    profile = twin.exec(["readlink", "-f", commands.SYSTEM_PROFILE]).stdout.strip()
    assert now == profile, (now, profile)
    assert_agree(judge(twin, now), None)
