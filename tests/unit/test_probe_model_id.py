"""The probe's model id, read in the shell (remedy/host/first_model_id.sh), against the
pipeline it replaced (tr, sed, head): the same id for the same /v1/models answer, under
every shell a host runs it with (dash: Debian's /bin/sh; bash --posix: NixOS's)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from remedy import host
from remedy.core.readings import probe

MODEL_ID_SH = host.text("first_model_id.sh")

# What the probe ran before: its answer is the reference.
PIPELINE = r"""printf '%s' "$1" | tr ',{' '\n\n' \
  | sed -n 's/^[[:space:]]*"id"[[:space:]]*:[[:space:]]*"\([A-Za-z0-9_.\/:-]*\)".*/\1/p' \
  | head -n 1"""

SHELLS = [s for s in (["dash"], ["bash", "--posix"]) if shutil.which(s[0])]

# A vLLM answer (the twin's double answers the same shape), then odd ones.
ANSWERS = [
    '{"object":"list","data":[{"id":"qwen3.6-27b-tt","object":"model","created":1,'
    '"owned_by":"vllm","root":"Qwen/Qwen3.6-27B","parent":null,"max_model_len":32768}]}',
    '{"object": "list", "data": [{"id": "Qwen/Qwen3.6-27B", "object": "model"}]}',
    '{\n  "data": [\n    {\n      "id" : \t "a.b:c-d_e/f"\n    }\n  ]\n}\n',
    '{"data":[{"id":"first"},{"id":"second"}]}',
    '{"data":[{"id":""},{"id":"second"}]}',  # an empty first id wins, as head -n 1 did
    '{"data":[{"id":"sp ace"},{"id":"second"}]}',  # no closing quote after the class
    '{"data":[{"id":"x\\"y"},{"id":"z"}]}',
    '{"data":[{"id":"nul\\u0000"},{"id":"ok"}]}',
    '{"data":[{"object":"model","id":"late","x":1}]}',  # id not first in its object
    '{"data":[{"name":"id","ids":"no"}]}',
    '{"data":[{"ID":"upper"}]}',
    '{"data":[{"id":"a*b"},{"id":"[c]"},{"id":"d?"}]}',  # glob characters
    '{"data":[{"id":"a*b*"},{"id":"e"}]}',
    '"id":"top-level"',
    '\r"id":"after-cr"\r',
    '\v\f "id"\v:\f"vt-ff"',
    "not json at all",
    "",
    '{"detail":"Not Found"}',
    "<html><body>502 Bad Gateway</body></html>",
    '{"data":[{"id":"ünïcode"},{"id":"ascii"}]}',
    '{"data":[{"id":"' + "m" * 5000 + '"}]}',
    '{,{,,{"id":"after-empties"}',
    '"id":"x"' + "\n" * 3 + '"id":"y"',
    '{"data":[{"id":"-dash"},{"id":"/slash"}]}',
]


def run(shell: list[str], program: str, answer: str) -> str:
    out = subprocess.run(
        [*shell, "-c", program, "sh", answer],
        capture_output=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    return out.stdout.decode("utf-8", "replace")


@pytest.mark.skipif(not SHELLS, reason="neither dash nor bash is installed")
@pytest.mark.parametrize("answer", ANSWERS, ids=range(len(ANSWERS)))
def test_the_shell_reads_the_id_the_pipeline_read(answer):
    before = run(["sh"], f'model=$({PIPELINE}); printf "%s" "$model"', answer)
    for shell in SHELLS:
        now = run(shell, MODEL_ID_SH + 'first_model_id "$1"; printf "%s" "$model"', answer)
        assert now == before, (shell, answer[:80])


def test_the_probe_uses_it():
    """PROBE_SH reads the id with the function, and starts no tr, sed or head for it."""
    assert MODEL_ID_SH in probe.PROBE_SH
    assert 'first_model_id "$models"' in probe.PROBE_SH
    assert "| tr " not in probe.PROBE_SH


def test_the_function_leaves_the_shell_as_it_found_it():
    """IFS and globbing are restored: the snapshot's next sections split and glob."""
    program = (
        MODEL_ID_SH
        + 'first_model_id "$1"; set -- a\\ b; for w in $1; do echo "[$w]"; done; echo /et[c]'
    )
    for shell in SHELLS:
        assert run(shell, program, '{"id":"m"}') == "[a]\n[b]\n/etc\n"
