"""Record real fact output from twins into pyinfra-testing fixtures.

    python -m tests.facts.record          # as root; boots and removes its own twins

For each state of the incident (fresh, the seed's emergency override, the
service stopped, after a durable rebuild, ...) it runs each fact's command over
SSH on a twin and writes ``tests/facts/<module>.<Fact>/<case>.json`` with the
command, the raw output and the value the parser gives. Review the diff of the
``fact`` values before committing: they are the expectations.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pyinfra_testing.facts import _json_default, _to_jsonable
from pyinfra_testing.util import get_command_string

import facts.commands
import facts.memory
import facts.nix
import facts.serving
from remedy.core.programs import commands
from remedy.core.readings import nix as nix_core
from remedy.twin import fixtures, machine

HERE = Path(__file__).parent


def run_fact(twin, fact_cls, **kwargs) -> list[str]:
    command = get_command_string(fact_cls().command(**kwargs))
    # ssh hands its command line to the remote shell, as pyinfra does with `sh -c`.
    proc = subprocess.run([*twin.ssh_argv(), command], capture_output=True, text=True, timeout=60)
    return proc.stdout.splitlines()


def record(twin, module: str, fact_cls, case: str, expect_error: bool = False, **kwargs):
    lines = run_fact(twin, fact_cls, **kwargs)
    data = {
        "arg": kwargs,
        "command": get_command_string(fact_cls().command(**kwargs)),
        "output": lines,
    }
    if expect_error:
        folder = HERE / "errors" / f"{module}.{fact_cls.__name__}"
    else:
        data["fact"] = json.loads(
            json.dumps(_to_jsonable(fact_cls().process(lines)), default=_json_default)
        )
        folder = HERE / f"{module}.{fact_cls.__name__}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{case}.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"recorded {folder.name}/{case}")


def url(twin):
    return {"server_url": twin.server_url}


def as_ops(*argv: str) -> list[str]:
    """ARGV as the checkout's owner: root's git and Nix refuse a person's repo."""
    return ["runuser", "-u", "ops", "--", *argv]


def nix(*argv: str) -> list[str]:
    return ["nix", "--extra-experimental-features", "nix-command flakes", *argv]


def build_toplevel(twin) -> str:
    out = twin.exec(
        as_ops(
            *nix(
                "build",
                "--no-link",
                "--json",
                '/etc/nixos#nixosConfigurations."cfx-llm2".config.system.build.toplevel',
            )
        )
    ).stdout
    return json.loads(out)[0]["outputs"]["out"]


TOPLEVEL_ATTR = '/etc/nixos#nixosConfigurations."cfx-llm2".config.system.build.toplevel'


def record_raw(name: str, text: str) -> None:
    """Raw output of a command the engine runs itself (not a fact): tests/facts/raw/."""
    folder = HERE / "raw"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    print(f"recorded raw/{name}")


def record_nix_version(suite: str) -> None:
    """NixInfo as each twin base reports it, and what its `nix build --dry-run` and
    `nix derivation show` print for a bump that only links and one that compiles."""
    name = f"rec-nix-{suite}"
    twin = machine.up(name, suite=suite, progress=print)
    try:
        version = twin.exec(["nix", "--version"]).stdout.split()[-1]
        tag = "nix_" + "_".join(version.split(".")[:2])
        record(twin, "nix", facts.nix.NixInfo, tag)
        info = nix_core.parse_nix_version([f"nix (Nix) {version}"])
        bump = commands.update_input(info.update_input_argv, "/etc/nixos", "tt-stack")
        twin.exec(as_ops(*bump))
        dry = twin.exec(as_ops(*nix("build", "--dry-run", "--no-link", TOPLEVEL_ATTR)))
        record_raw(f"{tag}.dry_run_links.txt", dry.stderr + dry.stdout)
        machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
        twin.exec(as_ops(*bump))
        dry = twin.exec(as_ops(*nix("build", "--dry-run", "--no-link", TOPLEVEL_ATTR)))
        record_raw(f"{tag}.dry_run_compiles.txt", dry.stderr + dry.stdout)
        drvs = nix_core.parse_dry_run((dry.stdout + dry.stderr).splitlines()).built
        show = commands.show_derivations(nix_core.derivation_show_is_new(info), drvs)
        record_raw(f"{tag}.derivation_show.json", twin.exec(as_ops(*show)).stdout)
        record_strict_shell(twin, info, tag, bump)
        # what a switch to it would change: the fork's new version (built only now: the
        # dry runs above must still see it as a compile)
        heavy = build_toplevel(twin)
        current = twin.exec(["readlink", "-f", "/run/current-system"]).stdout.strip()
        diff = twin.exec(commands.diff_closures(current, heavy))
        record_raw(f"{tag}.diff_closures_heavy.txt", diff.stdout + diff.stderr)
        record_evaluation_errors(twin, tag)
        record_definitions(twin, tag)
        record_flake_checks(twin, tag, bump)
    finally:
        machine.down(name, progress=print)


