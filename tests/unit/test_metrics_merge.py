"""The textfile tells the truth per host (issue 45 item 1): a run over some hosts never
removes or rewrites another host's series, a host that left the inventory loses its
series (and only then), each host has its state, last-run success and time; a textfile
that cannot be written (its directory gone, its disk full) leaves the last good file
and fails the run. Read back with prometheus_client's parser."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from remedy import metrics
from remedy.errors import EXIT_ERROR
from tests.unit.test_odd_use import env, inventory, remedy  # noqa: F401 (fixtures)

H = metrics.HostMetrics


def values(path: Path) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(path.read_text())
        for s in family.samples
    }


def lines_of(path: Path, host: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if f'host="{host}"' in line]


def volatile_host(name: str) -> metrics.HostMetrics:
    return H(name, True, volatile={"tool_call_parser": True}, probe_ok=True,
             unmanaged_volatile={"runtime-unit": 1}, exit_code=3, run_ok=True)  # fmt: skip


def test_a_run_over_one_host_keeps_the_other_hosts_lines_byte_for_byte(tmp_path):
    prom = tmp_path / "remedy.prom"
    metrics.write(str(prom), [volatile_host("oc1"), volatile_host("oc2")], 100.0, 1.0,
                  inventory=["oc1", "oc2"])  # fmt: skip
    oc2 = lines_of(prom, "oc2")
    assert len(oc2) > 10
    healthy = H("oc1", True, volatile={"tool_call_parser": False}, probe_ok=True,
                exit_code=0, run_ok=True)  # fmt: skip
    metrics.write(str(prom), [healthy], 200.0, 1.0, inventory=["oc1", "oc2"])
    assert lines_of(prom, "oc2") == oc2  # byte for byte, every one of them
    said = values(prom)
    # the issue's case: oc2 is still volatile, and oc1's success does not speak for it
    assert said[("remedy_unmanaged_volatile", (("host", "oc2"), ("kind", "runtime-unit")))] == 1
    assert ("remedy_unmanaged_volatile", (("host", "oc1"), ("kind", "runtime-unit"))) not in said
    assert said[("remedy_host_state", (("host", "oc2"), ("state", "volatile")))] == 1
    assert said[("remedy_host_state", (("host", "oc1"), ("state", "healthy")))] == 1
    assert said[("remedy_last_run_timestamp_seconds", (("host", "oc1"),))] == 200
    assert said[("remedy_last_run_timestamp_seconds", (("host", "oc2"),))] == 100
    # each family once, with its HELP: the file is one a collector takes
    helps = [line.split()[2] for line in prom.read_text().splitlines() if line.startswith("# HELP")]
    assert len(helps) == len(set(helps))


def test_a_host_that_left_the_inventory_loses_its_series_and_only_then(tmp_path):
    prom = tmp_path / "remedy.prom"
    metrics.write(str(prom), [volatile_host("oc1"), volatile_host("oc2")], 100.0, 1.0,
                  inventory=["oc1", "oc2"])  # fmt: skip
    metrics.write(str(prom), [volatile_host("oc1")], 200.0, 1.0, inventory=["oc1", "oc2"])
    assert lines_of(prom, "oc2")
    metrics.write(str(prom), [volatile_host("oc1")], 300.0, 1.0, inventory=["oc1"])
    assert lines_of(prom, "oc2") == []
    assert lines_of(prom, "oc1")


@pytest.mark.parametrize(
    ("code", "up", "state"),
    [(0, True, "healthy"), (6, True, "boot_pending"), (3, True, "volatile"),
     (4, True, "broken"), (5, True, "locked"), (1, False, "unreadable"), (1, True, "failed")],
)  # fmt: skip
def test_the_state_gauge_has_one_class_per_host_as_its_exit_code_says(tmp_path, code, up, state):
    prom = tmp_path / "remedy.prom"
    metrics.write(str(prom), [H("oc1", up, exit_code=code, run_ok=code != 1)], 1.0, 1.0)
    said = {dict(k[1])["state"]: v for k, v in values(prom).items() if k[0] == "remedy_host_state"}
    assert set(said) == set(metrics.STATES)
    assert [s for s, v in said.items() if v == 1] == [state]
    assert values(prom)[("remedy_host_exit_code", (("host", "oc1"),))] == code


def test_every_metrics_help_says_what_an_alert_on_it_means(tmp_path):
    prom = tmp_path / "remedy.prom"
    host = H("oc1", True, drift={"x": True}, mem_available_bytes=1, mem_threshold_bytes=2,
             bump_blocked="why", restart_pending={"x": True}, last_run_restarts=1,
             exit_code=3, run_ok=True)  # fmt: skip
    metrics.write(str(prom), [host], 1.0, 1.0, {"converged": 1}, interval_s=600)
    families = list(text_string_to_metric_families(prom.read_text()))
    rules = Path(__file__).resolve().parents[2] / "monitoring" / "remedy.rules.yml"
    for family in families:
        words = family.documentation
        named = [w.strip("(),;:") for w in words.split() if w.strip("(),;:").startswith("Remedy")]
        # an alert named in the HELP is one the shipped rules have; or it says why none
        assert named or "no alert" in words or "an alert on" in words, (family.name, words)
        for alert in named:
            assert f"alert: {alert}\n" in rules.read_text(), (family.name, alert)


def test_a_directory_gone_between_runs_is_said_and_nothing_is_half_written(tmp_path):
    directory = tmp_path / "textfile"
    directory.mkdir()
    prom = directory / "remedy.prom"
    metrics.check_writable(str(prom))
    shutil.rmtree(directory)
    with pytest.raises(metrics.TextfileError, match="its directory is gone"):
        metrics.write(str(prom), [volatile_host("oc1")], 1.0, 1.0)
    assert not directory.exists()


@pytest.fixture
def full_directory(tmp_path):
    """A directory on a tmpfs of 64 KiB, with a file that fills it: a new file can be
    made, but no byte written (ENOSPC), as a full disk between runs gives."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "full"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(where)],
                   check=True)  # fmt: skip
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(directory: Path) -> None:
    with open(directory / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_full_disk_leaves_the_last_good_file_and_says_so(full_directory):
    prom = full_directory / "remedy.prom"
    metrics.write(str(prom), [volatile_host("oc1")], 1.0, 1.0)
    good = prom.read_bytes()
    fill(full_directory)
    with pytest.raises(metrics.TextfileError, match="No space left on device"):
        metrics.write(str(prom), [H("oc1", False, exit_code=1, run_ok=False)], 2.0, 1.0)
    assert prom.read_bytes() == good
    assert sorted(p.name for p in full_directory.iterdir()) == ["filler", "remedy.prom"]


def test_converge_with_a_full_textfile_disk_reports_then_fails(env, inventory, full_directory):  # noqa: F811
    """The run's report comes out, then why its metrics are not written; the exit is 1
    and the last good file is as it was."""
    prom = full_directory / "remedy.prom"
    prom.write_text("# an earlier run's file\n")
    good = prom.read_bytes()
    fill(full_directory)
    done = remedy(env, "converge", str(inventory), "--check", "--limit", "g01",
                  "--textfile", str(prom))  # fmt: skip
    said = " ".join(done.stderr.split())
    assert done.returncode == EXIT_ERROR, (done.stdout, said)
    assert "g01" in done.stdout  # the report first
    assert f"--textfile {prom}: cannot write this run's metrics" in said, said
    assert "No space left on device" in said and "left as it was" in said
    assert prom.read_bytes() == good


def test_converge_limit_rewrites_only_its_hosts(env, inventory, tmp_path):  # noqa: F811
    """Two hosts nothing answers: a run over both, then --limit g01 leaves g02's lines
    byte for byte (the twin test does it with two twins and a converge)."""
    prom = tmp_path / "remedy.prom"
    first = remedy(env, "converge", str(inventory), "--check", "--textfile", str(prom))
    assert first.returncode == EXIT_ERROR, first.stderr
    g02 = lines_of(prom, "g02")
    assert any(line.startswith("remedy_host_up") for line in g02), g02
    stamp = values(prom)[("remedy_last_run_timestamp_seconds", (("host", "g01"),))]
    again = remedy(env, "converge", str(inventory), "--check", "--limit", "g01",
                   "--textfile", str(prom), "--interval", "10min")  # fmt: skip
    assert again.returncode == EXIT_ERROR, again.stderr
    assert lines_of(prom, "g02") == g02
    said = values(prom)
    assert said[("remedy_last_run_timestamp_seconds", (("host", "g01"),))] > stamp
    assert said[("remedy_run_interval_seconds", (("host", "g01"),))] == 600
    assert ("remedy_run_interval_seconds", (("host", "g02"),)) not in said
    assert said[("remedy_host_state", (("host", "g02"), ("state", "unreadable")))] == 1


def test_a_run_the_fleet_lock_refused_writes_the_refusal_and_keeps_what_the_last_read_found(
    tmp_path,
):
    """Decided: a converge the fleet lock refused read no host. Per host of the run it
    writes only the run's series (state locked, exit code 5, the run failed, when);
    what the last read found (volatile, probe, memory, up) stays byte for byte, so no
    alert on it resolves or fires because of a refusal."""
    prom = tmp_path / "remedy.prom"
    metrics.write(str(prom), [volatile_host("oc1"), volatile_host("oc2")], 100.0, 1.0,
                  inventory=["oc1", "oc2"], interval_s=600)  # fmt: skip
    before, oc2 = lines_of(prom, "oc1"), lines_of(prom, "oc2")
    refused = H("oc1", True, exit_code=5, run_ok=False, read=False)
    metrics.write(str(prom), [refused], 200.0, 1.0, inventory=["oc1", "oc2"], interval_s=600)
    after = lines_of(prom, "oc1")

    def family(line: str) -> str:
        return line.split("{", 1)[0]

    kept = [line for line in before if family(line) not in metrics.RUN_SERIES]
    assert kept and [line for line in after if family(line) not in metrics.RUN_SERIES] == kept
    said = values(prom)
    assert said[("remedy_setting_volatile", (("host", "oc1"), ("setting", "tool_call_parser")))]
    assert said[("remedy_host_up", (("host", "oc1"),))] == 1  # not "unreachable"
    assert said[("remedy_host_state", (("host", "oc1"), ("state", "locked")))] == 1
    assert said[("remedy_host_state", (("host", "oc1"), ("state", "volatile")))] == 0
    assert said[("remedy_host_exit_code", (("host", "oc1"),))] == 5
    assert said[("remedy_last_run_success", (("host", "oc1"),))] == 0
    assert said[("remedy_last_run_timestamp_seconds", (("host", "oc1"),))] == 200
    assert lines_of(prom, "oc2") == oc2  # a host not in the run: as it was
