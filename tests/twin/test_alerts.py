"""Issue 45 item 3 on twins: the shipped alert rules in a real Prometheus, scraping a
real node exporter whose textfile collector reads what remedy converge writes.

Two twins: one volatile (the /run emergency override holds the parser; the boot default
does not), one fresh (hermes live: tool calls unparsed). The test starts Debian's
prometheus-node-exporter on remedy's textfile directory and prometheus with the shipped
rules, both on free loopback ports with their own directories, scraping and evaluating
every second; the rules' `for:` bounds are scaled to seconds in the copy it loads (the
expressions, labels and annotations are the shipped ones). It reads /api/v1/alerts until
the volatile twin's RemedySettingVolatile and the fresh twin's RemedyToolCallsUnparsed
fire; then a converge over the volatile twin alone (--limit) leaves the fresh twin's
lines of the textfile byte for byte, and the first alert resolves while the second still
fires (the issue's case: a --limit run resolved another host's alert)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import PROJECT

pytestmark = pytest.mark.twin

RULES = Path(PROJECT) / "monitoring" / "remedy.rules.yml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A process started by the test, its output in LOG; stopped by stop()."""

    def __init__(self, argv: list[str], log: Path):
        self.log = log
        self.proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)  # fmt: skip

    def said(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.read().decode()
    except OSError:
        return None


def wait_for(what: str, check, servers, deadline_s: float = 120):
    """Poll CHECK until it returns something true (an event, not a time bound: the
    deadline only ends a test that would never pass)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        for s in servers:
            assert s.proc.poll() is None, f"{s.proc.args[0]} ended: {s.said()}"
        time.sleep(1)
    raise AssertionError(f"never: {what}; " + " | ".join(s.said() for s in servers))


def firing(port: int) -> set[tuple[str, str]]:
    """(alertname, host) of every firing alert Prometheus holds."""
    body = get(f"http://127.0.0.1:{port}/api/v1/alerts")
    if body is None:
        return set()
    return {(a["labels"]["alertname"], a["labels"].get("host", ""))
            for a in json.loads(body)["data"]["alerts"] if a["state"] == "firing"}  # fmt: skip


def lines_of(path: Path, host: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if f'host="{host}"' in line]


def state(path: Path, host: str) -> str:
    (on,) = [
        s.labels["state"]
        for f in text_string_to_metric_families(path.read_text())
        for s in f.samples
        if s.name == "remedy_host_state" and s.labels["host"] == host and s.value == 1
    ]
    return on


def test_the_shipped_rules_fire_on_a_volatile_twin_and_resolve_after_a_converge(
    make_twin, tmp_path
):
    for tool in ("prometheus", "prometheus-node-exporter"):
        assert shutil.which(tool), f"{tool} is not installed (scripts/setup.sh installs it)"
    volatile, fresh = make_twin(with_emergency_override=True), make_twin()
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    prom = textdir / "remedy.prom"
    inventory = tmp_path / "two.py"
    inventory.write_text(
        "from remedy.twin.machine import inventory_hosts\n"
        f"hosts = [(n, {{**d, 'audit_log': {str(tmp_path / 'audit.jsonl')!r}}})\n"
        f"         for n, d in inventory_hosts() if n in {(volatile.name, fresh.name)!r}]\n"
    )
    (tmp_path / "lock").mkdir()
    env = {**os.environ, "REMEDY_LOCK_DIR": str(tmp_path / "lock"),
           "REMEDY_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
           "XDG_STATE_HOME": str(tmp_path / "state")}  # fmt: skip

    def converge(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["remedy", "converge", str(inventory), "--textfile", str(prom),
                               *argv], capture_output=True, text=True, cwd=PROJECT, env=env,
                              timeout=900)  # fmt: skip

    checked = converge("--check")
    assert checked.returncode == 4, checked.stdout + checked.stderr  # the fresh twin's
    assert state(prom, volatile.name) == "volatile" and state(prom, fresh.name) == "broken"

    # the shipped rules, their holding times scaled to the test's seconds
    shipped = RULES.read_text()
    rules = tmp_path / "remedy.rules.yml"
    rules.write_text(re.sub(r"(?m)^(\s+for: )\S+$", r"\g<1>2s", shipped))
    changed = [(a, b) for a, b in zip(shipped.splitlines(), rules.read_text().splitlines(),
                                      strict=True) if a != b]  # fmt: skip
    assert changed and all(b.strip() == "for: 2s" for _a, b in changed)
    node_port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{json.dumps(str(rules))}]\n"
        "scrape_configs:\n"
        "  - job_name: node\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{node_port}']}}]\n"
    )
    (tmp_path / "tsdb").mkdir()
    servers = []
    try:
        servers.append(Server(["prometheus-node-exporter",
                               f"--web.listen-address=127.0.0.1:{node_port}",
                               "--collector.disable-defaults", "--collector.textfile",
                               f"--collector.textfile.directory={textdir}"],
                              tmp_path / "node-exporter.log"))  # fmt: skip
        servers.append(Server(["prometheus", f"--config.file={config}",
                               f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                               f"--web.listen-address=127.0.0.1:{prom_port}"],
                              tmp_path / "prometheus.log"))  # fmt: skip
        metrics_url = f"http://127.0.0.1:{node_port}/metrics"
        exposed = wait_for("the node exporter serves", lambda: get(metrics_url), servers)
        assert f'remedy_host_state{{host="{volatile.name}",state="volatile"}} 1' in exposed
        assert "textfile_scrape_error 0" in exposed, exposed[-2000:]
        # the seed runs with no memory guard: its own alert (issue 46), not the setting's
        both = {("RemedySettingVolatile", volatile.name), ("RemedyToolCallsUnparsed", fresh.name),
                ("RemedyMemoryGuardMissing", volatile.name)}  # fmt: skip
        wait_for(f"{both} fire", lambda: both <= firing(prom_port), servers)
        assert ("RemedySettingVolatile", fresh.name) not in firing(prom_port)

        fresh_lines = lines_of(prom, fresh.name)
        applied = converge("--limit", volatile.name)
        assert applied.returncode in (0, 6), applied.stdout + applied.stderr
        assert lines_of(prom, fresh.name) == fresh_lines  # byte for byte
        assert state(prom, volatile.name) in ("healthy", "boot_pending")
        # the /run override a durable-at-next-boot run leaves until that boot is no
        # setting a reboot breaks: nothing says volatile
        said = lines_of(prom, volatile.name)
        reverted = [x for x in said if x.startswith("remedy_setting_volatile{")]
        assert reverted and all(x.endswith(" 0.0") for x in reverted), reverted
        resolved = {("RemedySettingVolatile", volatile.name),
                    ("RemedyMemoryGuardMissing", volatile.name)}  # fmt: skip
        wait_for(f"{resolved} resolve", lambda: not resolved & firing(prom_port), servers)
        # the other twin is as wrong as it was: its alert still fires
        assert ("RemedyToolCallsUnparsed", fresh.name) in firing(prom_port)
    finally:
        for server in servers:
            server.stop()