def record_strict_shell(twin, info, tag: str, bump: list[str]) -> None:
    """The start script as writeShellApplication makes it (its checkPhase runs the
    fixture's shellcheck-minimal stand-in), on top of a vllm-tt change: no
    preferLocalBuild; what `nix derivation show` prints of what the bump builds."""
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.strict_shell_commit())
    twin.exec(as_ops(*bump))
    dry = twin.exec(as_ops(*nix("build", "--dry-run", "--no-link", TOPLEVEL_ATTR)))
    drvs = nix_core.parse_dry_run((dry.stdout + dry.stderr).splitlines()).built
    show = commands.show_derivations(nix_core.derivation_show_is_new(info), drvs)
    record_raw(f"{tag}.derivation_show_strict_shell.json", twin.exec(as_ops(*show)).stdout)


def record_strict_shell_only(suite: str) -> None:
    """record_strict_shell on a fresh twin of SUITE, after the vllm-tt change
    (``python -m tests.facts.record --strict-shell``)."""
    name = f"rec-ss-{suite}"
    twin = machine.up(name, suite=suite, progress=print)
    try:
        version = twin.exec(["nix", "--version"]).stdout.split()[-1]
        tag = "nix_" + "_".join(version.split(".")[:2])
        info = nix_core.parse_nix_version([f"nix (Nix) {version}"])
        bump = commands.update_input(info.update_input_argv, "/etc/nixos", "tt-stack")
        machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.heavy_package_commit())
        record_strict_shell(twin, info, tag, bump)
    finally:
        machine.down(name, progress=print)


EXTRA_ENV = "/etc/tenstorrent-serving/extra.env"
EXTRA_ENV_SETTING = (
    "issue: tt-stack#72\nkind: unit-property\nname: EnvironmentFile\n"
    f"value: {EXTRA_ENV}\nurgency: now\n"
)


def record_list_property_and_inhibitors() -> None:
    """Issue 44 (``python -m tests.facts.record --list-property``): a host converged with
    a setting that adds an EnvironmentFile to the serving module's own (the process's
    unit has both: HostSnapshot list_property); then its owner lists a switch inhibitor
    and makes that the boot default with `nixos-rebuild boot` (the switch section's
    ``inhibitors`` lines: raw/switch.last_inhibitors.txt)."""
    import os
    import tempfile

    from facts import _remote
    from remedy.core.config import data_settings, desired
    from tests.conftest import PROJECT, twin_inventory

    # the snapshot reads the properties the settings name: their directory is set before
    # remedy's modules load (REMEDY_SETTINGS_DIR holding EXTRA_ENV_SETTING only)
    settings = data_settings.directory()
    assert (settings / "extra-env-file.yaml").read_text() == EXTRA_ENV_SETTING, settings
    assert [d.name for d in desired.DATA] == ["EnvironmentFile"], desired.DATA
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "REMEDY_AUDIT_LOG": str(Path(tmp) / "audit.jsonl")}
        name = "rec-list-prop"
        twin = machine.up(name, progress=print)
        try:
            twin.exec(["mkdir", "-p", fixtures.ENV_FILE.rsplit("/", 1)[0]])
            twin.exec(["tee", fixtures.ENV_FILE], input="HF_HOME=/var/lib/hf\n")
            twin.exec(["tee", EXTRA_ENV], input="VLLM_EXTRA=1\n")
            machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.env_file_commit())
            inventory = twin_inventory(Path(tmp) / "inventory.py", twin, allow_local_build=True)
            done = subprocess.run(
                ["remedy", "converge", str(inventory), "--restart", "now"],
                capture_output=True, text=True, cwd=PROJECT, env=env, timeout=1800,
            )  # fmt: skip
            assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
            # raw: its command names the setting's property, which the fact fixtures'
            # replay (the project's settings) does not read
            record_raw("snapshot.list_property.json", json.dumps({
                "command": get_command_string(facts.serving.HostSnapshot().command(
                    server_url=twin.server_url, managed_file=MANAGED)),
                "output": run_fact(twin, facts.serving.HostSnapshot,
                                   server_url=twin.server_url, managed_file=MANAGED),
            }, indent=2, sort_keys=True) + "\n")  # fmt: skip
            from tests.twin.test_switch_upstream import commit_inhibitor, rebuild

            commit_inhibitor(twin)
            booted = rebuild(twin, "boot")
            assert booted.returncode == 0, booted.stdout[-3000:]
            record_raw("switch.last_inhibitors.txt",
                       twin.exec(["sh", "-c", _remote.SWITCH]).stdout)  # fmt: skip
        finally:
            machine.down(name, progress=print)


