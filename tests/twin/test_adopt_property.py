"""Issue 43 F3 and F4: a property set with `systemctl set-property --runtime` adopted.

`remedy adopt` split the drop-in's path mid-name ("50-CPUWeight.con" / "f") in what it
printed and in the setting file it wrote. The converge after it then removed the /run
drop-ins at once, though the new system was only the boot default: the daemon-reload
applied the running system's unit, and CPUWeight was unset live before any reboot
carried it. A drop-in that sets a property stays until the running system holds it.
"""

from __future__ import annotations

import pytest

from remedy.twin import machine
from tests.twin.test_adopt import UNIT, converged, remedy, status  # noqa: F401

pytestmark = pytest.mark.twin

CPU = f"/run/systemd/system.control/{UNIT}.d/50-CPUWeight.conf"


def cpu_weight(twin) -> str:
    return twin.exec(["systemctl", "show", "-P", "CPUWeight", UNIT]).stdout.strip()


def test_an_adopted_property_is_written_whole_and_stays_live_until_a_reboot(converged):  # noqa: F811
    twin, inventory, settings_dir = converged
    twin.exec(["systemctl", "set-property", "--runtime", UNIT, "CPUWeight=50"])
    assert twin.exec(["test", "-f", CPU], check=False).returncode == 0
    assert cpu_weight(twin) == "50"
    code, host = status(inventory)
    assert code == 3 and [e["subject"] for e in host["unmanaged_volatile"]] == [CPU], host

    done = remedy("adopt", str(inventory), "--host", twin.name, CPU, "--issue", "tt-stack#61")
    assert done.returncode == 0, done.stdout + done.stderr
    # the path is whole on one line, in what adopt prints and in the file it writes
    assert any(CPU in line for line in done.stdout.splitlines()), done.stdout
    text = (settings_dir / "cpuweight.yaml").read_text()
    assert any(CPU in line for line in text.splitlines()), text
    assert "kind: unit-property\nname: CPUWeight\nvalue: 50\n" in text, text

    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout
    run = remedy("converge", str(inventory))  # the host's policy: no restart now
    said = " ".join((run.stdout + run.stderr).split())
    assert run.returncode in (0, 6), said[-4000:]
    assert twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout == pid
    # the new system is the boot default only: the drop-in keeps CPUWeight live
    assert cpu_weight(twin) == "50", said[-4000:]
    assert twin.exec(["test", "-f", CPU], check=False).returncode == 0
    assert f"kept {CPU}: the running system" in said, said[-4000:]

    machine.reboot(twin.name, progress=lambda _m: None)
    assert twin.exec(["test", "-e", CPU], check=False).returncode != 0
    assert cpu_weight(twin) == "50"
    code, host = status(inventory)
    assert code == 0, (host["verdict"], host["problems"], host["unmanaged_volatile"])
