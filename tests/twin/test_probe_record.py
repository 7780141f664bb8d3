"""The probe's model id kept on the host (issue 34): a check of an unchanged server asks
/v1/models once, not every run. The record names the serving process (boot, main PID,
start, URL); a restart asks again, and an id the server no longer serves (vLLM's 404)
is asked again at once, in the same read, with the same verdict."""

from __future__ import annotations

import pytest

from remedy.core.readings import probe
from remedy.twin import machine
from tests.conftest import remedy_json

pytestmark = pytest.mark.twin

UNIT = "tenstorrent-serving.service"


def status_of(twin):
    code, doc = remedy_json("status", "inventory/twin.py", "--limit", twin.name)
    (host,) = doc["hosts"]
    return code, host["snapshot"]["probe"]


def record(twin) -> tuple[str, str, str]:
    """(mode and owner, key line, model line) of the record."""
    meta = twin.exec(["stat", "-c", "%a %u", probe.MODEL_RECORD]).stdout.strip()
    key, model = twin.exec(["cat", probe.MODEL_RECORD]).stdout.splitlines()
    return meta, key, model


def test_the_model_id_is_kept_for_the_serving_process_and_asked_again_when_it_changes(twin):
    code, first = status_of(twin)
    assert first["outcome"] == "unparsed", first  # a fresh twin: hermes
    pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    meta, key, model = record(twin)
    assert meta == "600 0", meta
    assert key.startswith("key ") and f" {pid} " in key and key.endswith(twin.server_url)
    assert model == f"model {first['model']}"

    # an id the server does not serve, under this process's key: vLLM's 404, then asked
    # again in the same read; the verdict is the same, and the record is corrected
    twin.exec(["sh", "-c", f"printf '%s\\nmodel gone-model\\n' '{key}' >{probe.MODEL_RECORD}"])
    again_code, again = status_of(twin)
    assert (again_code, again["outcome"], again["model"]) == (code, "unparsed", first["model"])
    assert record(twin)[1:] == (key, model)

    # a restart: another main PID, another key
    twin.exec(["systemctl", "restart", UNIT])
    machine.wait_serving(twin)
    _code, after = status_of(twin)
    assert after["outcome"] == "unparsed" and after["model"] == first["model"]
    new_pid = twin.exec(["systemctl", "show", "-P", "MainPID", UNIT]).stdout.strip()
    assert new_pid != pid and f" {new_pid} " in record(twin)[1]


def test_a_record_remedy_did_not_write_is_not_read(twin):
    status_of(twin)
    meta, key, model = record(twin)
    # the right id, but a mode remedy never writes: not used (a used record that names
    # the served id is left as it is), so /v1/models is asked and the record rewritten
    twin.exec(["chmod", "0644", probe.MODEL_RECORD])
    _code, got = status_of(twin)
    assert got["outcome"] == "unparsed" and f"model {got['model']}" == model, got
    assert record(twin) == (meta, key, model)