MANAGED = "hosts/cfx-llm2/remedy.nix"
CHECK = "tt-stack#checks.x86_64-linux.tenstorrent-serving"


def record_flake_checks(twin, tag: str, bump: list[str]) -> None:
    """What Nix prints for a flake check that tt-stack does not have, and for one whose
    builder fails (Phase 2a on by default)."""
    absent = twin.exec(as_ops(*commands.flake_check("/etc/nixos", CHECK, dry=True)), check=False)
    assert absent.returncode != 0, "the check exists before checked_commit"
    record_raw(f"{tag}.check_absent.txt", absent.stderr + absent.stdout)
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.checked_commit())
    machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.phase2a_default_commit())
    twin.exec(as_ops(*bump))
    failed = twin.exec(as_ops(*commands.flake_check("/etc/nixos", CHECK, False)), check=False)
    assert failed.returncode != 0, "the check passed with Phase 2a on by default"
    record_raw(f"{tag}.check_failed.txt", failed.stderr + failed.stdout)


def record_evaluation_errors(twin, tag: str) -> None:
    """What Nix prints when remedy's file sets an option nobody declares, and when it sets
    one beside the host's own value without lib.mkForce (NixOS's rules, in the stand-in)."""
    from remedy.core.config import desired
    from remedy.core.config.host_data import from_host_data

    text = desired.managed_nix(from_host_data("cfx-llm2", {}))
    for case, wrong in (
        ("option_does_not_exist", text.replace(".deviceResident =", ".devicResident =")),
        ("option_conflict", text.replace("lib.mkForce 1;", "1;")),
    ):
        twin.exec(as_ops("tee", f"/etc/nixos/{MANAGED}"), input=wrong)
        twin.exec(as_ops("git", "-C", "/etc/nixos", "add", MANAGED))
        dry = twin.exec(as_ops(*nix("build", "--dry-run", "--no-link", TOPLEVEL_ATTR)), check=False)
        assert dry.returncode != 0, f"{case}: the configuration evaluated"
        record_raw(f"{tag}.{case}.txt", dry.stderr + dry.stdout)
    twin.exec(as_ops("git", "-C", "/etc/nixos", "rm", "-qf", MANAGED))


PROFILE = "/nix/var/nix/profiles/system"


def record_switch_outcomes(twin, old: str, new: str) -> None:
    """What a switch in nixos-rebuild-ng's transient unit prints when a unit fails
    (exit 4), and what systemd's journal of that unit then says (the snapshot's
    nix.switch section), after exit 4 and after exit 0."""
    from facts import _remote

    twin.exec(["mkdir", "-p", "/etc/nixos-twin"])
    twin.exec(["tee", "/etc/nixos-twin/fail-units"], input="tenstorrent-serving.service\n")
    ran = twin.exec(commands.switch(old, "test", True), check=False)
    record_raw("switch.exit_4.txt", ran.stdout + ran.stderr)
    record_raw("switch.last_exit_4.txt", twin.exec(["sh", "-c", _remote.SWITCH]).stdout)
    twin.exec(["rm", "/etc/nixos-twin/fail-units"])
    twin.exec(commands.switch(new, "test", True))
    record_raw("switch.last_exit_0.txt", twin.exec(["sh", "-c", _remote.SWITCH]).stdout)
    machine.wait_serving(twin)


