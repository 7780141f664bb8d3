"""Names with a blank or another odd character on the snapshot's lines.

systemctl prints DropInPaths= as a blank-separated list, a name that needs it quoted
(systemd's shell_maybe_quote). The snapshot reads it into one name a line
(`dropin_lines`). It used to split that list at every blank, so a drop-in named
`zz-debug env.conf` was never read. A name among blank-separated fields (a file's
marker, `link`, `unit-env`, `default-env`) is written by `qname` and read back by
`sections.read_name`. Both are tested under dash and bash --posix.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from facts import _remote
from remedy.core.readings import runtime, sections

SHELLS = [s for s in (["dash"], ["bash", "--posix"]) if shutil.which(s[0])]

D = "/run/systemd/system/tenstorrent-serving.service.d/"
# `systemctl show -p DropInPaths tenstorrent-serving.service` on a twin with these
# drop-ins in /run: the same from systemd 257 (257.13-1~deb13u1) and 252 (252.39-1~deb12u2),
# recorded 2026-12-03.
RECORDED = (
    f'"{D}zz-\\$dollar.conf" "{D}zz-back\\\\slash.conf" "{D}zz-debug env.conf" '
    f'{D}zz-plain.conf "{D}zz-q\\"uote.conf" "{D}zz-star*.conf" "{D}zz-tab\\tx.conf" '
    f'"{D}zz-tick\\`.conf" {D}zz-ö.conf'
)
NAMES = [D + n for n in ("zz-$dollar.conf", "zz-back\\slash.conf", "zz-debug env.conf",
                         "zz-plain.conf", 'zz-q"uote.conf', "zz-star*.conf", "zz-tab\tx.conf",
                         "zz-tick`.conf", "zz-ö.conf")]  # fmt: skip


def shell_function(text: str, name: str) -> str:
    start = text.index(f"{name}() {{")
    return text[start : text.index("\n}\n", start) + 3]


def run(shell: list[str], script: str, *args: str) -> str:
    prelude = "_nl='\n'\n_tab='\t'\n"
    return subprocess.run(
        [*shell, "-c", prelude + script, "sh", *args],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_dropin_paths_as_systemctl_quotes_them_are_read_one_name_a_line(shell):
    script = shell_function(_remote.UNIT, "dropin_lines")
    script += 'dropins=$1\ndropin_lines\nprintf "%s" "$dropins"'
    assert run(shell, script, RECORDED) == "".join(n + "\n" for n in NAMES)
    assert run(shell, script, f"{D}a.conf  {D}b.conf ") == f"{D}a.conf\n{D}b.conf\n"
    assert run(shell, script, "") == ""


ODD = [*NAMES, "/a b/c  d ", "\\040", "\\\\", "tail\\", "/x\ty z\\t", "plain", ""]


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_name_among_fields_is_read_back_as_it_was(shell):
    script = shell_function(_remote.PRELUDE, "qname")
    script += 'for a in "$@"; do qname "$a"; printf "%s|\\n" "$_q"; done'
    written = run(shell, script, *ODD).split("|\n")[:-1]
    assert all(" " not in w and "\t" not in w for w in written), written
    assert [sections.read_name(w) for w in written] == ODD


def test_a_file_marker_and_a_link_line_keep_their_blanks():
    out = [
        sections.ESCAPED,
        "@@remedy:section volatile.files$",
        "@@remedy:file /run/x/zz-debug\\\\040env.conf /run/x/zz-debug\\\\040env.conf$",
        "[Service]$",
        "@@remedy:end$",
    ]
    (sec,) = sections.split(out, "t")["volatile.files"]
    (blob,) = sec.files
    assert (blob.path, blob.realpath, blob.lines) == (
        "/run/x/zz-debug env.conf", "/run/x/zz-debug env.conf", ["[Service]"],
    )  # fmt: skip
    state = runtime.parse(["link /run/x/a\\040b.conf /etc/y\\040z", "chain",
                           "unit-env dropin /run/x/a\\040b.conf /r/a\\040b.conf "
                           "EnvironmentFile=/e"], [])  # fmt: skip
    assert [(f.path, f.link) for f in state.files] == [("/run/x/a b.conf", "/etc/y z")]
    (line,) = state.chain.unit_env
    assert (line.path, line.realpath, line.value) == ("/run/x/a b.conf", "/r/a b.conf", "/e")
