"""Issue 31 on a twin: runtime state adopted as a managed setting, and made durable.

A person puts ``Environment=VLLM_LOGGING_LEVEL=DEBUG`` in a /run drop-in of the server
(or ``sysctl -w vm.max_map_count=…``): status lists it as unmanaged volatile state
(exit 3); ``remedy adopt`` writes ``settings/<slug>.yaml`` with the live value; the
next converge makes it durable (remedy.nix forces it at its option path); after a
reboot the drop-in is gone, the value holds, status exits 0 and shows the setting.
The setting files go to a directory of the test's own (REMEDY_SETTINGS_DIR), never
the project's.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from remedy.twin import fixtures, machine
from tests.conftest import PROJECT, remedy_json, twin_inventory
from tests.twin.test_converge_cli import samples

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"
DROPIN = f"/run/systemd/system/{UNIT}.d/zz-debug.conf"
REMEDY_NIX = f"{fixtures.NIXOS_DIR}/hosts/{fixtures.FLAKE_HOST}/remedy.nix"


def remedy(*argv: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["remedy", *argv], capture_output=True, text=True, cwd=PROJECT, timeout=timeout
    )


def status(inventory) -> tuple[int, dict]:
    code, doc = remedy_json("status", str(inventory))
    (host,) = doc["hosts"]
    return code, host


def setting(host: dict, key: str) -> dict:
    (found,) = [s for s in host["settings"] if s["key"] == key]
    return found


def server_environ(twin) -> dict[str, str]:
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    raw = twin.exec(["sh", "-c", f"tr '\\0' '\\n' < /proc/{pid}/environ"]).stdout
    return dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)


@pytest.fixture
def converged(make_twin, tmp_path, monkeypatch):
    """A twin converged to every built-in setting, with its settings directory."""
    monkeypatch.setenv("REMEDY_SETTINGS_DIR", str(tmp_path / "settings"))
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inventory.py", twin)
    done = remedy("converge", str(inventory), "--restart", "now")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    code, host = status(inventory)
    assert code == 0 and host["unmanaged_volatile"] == [], host["problems"]
    return twin, inventory, tmp_path / "settings"


def adopted(inventory, twin, subject: str, issue: str, settings_dir, name: str) -> str:
    """`remedy adopt` SUBJECT: its diff names the file; `remedy settings check` passes."""
    dry = remedy("adopt", str(inventory), "--host", twin.name, subject, "--issue", issue, "--dry")
    assert dry.returncode == 0 and "nothing written" in dry.stdout, dry.stdout + dry.stderr
    assert not (settings_dir / name).exists()
    done = remedy("adopt", str(inventory), "--host", twin.name, subject, "--issue", issue)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"+++ b/{str(settings_dir / name).lstrip('/')}" in done.stdout, done.stdout
    checked = remedy("settings", "check")
    assert checked.returncode == 0 and "settings OK" in checked.stdout, checked.stdout
    return (settings_dir / name).read_text()


def test_an_environment_variable_of_a_run_dropin_is_adopted_and_made_durable(converged):
    twin, inventory, settings_dir = converged
    twin.exec(["mkdir", "-p", DROPIN.rsplit("/", 1)[0]])
    twin.exec(["tee", DROPIN], input="[Service]\nEnvironment=VLLM_LOGGING_LEVEL=DEBUG\n")
    twin.exec(["systemctl", "daemon-reload"])
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    code, host = status(inventory)
    assert code == 3 and [e["subject"] for e in host["unmanaged_volatile"]] == [DROPIN]

    text = adopted(
        inventory, twin, "Environment=VLLM_LOGGING_LEVEL=DEBUG", "tt-stack#60", settings_dir,
        "vllm-logging-level.yaml",
    )  # fmt: skip
    assert "kind: environment\nname: VLLM_LOGGING_LEVEL\nvalue: DEBUG\n" in text
    code, host = status(inventory)  # now a setting: volatile, said per setting
    assert code == 3 and host["unmanaged_volatile"] == []
    logging = setting(host, "VLLM_LOGGING_LEVEL")
    assert (logging["live"], logging["next_boot"], logging["state"]) == ("DEBUG", "unset",
                                                                         "volatile")  # fmt: skip

    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout
    done = remedy("converge", str(inventory))
    assert done.returncode in (0, 6), (done.stdout + done.stderr)[-4000:]
    forced = "systemd.services.tenstorrent-serving.environment.VLLM_LOGGING_LEVEL = "
    assert f'{forced}lib.mkForce "DEBUG";' in twin.exec(["cat", REMEDY_NIX]).stdout
    # the drop-in goes once the next boot holds what it carried, with no restart
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode != 0
    assert twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout == pid
    assert server_environ(twin)["VLLM_LOGGING_LEVEL"] == "DEBUG"
    again = remedy("converge", str(inventory))  # nothing left to do, nothing restarted
    said = again.stdout + again.stderr
    assert again.returncode in (0, 6), said[-3000:]
    # a plan with nothing to do runs only the steps that can act: no drop-in is left
    assert "boot pending" in said and "Remove the /run drop-ins" not in said, said[-3000:]
    assert twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout == pid
    code, host = status(inventory)
    assert setting(host, "VLLM_LOGGING_LEVEL")["next_boot"] == "DEBUG"
    assert code in (0, 6), host["problems"]  # no restart was needed: boot pending

    machine.reboot(twin.name, progress=lambda _m: None)
    assert twin.exec(["test", "-e", DROPIN], check=False).returncode != 0
    assert server_environ(twin)["VLLM_LOGGING_LEVEL"] == "DEBUG"
    code, host = status(inventory)
    assert code == 0, (host["verdict"], host["problems"], host["unmanaged_volatile"])
    assert setting(host, "VLLM_LOGGING_LEVEL")["state"] == "in sync"
    assert ["VLLM_LOGGING_LEVEL", "DEBUG", "DEBUG"] in [
        [r["label"], r["now"], r["after_reboot"]] for r in host["rows"]
    ]
    # the metrics carry it under its name, as the built-in settings
    prom = settings_dir.parent / "remedy.prom"
    checked = remedy("converge", str(inventory), "--check", "--textfile", str(prom))
    assert checked.returncode == 0, (checked.stdout + checked.stderr)[-3000:]
    labels = (("host", twin.name), ("setting", "VLLM_LOGGING_LEVEL"))
    values = samples(prom)
    assert values[("remedy_setting_drift", labels)] == 0, sorted(values)
    assert values[("remedy_setting_volatile", labels)] == 0, sorted(values)


def test_a_sysctl_set_with_sysctl_w_is_adopted_and_made_durable(converged):
    twin, inventory, settings_dir = converged
    # the twin's /proc/sys/vm is its own copy (twin-kernel): never this machine's kernel
    fs = twin.exec(["stat", "-f", "-c", "%T", "/proc/sys/vm"]).stdout.strip()
    assert fs == "tmpfs", "the twin's vm sysctls are not its own: not writing them"
    twin.exec(["sysctl", "-w", "vm.max_map_count=2097152"])
    code, host = status(inventory)
    (entry,) = host["unmanaged_volatile"]
    assert code == 3 and (entry["kind"], entry["subject"]) == ("sysctl", "vm.max_map_count")
    assert entry["after_reboot"] == "1048576 (sysctl.d)", entry

    text = adopted(
        inventory, twin, "vm.max_map_count", "tt-stack#61", settings_dir, "vm-max-map-count.yaml"
    )
    assert "kind: sysctl\nname: vm.max_map_count\nvalue: 2097152\n" in text

    done = remedy("converge", str(inventory))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert (
        'boot.kernel.sysctl."vm.max_map_count" = lib.mkForce 2097152;'
        in twin.exec(["cat", REMEDY_NIX]).stdout
    )
    code, host = status(inventory)
    assert code == 0 and setting(host, "vm.max_map_count")["state"] == "in sync", host

    machine.reboot(twin.name, progress=lambda _m: None)
    assert twin.exec(["sysctl", "-n", "vm.max_map_count"]).stdout.strip() == "2097152"
    code, host = status(inventory)
    assert code == 0, (host["verdict"], host["problems"], host["unmanaged_volatile"])
    row = [r for r in host["rows"] if r["label"] == "vm.max_map_count"]
    assert [(r["now"], r["after_reboot"]) for r in row] == [("2097152", "2097152")]


def test_an_option_path_the_host_does_not_declare_is_refused_with_nixos_words(
    make_twin, tmp_path, monkeypatch
):
    settings_dir = tmp_path / "settings"
    settings_dir.mkdir()
    monkeypatch.setenv("REMEDY_SETTINGS_DIR", str(settings_dir))
    (settings_dir / "vm-max-map-count.yaml").write_text(
        "issue: tt-stack#61\nkind: sysctl\nname: vm.max_map_count\nvalue: 2097152\nurgency: now\n"
    )
    twin = make_twin()
    inventory = twin_inventory(tmp_path / "inventory.py", twin)
    good = remedy("settings", "check", "--inventory", str(inventory))
    assert good.returncode == 0, good.stdout + good.stderr
    assert "takes every setting's option path" in good.stdout
    (settings_dir / "max-num-seqs.yaml").write_text(
        "issue: tt-stack#64\nkind: flag\nname: --max-num-seqs\nvalue: '16'\nurgency: window\n"
        "option: services.tenstorrent-serving.extraArgs\n"
    )
    assert remedy("settings", "check").returncode == 0  # the file itself is good
    on_host = remedy("settings", "check", "--inventory", str(inventory), "--json")
    assert on_host.returncode == 1, on_host.stdout + on_host.stderr
    (problem,) = json.loads(on_host.stdout)["problems"]
    assert problem["file"] == str(settings_dir / "max-num-seqs.yaml")
    assert problem["field"] == "$.option"
    assert (
        "The option `services.tenstorrent-serving.extraArgs' does not exist." in problem["message"]
    )


def test_the_fallback_carries_a_drifted_data_setting_when_the_durable_path_is_blocked(
    converged, tmp_path
):
    twin, _inventory, settings_dir = converged
    fs = twin.exec(["stat", "-f", "-c", "%T", "/proc/sys/vm"]).stdout.strip()
    assert fs == "tmpfs", "the twin's vm sysctls are not its own: not writing them"
    settings_dir.mkdir(exist_ok=True)
    (settings_dir / "vllm-logging-level.yaml").write_text(
        "issue: tt-stack#60\nkind: environment\nname: VLLM_LOGGING_LEVEL\nvalue: DEBUG\n"
        "urgency: now\n"
    )
    (settings_dir / "vm-max-map-count.yaml").write_text(
        "issue: tt-stack#61\nkind: sysctl\nname: vm.max_map_count\nvalue: 2097152\nurgency: now\n"
    )
    assert "VLLM_LOGGING_LEVEL" not in server_environ(twin)
    blocked = twin_inventory(tmp_path / "blocked.py", twin, durable=False)
    code, host = status(blocked)
    assert setting(host, "VLLM_LOGGING_LEVEL")["state"] == "drifted", host["settings"]
    assert setting(host, "vm.max_map_count")["state"] == "drifted", host["settings"]

    done = remedy("converge", str(blocked), "--restart", "now")
    said = done.stdout + done.stderr
    assert done.returncode in (0, 3), said[-4000:]
    assert "durable=false" in said and "Write the /run fallback override" in said, said[-4000:]
    managed = twin.exec(["cat", REMEDY_NIX], check=False).stdout
    assert "VLLM_LOGGING_LEVEL" not in managed  # the durable path was not taken
    # the server runs with the data setting's value from the managed /run drop-in
    dropin = twin.exec(["cat", f"/run/systemd/system/{UNIT}.d/override.conf"]).stdout
    assert "\nEnvironment=VLLM_LOGGING_LEVEL=DEBUG\n" in dropin, dropin
    assert server_environ(twin)["VLLM_LOGGING_LEVEL"] == "DEBUG"
    # and the sysctl is set live (sysctl -w): what /proc/sys shows
    assert twin.exec(["cat", "/proc/sys/vm/max_map_count"]).stdout.strip() == "2097152"
    code, host = status(blocked)
    assert [setting(host, k)["state"] for k in ("VLLM_LOGGING_LEVEL", "vm.max_map_count")] == [
        "volatile", "volatile"]  # fmt: skip

    # a second run: nothing differs live, nothing is written or restarted
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout
    again = remedy("converge", str(blocked), "--restart", "now")
    assert again.returncode in (0, 3), (again.stdout + again.stderr)[-4000:]
    assert twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout == pid
    assert twin.exec(["cat", f"/run/systemd/system/{UNIT}.d/override.conf"]).stdout == dropin


def test_a_sysctl_the_host_cannot_set_is_said_and_the_fallback_still_holds_tool_calling(
    make_twin, tmp_path, monkeypatch
):
    """The fallback's sysctl -w of a data setting fails (no such key on this host): it is
    said, and the /run override that holds tool calling is written and restarted onto
    all the same; the manual script says it the same way and goes on."""
    from tests.conftest import probe_inside

    settings_dir = tmp_path / "settings"
    settings_dir.mkdir()
    monkeypatch.setenv("REMEDY_SETTINGS_DIR", str(settings_dir))
    (settings_dir / "vm-remedy-nope.yaml").write_text(
        "issue: tt-stack#61\nkind: sysctl\nname: vm.remedy_nope\nvalue: 1\nurgency: now\n"
    )
    twin = make_twin()  # production after a reboot: hermes, no override
    # a key of the twin's own /proc/sys/vm (a tmpfs), which it lacks: never this machine's
    fs = twin.exec(["stat", "-f", "-c", "%T", "/proc/sys/vm"]).stdout.strip()
    assert fs == "tmpfs", "the twin's vm sysctls are not its own: not writing them"
    assert probe_inside(twin).outcome == "unparsed"
    blocked = twin_inventory(tmp_path / "blocked.py", twin, durable=False)
    done = remedy("converge", str(blocked), "--restart", "now")
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode in (0, 3), said[-4000:]
    assert "could not set vm.remedy_nope=1" in said, said[-4000:]
    assert twin.exec(["test", "-e", f"/run/systemd/system/{UNIT}.d/override.conf"]).returncode == 0
    assert probe_inside(twin).outcome == "parsed"

    # the manual script, on a twin of its own in the same state
    from tests.twin.test_one_implementation import manual_script, over_ssh

    other = make_twin()
    inventory = twin_inventory(tmp_path / "other.py", other, durable=False)
    ran = over_ssh(other, manual_script(inventory, other, "006"))  # converge, as above
    said = ran.stdout + ran.stderr
    assert ran.returncode == 3 and "could not set vm.remedy_nope=1" in said, said[-4000:]
    assert probe_inside(other).outcome == "parsed"