def record_definitions(twin, case: str, **options: str) -> None:
    from remedy.core.config.host_data import MANAGED_OPTIONS

    record(
        twin,
        "nix",
        facts.nix.OptionDefinitions,
        case,
        flake_dir="/etc/nixos",
        flake_host="cfx-llm2",
        managed_file=MANAGED,
        managed_options={**MANAGED_OPTIONS, **options},
        owner="ops",
        home="/home/ops",
    )


def record_options_record(twin) -> None:
    """Issue 28, item 8: an evaluation that keeps its answer on the host (the command's
    ``@@remedy:recorded`` line), then the snapshot that reads that record back."""
    from remedy.core.config.host_data import MANAGED_OPTIONS

    record(
        twin,
        "nix",
        facts.nix.OptionDefinitions,
        "recorded",
        flake_dir="/etc/nixos",
        flake_host="cfx-llm2",
        managed_file=MANAGED,
        managed_options=dict(MANAGED_OPTIONS),
        owner="ops",
        home="/home/ops",
        record_key="0" * 64,
    )
    record(
        twin,
        "serving",
        facts.serving.HostSnapshot,
        "options_recorded",
        server_url=twin.server_url,
        managed_file=MANAGED,
    )
    twin.exec(["rm", "-f", "/var/lib/remedy/options.record"])


def record_state(twin, case: str):
    record(twin, "serving", facts.serving.ServingUnit, case)
    record(twin, "serving", facts.serving.VolatileState, case)
    record(twin, "serving", facts.serving.ToolCallProbe, case, url=twin.server_url)
    record(
        twin,
        "serving",
        facts.serving.HostSnapshot,
        case,
        server_url=twin.server_url,
        managed_file="hosts/cfx-llm2/remedy.nix",
    )
    record(twin, "nix", facts.nix.SystemGenerations, case)
    record(twin, "nix", facts.nix.FlakeInput, case)


DEBUG_DROPIN = "/run/systemd/system/tenstorrent-serving.service.d/zz-debug.conf"
SSH_DROPIN = "/run/systemd/system/ssh.service.d/zz-debug.conf"


def record_runtime_state(twin):
    """What an on-call person leaves in /run: a drop-in for the server (and a restart), one
    for another unit, a unit enabled at runtime, a kernel parameter; then it is undone."""
    twin.exec(["mkdir", "-p", DEBUG_DROPIN.rsplit("/", 1)[0], SSH_DROPIN.rsplit("/", 1)[0]])
    twin.exec(["tee", DEBUG_DROPIN], input="[Service]\nEnvironment=VLLM_LOGGING_LEVEL=DEBUG\n")
    twin.exec(["tee", SSH_DROPIN], input="[Service]\nEnvironment=SSHD_OPTS=-d\n")
    twin.exec(["systemctl", "enable", "--runtime", "twin-hugepages.path"])
    cmdline = "/run/twin-kernel/cmdline"
    before = twin.exec(["cat", cmdline]).stdout
    twin.exec(["tee", cmdline], input=before.rstrip("\n") + " mitigations=off\n")
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", "tenstorrent-serving.service"])
    machine.wait_serving(twin)
    record(
        twin,
        "serving",
        facts.serving.HostSnapshot,
        "runtime_debug",
        server_url=twin.server_url,
        managed_file="hosts/cfx-llm2/remedy.nix",
    )
    record(twin, "serving", facts.serving.VolatileState, "runtime_debug")
    twin.exec(["tee", cmdline], input=before)
    twin.exec(["systemctl", "disable", "--runtime", "twin-hugepages.path"])
    twin.exec(["rm", "-rf", DEBUG_DROPIN, SSH_DROPIN.rsplit("/", 1)[0]])
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", "tenstorrent-serving.service"])
    machine.wait_serving(twin)


ODD_DIR = "/run/systemd/system/tenstorrent-serving.service.d"
ODD_NAMES = r"""mkdir -p "$1"
nl=$(printf '\nx'); nl=${nl%x}
printf '[Service]\nEnvironment=X=1\n' > "$1/a${nl}.bashrc"
printf '[Service]\nEnvironment=Y=1\n' > "$1/zz-$(printf '\377').conf"
systemctl daemon-reload
"""


