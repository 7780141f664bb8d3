"""Does the snapshot script print the same as before a change? (issue 34)

    python bench/snapshot_compare.py --twin NAME [--twin NAME ...] [--old-rev HEAD]
                                     [--rounds 1] [--show] [--shell "bash --posix"]

On each twin (up), runs the command of ``facts.serving.HostSnapshot`` as
tests/facts/record.py does (over SSH, the arguments of host ``cfx-llm2``'s data,
the twin's server URL) from the working tree (new) and from facts/_remote.py and
facts/serving.py of git revision OLD_REV (old), in the order old, new, old, and
compares the answers as they come over the wire (every byte escaped by sed's `l`).
Lines that differ between two reads of the same state are masked first: the
uptime, the clock, /proc/meminfo's figures, the probe's answer (ids, times). The
new answer passes if it equals one of the old ones; otherwise the differences are
printed. journalctl's JSON lines (their keys in another order at each read) are
compared with their keys sorted, the probe's JSON answer (the double's prose) not
at all. ``--shell`` runs both scripts with another shell than the twin's sh
(dash; NixOS's sh is bash in POSIX mode). ``--show`` prints the masked lines too.
Exit 1 if any twin differs.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyinfra_testing.util import get_command_string  # noqa: E402

import facts.serving  # noqa: E402
from remedy.core.config import host_data  # noqa: E402
from remedy.core.readings.sections import unescape  # noqa: E402
from remedy.twin import machine  # noqa: E402

SECTION = "@@remedy:section "
# sections whose every figure changes from one read to the next
VOLATILE_SECTIONS = {"memory.meminfo", "clock", "probe"}
DIGITS = re.compile(r"[0-9]+")
HEX_ID = re.compile(r"chatcmpl-[0-9a-f]+")


def old_modules(rev: str) -> types.ModuleType:
    """facts/serving.py of REV, with facts/_remote.py of REV under it."""

    def source(path: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                              check=True, capture_output=True, text=True).stdout  # fmt: skip

    remote = types.ModuleType("facts._remote_old")
    exec(compile(source("facts/_remote.py"), f"{rev}:facts/_remote.py", "exec"), remote.__dict__)
    serving_src = source("facts/serving.py").replace("from facts import _remote\n", "")
    serving = types.ModuleType("facts.serving_old")
    serving.__dict__["_remote"] = remote
    exec(compile(serving_src, f"{rev}:facts/serving.py", "exec"), serving.__dict__)
    return serving


def kwargs_for(twin: machine.Twin) -> dict:
    kwargs = host_data.from_host_data("cfx-llm2", {}).snapshot_kwargs()
    kwargs["server_url"] = twin.server_url
    return kwargs


def runnable(command: str, shell: str | None) -> str:
    """COMMAND as pyinfra runs a fact's: under `sh -c` (the facts' shell_executable), or
    SHELL. A command from before 2026-12-03 (`env K=V … sh -c SCRIPT`) ran its own sh."""
    if command.startswith("env "):
        return command.replace(" sh -c ", f" {shell} -c ", 1) if shell else command
    return f"{shell or 'sh'} -c {shlex.quote(command)}"


def answer(twin: machine.Twin, command: str) -> list[str]:
    """The answer, with each file said to be the same as one before written out."""
    proc = subprocess.run([*twin.ssh_argv(), command], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    return expanded(proc.stdout.splitlines())


def expanded(lines: list[str]) -> list[str]:
    """LINES with each ``@@remedy:same`` replaced by the lines of the file printed before
    under the same real path, and each ``wsame`` by ``wline`` and the first 400 lines of
    the script printed before under the wrapper's name, as the reader takes them (the old
    script read them again)."""
    out: list[str] = []
    files: dict[str, list[str]] = {}
    named: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if line.startswith("@@remedy:file "):
            name, real = line.rstrip("$")[len("@@remedy:file ") :].split(" ")[:2]
            current = None if real in files else files.setdefault(real, [])
            named.setdefault(name, files[real])
            out.append(line)
        elif line.rstrip("$") == "wsame" and out and out[-1].startswith("wrapper "):
            name = out[-1].rstrip("$")[len("wrapper ") :]
            out.extend("wline " + x for x in named.get(name, [line])[:400])
        elif line.rstrip("$") == "@@remedy:same" and current is None:
            real = out[-1].rstrip("$").split(" ")[-1]
            out.extend(files.get(real, [line]))
        elif line.startswith("@@remedy:"):
            current = None
            out.append(line)
        else:
            if current is not None:
                current.append(line)
            out.append(line)
    return out


def masked(lines: list[str]) -> list[str]:
    out, section = [], ""
    for line in lines:
        if line.startswith(SECTION):
            section = line[len(SECTION) :].split(" ", 1)[0].rstrip("$")
            out.append(line)
        elif section == "probe" and line.startswith("{"):
            out.append("{the model's answer}")
        elif section == "nix.switch" and line.startswith("journal {"):
            text = unescape(line)[len("journal ") :]
            try:
                out.append("journal " + json.dumps(json.loads(text), sort_keys=True))
            except ValueError:
                out.append(line)
        elif section in VOLATILE_SECTIONS or line.startswith("RemedyUptime="):
            out.append(DIGITS.sub("#", HEX_ID.sub("chatcmpl-#", line)))
        else:
            out.append(line)
    return out


def compare(twin: machine.Twin, old_cmd: str, new_cmd: str, show: bool) -> bool:
    old1 = answer(twin, old_cmd)
    new = answer(twin, new_cmd)
    old2 = answer(twin, old_cmd)
    if not old1 or not old1[-1].startswith("@@remedy:end"):
        print(f"{twin.name}: the old script's answer has no end marker")
        return False
    raw = sum(a != b for a, b in zip(old1, new, strict=False)) + abs(len(old1) - len(new))
    same = masked(new) in (masked(old1), masked(old2))
    print(f"{twin.name}: {len(new)} lines, "
          f"{'the same' if same else 'DIFFERENT'} (masked); {raw} line(s) differ "
          f"before masking (uptime, clock, meminfo, probe)")  # fmt: skip
    if show or not same:
        for line in difflib.unified_diff(masked(old1) if not same else old1,
                                         masked(new) if not same else new,
                                         "old", "new", lineterm="", n=1):  # fmt: skip
            print("  " + line[:160])
    return same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--twin", action="append", required=True)
    ap.add_argument("--old-rev", default="HEAD")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--show", action="store_true", help="print the masked differences too")
    ap.add_argument("--shell", help="the shell that runs both scripts, e.g. 'bash --posix'")
    args = ap.parse_args()
    old = old_modules(args.old_rev)
    ok = True
    for name in args.twin:
        twin = machine.load(name)
        kwargs = kwargs_for(twin)
        old_cmd = get_command_string(old.HostSnapshot().command(**kwargs))
        new_cmd = get_command_string(facts.serving.HostSnapshot().command(**kwargs))
        old_cmd, new_cmd = runnable(old_cmd, args.shell), runnable(new_cmd, args.shell)
        if old_cmd == new_cmd:
            print(f"{name}: the old and new commands are the same text")
        for _ in range(args.rounds):
            ok = compare(twin, old_cmd, new_cmd, args.show) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
