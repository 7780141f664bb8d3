"""Issues 34 and 30 without hosts: the fleet lock, the rollout's values refused before
anything connects, and how the one pyinfra run's log is told apart per host."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from remedy import fleet, lock
from tests.conftest import PROJECT

FLEET = {"g01": {"ssh_hostname": "127.0.0.1", "ssh_port": 2201},
         "g02": {"ssh_hostname": "127.0.0.1", "ssh_port": 2202}}  # fmt: skip


def test_a_second_run_over_the_same_hosts_waits_then_names_the_holder(tmp_path, monkeypatch):
    """One converge at a time over the same hosts, whatever its --limit or the file that
    names them: the restart budget is fleet-wide and belongs to the hosts (issue 43 B)."""
    monkeypatch.setenv("REMEDY_LOCK_DIR", str(tmp_path))
    first = lock.acquire_fleet(FLEET, 0, "pid 1 on mgmt: first")
    said: list[str] = []
    # the same hosts under other names (a copy of the inventory, edited), one of them
    # reached by another name of its address
    other = {"a": {"ssh_hostname": "localhost", "ssh_port": 2202}}
    with pytest.raises(lock.LockHeld) as held:
        lock.acquire_fleet(other, 0.5, "second", said.append)
    assert "pid 1 on mgmt: first" in str(held.value) and "fleet lock of a " in str(held.value)
    assert said and "waiting up to 0.5s" in said[0]
    # other hosts are another fleet
    g03 = {"g03": {"ssh_hostname": "127.0.0.1", "ssh_port": 2203}}
    lock.acquire_fleet(g03, 0, "third").release()
    first.release()
    lock.acquire_fleet(other, 0, "again").release()


def test_a_host_is_known_by_where_ssh_reaches_it(tmp_path):
    """The SSH config's HostName and Port count, as pyinfra connects: an alias of the
    same address and port is the same host; another port is another host."""
    config = tmp_path / "ssh_config"
    config.write_text("Host gpu1\n  HostName 127.0.0.1\n  Port 2201\n")
    alias = lock.host_keys("gpu1", {"ssh_config_file": str(config)})
    assert alias == lock.host_keys("g01", FLEET["g01"]) == ["127.0.0.1 2201"]
    assert lock.host_keys("g02", FLEET["g02"]) != alias
    # a name this machine cannot resolve (reached through a jump host) is its own key
    assert lock.host_keys("x", {"ssh_hostname": "no-such-host.invalid"}) == [
        "no-such-host.invalid 22"
    ]


def converge(inventory, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "remedy.cli.main", "converge", str(inventory), *argv],
        capture_output=True, text=True, cwd=PROJECT, timeout=120,
    )  # fmt: skip


def unreachable(tmp_path, **data) -> str:
    """An inventory of two hosts nothing answers for (port 1): any connection fails."""
    path = tmp_path / "fleet.py"
    base = {"ssh_hostname": "127.0.0.1", "ssh_port": 1}
    path.write_text(f"hosts = [('g01', {{**{base!r}, **{data!r}}}), ('g02', {base!r})]\n")
    return str(path)


@pytest.mark.parametrize(
    "data,argv,words",
    [
        ({"max_restarting": 0}, [], "data key 'max_restarting' must be at least 1"),
        ({}, ["--canary", "g09"], "data key 'canary' names g09, not a host of this inventory"),
        ({"rotation_out": "lb drain"}, [], "data key 'rotation_out' must be a list"),
        ({"rotation_in": ["/nonexistent/lb"]}, [], "runs '/nonexistent/lb', which is not"),
        ({"max_failures": 2}, [], "data key 'max_failures' differs between hosts"),
    ],
)
def test_bad_rollout_values_are_refused_before_connecting(tmp_path, data, argv, words):
    proc = converge(unreachable(tmp_path, **data), *argv)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2, said
    assert words in said, said
    assert "could not connect" not in said and "Traceback" not in said


def test_pyinfras_log_goes_to_the_host_it_names_and_says_each_step():
    runs = {name: fleet.HostRun(name) for name in ("g1", "g10")}
    said: list[str] = []
    watch = fleet._Watch(runs, said.append)
    log = logging.getLogger("pyinfra.test")
    log.setLevel(logging.INFO)
    log.propagate = False
    log.addHandler(watch)
    try:
        watch.step("g1", "Switch to the proven system (tt-stack#49)")
        log.info("\x1b[1m[g1]\x1b[0m  Success")  # pyinfra pads the shorter names
        log.warning("remedy: g10: another remedy run holds /run/lock/x.lock")
        log.info("[unknown] noise")
    finally:
        log.removeHandler(watch)
    assert said[0] == "g1: Switch to the proven system (tt-stack#49)"
    assert runs["g1"].lines == ["[g1] Success"]
    assert runs["g10"].tail() == "remedy: g10: another remedy run holds /run/lock/x.lock"


def test_the_textfile_counts_the_rollouts_hosts_by_how_they_ended(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from remedy import metrics
    from remedy.core.run import rollout

    prom = tmp_path / "remedy.prom"
    counts = {**dict.fromkeys(rollout.STATES, 0), "converged": 3, "not started": 1}
    metrics.write(str(prom), [metrics.HostMetrics("g01", up=False)], 0.0, 42.0, counts)
    said = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(prom.read_text())
        for s in family.samples
    }
    assert said[("remedy_rollout_hosts", (("state", "converged"),))] == 3
    assert said[("remedy_rollout_hosts", (("state", "not started"),))] == 1
    assert said[("remedy_rollout_hosts", (("state", "failed"),))] == 0
    assert said[("remedy_rollout_duration_seconds", ())] == 42.0
    metrics.write(str(prom), [], 0.0, 1.0)  # --check: no rollout
    assert "remedy_rollout_hosts" not in prom.read_text()