def record_odd_dropin_names(twin):
    """Issue 43 G1: a drop-in named with a newline (``a\\n.bashrc``) and one whose name is
    not UTF-8, loaded by a daemon-reload (then every ``systemctl show`` of the unit fails:
    the unit is read over busctl); then they are removed."""
    twin.exec(["sh", "-c", ODD_NAMES, "sh", ODD_DIR])
    record(
        twin,
        "serving",
        facts.serving.HostSnapshot,
        "odd_dropin_names",
        server_url=twin.server_url,
        managed_file="hosts/cfx-llm2/remedy.nix",
    )
    twin.exec(["sh", "-c", 'rm -f "$1"/a?.bashrc "$1"/zz-?.conf && systemctl daemon-reload',
               "sh", ODD_DIR])  # fmt: skip


GUARD_DROPIN = "/run/systemd/system/tenstorrent-serving.service.d/zz-guard-standin.conf"
# Stands in for remedy's memory guard (issue 46 item 1) until it lands: an ExecStartPre
# of the serving unit that writes one journal line per start in the guard's contract,
# "remedy-memory-guard: <allowed|refused|forced>: … [MemAvailable_kB=N threshold_kB=N]".
# Its figures fall 1.5 GiB a start from 9 GiB (the twin's own memory does not leak);
# the threshold is min_mem_available_gb 4 in kB.
GUARD_STANDIN = r"""#!/bin/sh
f=/run/guard-standin.kb
n=$(cat "$f" 2>/dev/null || echo 9437184)
echo "remedy-memory-guard: allowed: MemAvailable $n kB, threshold 3906250 kB" \
  "(min_mem_available_gb 4) [MemAvailable_kB=$n threshold_kB=3906250]"
echo $((n - 1572864)) >"$f"
"""


def record_guard_standin(twin, starts: int = 4):
    """This boot's journal of the serving unit with a guard line at each of STARTS
    starts (GUARD_STANDIN), read by the snapshot; then the stand-in is removed."""
    twin.exec(["install", "-D", "-m", "0755", "/dev/stdin", "/run/guard-standin.sh"],
              input=GUARD_STANDIN)  # fmt: skip
    twin.exec(["install", "-D", "-m", "0644", "/dev/stdin", GUARD_DROPIN],
              input="[Service]\nExecStartPre=/bin/sh /run/guard-standin.sh\n")  # fmt: skip
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "reset-failed", "tenstorrent-serving.service"], check=False)
    for _ in range(starts):
        twin.exec(["systemctl", "restart", "tenstorrent-serving.service"])
        machine.wait_serving(twin)
    record(
        twin,
        "serving",
        facts.serving.HostSnapshot,
        "guard_standin",
        server_url=twin.server_url,
        managed_file="hosts/cfx-llm2/remedy.nix",
    )
    twin.exec(["rm", "-f", GUARD_DROPIN, "/run/guard-standin.sh", "/run/guard-standin.kb"])
    twin.exec(["systemctl", "daemon-reload"])


FOLLOWS_FLAKE = """{
  inputs.tt-stack.url = "git+file:///srv/git/tt-stack";
  inputs.upstream.url = "path:/tmp/inner";
  inputs.stack.follows = "upstream/tt-stack";
  outputs = { self, ... }: { };
}
"""
INNER_FLAKE = """{
  inputs.tt-stack.url = "git+file:///srv/git/tt-stack?rev=@REV@";
  outputs = { self, ... }: { };
}
"""


def reparse() -> int:
    """Recompute every ``fact`` (and ``command``) from the recorded output.

    Only for parser changes and command changes that do not change what the
    remote side prints; anything else needs a new recording.
    """
    modules = {
        "serving": facts.serving, "memory": facts.memory, "nix": facts.nix,
        "commands": facts.commands,
    }  # fmt: skip
    for path in sorted(HERE.glob("*.*/*.json")):
        module, fact_name = path.parent.name.split(".")
        data = json.loads(path.read_text())
        fact_cls = getattr(modules[module], fact_name)
        data["command"] = get_command_string(fact_cls().command(**data["arg"]))
        data["fact"] = json.loads(
            json.dumps(_to_jsonable(fact_cls().process(data["output"])), default=_json_default)
        )
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return 0


