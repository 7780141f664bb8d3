"""Issue 44 item 6: a list-valued unit property (EnvironmentFile=) is added to the
serving module's list, never forced over it, and the proof checks the whole list.

remedy's file is rendered from setting files; the proof runs remedy/host/
system_lacks.sh with the machine's sh on unit files written here (the running
system's unit stands in a directory of the test's own)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

import facts.serving
from remedy import host
from remedy.core.config import desired
from remedy.twin import fixtures
from tests.unit.test_data_settings import host as host_data
from tests.unit.test_data_settings import managed  # noqa: F401

EXTRA = "issue: tt-stack#72\nkind: unit-property\nname: EnvironmentFile\n"
UNIT = "tenstorrent-serving.service"


def test_a_list_property_is_added_to_the_list_and_proven_whole(tmp_path, managed):  # noqa: F811
    managed(
        tmp_path,
        extra=EXTRA + "value: /etc/tt/extra.env\nurgency: now\n",
        limit="issue: tt-stack#63\nkind: unit-property\nname: LimitNOFILE\nvalue: 65536\n"
        "urgency: window\n",
    )
    s = host_data()
    text = desired.managed_nix(s, desired.ALL)
    service = "  systemd.services.tenstorrent-serving.serviceConfig"
    # a plain list at the module's priority: NixOS concatenates it with the module's
    assert f'{service}.EnvironmentFile = [ "/etc/tt/extra.env" ];' in text.splitlines()
    # a single-valued one is still forced
    assert f"{service}.LimitNOFILE = lib.mkForce 65536;" in text.splitlines()
    items = desired.proof_items(s, ("EnvironmentFile", "LimitNOFILE"))
    assert "prove:plist\tEnvironmentFile\tEnvironmentFile=/etc/tt/extra.env" in items, items
    assert "prove:prop\tLimitNOFILE\tLimitNOFILE=65536" in items, items


PROOF = "plist\tEnvironmentFile\tEnvironmentFile=/etc/tt/extra.env"


def lacks(tmp_path, was: str, built: str, proofs: str = PROOF) -> str:
    """system_lacks of a built unit BUILT, the running system's being WAS (PROOFS: the
    proof's lines, as prove.sh hands them over)."""
    top = tmp_path / "top"
    (top / "etc/systemd/system").mkdir(parents=True)
    (top / "etc/systemd/system" / UNIT).write_text(built)
    current = tmp_path / "current"
    (current / "etc/systemd/system").mkdir(parents=True)
    (current / "etc/systemd/system" / UNIT).write_text(was)
    # the start script is not read for a property (lib.sh's finders, stubbed)
    program = "exec_path() { :; }\nflags_script() { :; }\n" + host.text("system_lacks.sh").replace(
        "/run/current-system", str(current)
    )
    script = program + '\nsystem_lacks "$1" "$2" "$3"\n'
    done = subprocess.run(["sh", "-c", script, "sh", str(top), UNIT, proofs],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


MODULE_S = "EnvironmentFile=-/etc/tenstorrent-serving/env"


def test_the_proof_wants_the_item_and_every_item_the_running_unit_has(tmp_path):
    was = f"[Service]\n{MODULE_S}\nExecStart=/x\n"
    both = f"[Service]\n{MODULE_S}\nEnvironmentFile=/etc/tt/extra.env\nExecStart=/x\n"
    assert lacks(tmp_path / "a", was, both) == ""
    # a mkForce'd list: the module's own item is gone
    forced = "[Service]\nEnvironmentFile=/etc/tt/extra.env\nExecStart=/x\n"
    assert lacks(tmp_path / "b", was, forced) == f"EnvironmentFile (it drops {MODULE_S})"
    # the wanted item is not in
    assert lacks(tmp_path / "c", was, was) == "EnvironmentFile"


def test_adopting_a_list_item_adds_it_and_a_reset_of_the_list_is_refused():
    from remedy.core.config import adopt
    from tests.unit.test_data_settings import snapshot, with_dropin

    item = "[Service]\nEnvironmentFile=/etc/tt/extra.env\n"
    a = adopt.adoption(with_dropin(snapshot("runtime_debug"), item), host_data(),
                       "EnvironmentFile=/etc/tt/extra.env", "t#1", "window", "h")  # fmt: skip
    assert a.setting.is_list and a.setting.nix_value("h") == '[ "/etc/tt/extra.env" ]'
    # a drop-in that empties the list first replaces the module's items: refused
    reset = "[Service]\nEnvironmentFile=\nEnvironmentFile=/etc/tt/extra.env\n"
    with pytest.raises(adopt.AdoptRefused, match="resets EnvironmentFile= before") as refused:
        adopt.adoption(with_dropin(snapshot("runtime_debug"), reset), host_data(),
                       "EnvironmentFile=/etc/tt/extra.env", "t#1", "window", "h")  # fmt: skip
    assert "drop the module's own EnvironmentFile" in str(refused.value)


# -- status of a live list property ---------------------------------------------------

RAW = Path(__file__).resolve().parents[1] / "facts" / "raw"
RECORDED_EXTRA = "/etc/tenstorrent-serving/extra.env"


def recorded_lines() -> list[str]:
    """tests/facts/record.py --list-property: a twin converged with a setting that adds
    an EnvironmentFile to the serving module's own (what the snapshot printed)."""
    return json.loads((RAW / "snapshot.list_property.json").read_text())["output"]


def drift_of(tmp_path, managed, lines: list[str]):  # noqa: F811
    tmp_path.mkdir()
    managed(tmp_path, extra=EXTRA + f"value: {RECORDED_EXTRA}\nurgency: now\n")
    snap = facts.serving.HostSnapshot().process(lines)
    (found,) = desired.drifts(snap, host_data(), ("EnvironmentFile",))
    return found


def test_status_reads_every_item_the_processs_unit_has_in_order(tmp_path, managed):  # noqa: F811
    lines = recorded_lines()
    shown = [ln for ln in lines if ln.startswith("EnvironmentFiles=")]
    assert len(shown) == 2, shown  # systemctl show: an item a line
    found = drift_of(tmp_path / "a", managed, lines)
    assert found.live == f"-{fixtures.ENV_FILE}, {RECORDED_EXTRA}", found
    assert found.state == desired.IN_SYNC, found
    # the module's item after remedy's (a unit whose files assign them the other way):
    # still held, the items in that order; the last item alone would say it drifted
    i, j = lines.index(shown[0]), lines.index(shown[1])
    swapped = list(lines)
    swapped[i], swapped[j] = lines[j], lines[i]
    found = drift_of(tmp_path / "b", managed, swapped)
    assert found.live == f"{RECORDED_EXTRA}, -{fixtures.ENV_FILE}", found
    assert found.state == desired.IN_SYNC, found
    # remedy's item gone from the process's unit: drifted, the module's still shown
    gone = [ln for k, ln in enumerate(lines) if k != j]
    found = drift_of(tmp_path / "c", managed, gone)
    assert found.live == f"-{fixtures.ENV_FILE}" and found.state == desired.DRIFTED, found


# -- the proof when remedy's own earlier item changes ----------------------------------


def test_remedys_own_earlier_item_replaced_is_no_drop(tmp_path, managed):  # noqa: F811
    """The running system has the module's item and remedy's earlier one (old.env); the
    setting now wants extra.env. The proof is given remedy's earlier items (from its
    file as the run found it): the new system need not keep old.env, but still every
    other item the running unit has."""
    (tmp_path / "old").mkdir()
    managed(tmp_path / "old", extra=EXTRA + "value: /etc/tt/old.env\nurgency: now\n")
    before = desired.managed_nix(host_data(), desired.ALL)  # the earlier run's file
    managed(tmp_path, extra=EXTRA + "value: /etc/tt/extra.env\nurgency: now\n")
    s = host_data()
    items = [x.removeprefix("prove:") for x in desired.proof_items(s, ("EnvironmentFile",),
                                                                   before)]  # fmt: skip
    assert items == ["pown\tEnvironmentFile\tEnvironmentFile=/etc/tt/old.env", PROOF], items
    # nothing of remedy's own before (a first run): only the wanted item
    assert desired.proof_items(s, ("EnvironmentFile",), None) == (f"prove:{PROOF}",)
    assert desired.proof_items(s, ("EnvironmentFile",), desired.managed_nix(s, desired.ALL)) == (
        f"prove:{PROOF}",
    )
    was = f"[Service]\n{MODULE_S}\nEnvironmentFile=/etc/tt/old.env\nExecStart=/x\n"
    new = f"[Service]\n{MODULE_S}\nEnvironmentFile=/etc/tt/extra.env\nExecStart=/x\n"
    proofs = "\n".join(items)
    assert lacks(tmp_path / "a", was, new, proofs) == ""
    # without knowing it was remedy's: refused, the message names the line
    assert lacks(tmp_path / "b", was, new) == (
        "EnvironmentFile (it drops EnvironmentFile=/etc/tt/old.env)"
    )
    # the module's own item lost is still refused
    forced = "[Service]\nEnvironmentFile=/etc/tt/extra.env\nExecStart=/x\n"
    assert lacks(tmp_path / "c", was, forced, proofs) == f"EnvironmentFile (it drops {MODULE_S})"


def test_the_manual_scripts_proof_of_a_list_property_is_the_deploys(tmp_path, managed):  # noqa: F811
    """The host converged with extra.env (recorded); the setting now wants extra2.env.
    The manual script proves the built system with the prove step's program and the
    deploy's values: the plist item and remedy's earlier item (pown), read by
    system_lacks; no check of its own that looks for the wanted line only."""
    from remedy.core.render import manual
    from remedy.core.run import steps as steps_core
    from remedy.core.run.plan import plan_restore
    from tests.unit.test_one_engine import programs_in, runbook

    tmp_path.mkdir(exist_ok=True)
    managed(tmp_path, extra=EXTRA + "value: /etc/tenstorrent-serving/extra2.env\nurgency: now\n")
    snap = facts.serving.HostSnapshot().process(recorded_lines())
    assert f'"{RECORDED_EXTRA}"' in snap.managed.content  # remedy's earlier item
    script = manual.render(runbook("006"), {"flake_host": "cfx-llm2"}, None, snap, "oc1",
                           "inventory/twin.py", "test")  # fmt: skip
    s = manual.as_person(host_data())
    plan = plan_restore(snap, s, desired.ALL)
    planned = steps_core.plan_steps(plan, snap, s, "r", None, None, "oc1")
    (prove,) = [st.values for st in planned.steps if st.values.PROGRAM == "prove"]
    items = [x for x in prove.items if x.startswith(("prove:pown", "prove:plist"))]
    assert items == [
        f"prove:pown\tEnvironmentFile\tEnvironmentFile={RECORDED_EXTRA}",
        "prove:plist\tEnvironmentFile\tEnvironmentFile=/etc/tenstorrent-serving/extra2.env",
    ], items
    # the script hands the prove program the deploy's words: its values function run
    found = [m for m in re.finditer(r"^(values_\d+)\(\) \{\n.*?^\}\n", script, re.M | re.S)
             if "  program prove " in m[0]]  # fmt: skip
    m = found[0] if len(found) == 1 else None
    assert m, "no values function of the prove step"
    shown = subprocess.run(
        ["sh", "-c", 'program() { shift 2; printf "%s\\n" "$@"; }\n' + m[0] + f"{m[1]} apply",
         "sh"], capture_output=True, text=True, check=True,
        env={"run_id": "r", "path": "durable", "stopped": ""},
    ).stdout.splitlines()  # fmt: skip
    for item in items:
        assert item in shown, (item, shown)
    assert programs_in(script)["prove"] in host.step_program("prove")
    assert "system_lacks" in programs_in(script)["prove"]