def record_command_answers(twin) -> None:
    """What a step's command answered (facts.commands): a read that succeeds, one that
    fails, bytes that are not UTF-8; a recorded command's answer, and a record that is
    not there (the connection dropped before the command wrote it)."""
    from remedy.core.programs import record as record_core

    read = facts.commands.CommandRead
    record(twin, "commands", read, "git_head", argv=as_ops("git", "-C", "/etc/nixos",
                                                            "rev-parse", "HEAD"))  # fmt: skip
    record(twin, "commands", read, "git_fails", argv=as_ops("git", "-C", "/nope", "status"))
    record(twin, "commands", read, "not_utf8", argv=["printf", "a\\377b\\n"])
    path = record_core.record_path("rec:1:1")
    twin.exec(record_core.recorded_argv(path, ["sh", "-c", "echo out; echo err >&2; exit 3"]))
    record(twin, "commands", facts.commands.CommandRecord, "exit_3", path=path)
    record(twin, "commands", facts.commands.CommandRecord, "missing", path=path)


def main() -> int:
    if "--reparse" in sys.argv:
        return reparse()
    if "--guard" in sys.argv:  # only the memory guard's stand-in lines (issue 46 item 2)
        twin = machine.up("rec-guard", progress=print)
        try:
            record_guard_standin(twin)
        finally:
            machine.down("rec-guard", progress=print)
        return 0
    if "--strict-shell" in sys.argv:  # only raw/*.derivation_show_strict_shell.json
        for suite in ("trixie", "bookworm"):
            record_strict_shell_only(suite)
        return 0
    if "--list-property" in sys.argv:
        record_list_property_and_inhibitors()
        return 0
    if "--commands" in sys.argv:  # only facts.commands (python -m tests.facts.record --commands)
        twin = machine.up("rec-commands", progress=print)
        try:
            record_command_answers(twin)
        finally:
            machine.down("rec-commands", progress=print)
        return 0
    for suite in ("trixie", "bookworm"):
        record_nix_version(suite)
    twin = machine.up("rec-facts", progress=print)
    try:
        record_state(twin, "fresh")
        record_odd_dropin_names(twin)
        record_command_answers(twin)
        record_definitions(twin, "fresh")
        record_options_record(twin)
        record_definitions(twin, "no_such_option", deviceResident="services.tenstorrent.nope")
        record(twin, "memory", facts.memory.MemoryHeadroom, "fresh")
        record(twin, "nix", facts.nix.FlakeCheckout, "clean")
        record(twin, "serving", facts.serving.ServingUnit, "not_found", unit="nope.service")
        record(twin, "serving", facts.serving.ToolCallProbe, "dead_port", url="http://127.0.0.1:9")
        record(
            twin,
            "nix",
            facts.nix.FlakeInput,
            "no_such_input",
            expect_error=True,
            flake_input="nope",
        )
        record(
            twin, "nix", facts.nix.FlakeInput, "no_flake_lock", expect_error=True, flake_dir="/srv"
        )
        record(twin, "nix", facts.nix.FlakeCheckout, "not_a_checkout", flake_dir="/srv")
        rev = twin.exec(
            [
                "runuser",
                "-u",
                "ops",
                "--",
                "git",
                "-C",
                "/srv/git/tt-stack",
                "rev-list",
                "--max-parents=0",
                "HEAD",
            ]
        ).stdout.strip()
        twin.exec(as_ops("mkdir", "-p", "/tmp/inner", "/tmp/outer"))
        twin.exec(as_ops("tee", "/tmp/inner/flake.nix"), input=INNER_FLAKE.replace("@REV@", rev))
        twin.exec(as_ops("tee", "/tmp/outer/flake.nix"), input=FOLLOWS_FLAKE)
        twin.exec(as_ops(*nix("flake", "lock", "/tmp/outer")))
        record(
            twin,
            "nix",
            facts.nix.FlakeInput,
            "follows",
            flake_dir="/tmp/outer",
            flake_input="stack",
        )
        record(
            twin,
            "nix",
            facts.nix.FlakeInput,
            "node_key_differs",
            flake_dir="/tmp/outer",
            flake_input="upstream",
        )
        # the service stopped: ExecStart after the process exited
        twin.exec(["systemctl", "stop", "tenstorrent-serving.service"])
        record(twin, "serving", facts.serving.ServingUnit, "stopped")
        twin.exec(["systemctl", "start", "tenstorrent-serving.service"])
        machine.wait_serving(twin)
        # the seed's state
        machine.apply_emergency_override(twin)
        record_state(twin, "emergency_override")
        # hugepages reduced at runtime (2 MiB pool; the 1 GiB one is the kernel's)
        twin.exec(["sh", "-c", "echo 4 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"])
        record(twin, "memory", facts.memory.MemoryHeadroom, "hugepages_2m_4")
        twin.exec(["sh", "-c", "echo 0 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"])
        # without runuser remedy would run git as root: refused, and the cause is named
        runuser = twin.exec(["sh", "-c", "command -v runuser"]).stdout.strip()
        twin.exec(["mv", runuser, runuser + ".off"])
        try:
            record(twin, "nix", facts.nix.FlakeCheckout, "owner_refused")
        finally:
            twin.exec(["mv", runuser + ".off", runuser])
        # the model answers in prose (the double's test knob)
        twin.exec(["mkdir", "-p", "/var/lib/vllm-double"])
        twin.exec(["tee", "/var/lib/vllm-double/mode"], input="prose\n")
        record(twin, "serving", facts.serving.ToolCallProbe, "prose", url=twin.server_url)
        twin.exec(["rm", "/var/lib/vllm-double/mode"])
        # the durable fix by hand, as the owner, with the stale /run override removed
        twin.exec(as_ops(*nix("flake", "update", "tt-stack", "--flake", "/etc/nixos")))
        twin.exec(
            [
                "rm",
                "-rf",
                "/run/systemd/system/tenstorrent-serving.service.d",
                "/run/tt-serving-override",
            ]
        )
        toplevel = build_toplevel(twin)
        twin.exec(["nix-env", "-p", "/nix/var/nix/profiles/system", "--set", toplevel])
        twin.exec([f"{toplevel}/bin/switch-to-configuration", "switch"])
        machine.wait_serving(twin)
        record_state(twin, "durable")
        record_runtime_state(twin)
        record_switch_outcomes(
            twin,
            old=twin.exec(["readlink", "-f", f"{PROFILE}-1-link"]).stdout.strip(),
            new=toplevel,
        )
        record(twin, "nix", facts.nix.FlakeCheckout, "dirty_lock")
        # nixos-rebuild test: current-system differs from what the profile boots
        twin.exec(["nixos-rebuild", "switch", "--rollback"])
        # two switches in a row restart the server within systemd's start limit (5 in
        # 10 s) after the recordings above: start the count again, as a person would
        twin.exec(["systemctl", "reset-failed", "tenstorrent-serving.service"], check=False)
        twin.exec([f"{toplevel}/bin/switch-to-configuration", "test"])
        machine.wait_serving(twin)
        record(twin, "serving", facts.serving.VolatileState, "after_rebuild_test")
        # NixOS's overrides.conf: ExecStart and Environment from the unit's own drop-in
        twin.exec([f"{toplevel}/bin/switch-to-configuration", "switch"])
        machine.wait_serving(twin)
        machine.commit_as_owner(twin, fixtures.TT_STACK_DIR, fixtures.asdropin_commit())
        twin.exec(as_ops(*nix("flake", "update", "tt-stack", "--flake", "/etc/nixos")))
        dropin_toplevel = build_toplevel(twin)
        record(twin, "serving", facts.serving.BuiltService, "asdropin", toplevel=dropin_toplevel)
        record(twin, "serving", facts.serving.BuiltService, "inline", toplevel=toplevel)
        twin.exec(["nix-env", "-p", "/nix/var/nix/profiles/system", "--set", dropin_toplevel])
        record(twin, "serving", facts.serving.ServingUnit, "asdropin_next_boot")
        twin.exec([f"{dropin_toplevel}/bin/switch-to-configuration", "switch"])
        machine.wait_serving(twin)
        record(twin, "serving", facts.serving.ServingUnit, "asdropin")
        record_guard_standin(twin)
    finally:
        machine.down("rec-facts", progress=print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
