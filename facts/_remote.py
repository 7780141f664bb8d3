"""The remote side of the engine's facts: constant shell snippets, one per section.

Host data never enters the script text: it is exported in assignments before it
(``export 'REMEDY_UNIT=…' ; SCRIPT``), quoted by pyinfra. Every snippet merges
its stderr into stdout (pyinfra hands facts stdout only) and the script always
ends with the end marker, so a cut-short answer is detected.
"""

from __future__ import annotations

from pyinfra.api import QuoteString, StringCommand

from remedy import host
from remedy.core.config import options
from remedy.core.programs import commands, journal
from remedy.core.readings import probe
from remedy.core.readings.sections import END, ESCAPE_SH, ESCAPED, SAME

PRELUDE = (
    host.text("facts/prelude.sh")
    .replace("@EXEC_PATH_SED@", commands.EXEC_PATH_SED)
    .replace("@EXEC_TARGET_SED@", commands.EXEC_TARGET_SED)
    .replace("@TAB@", "\t")
    .replace("@SAME@", SAME)
)


PATHS_TOO = host.text("facts/paths_too.sh")


def _tagged(program: str, tag: str) -> str:
    """sed's s///p PROGRAM printing TAG before what it printed."""
    head, sep, tail = program.rpartition("/\\1/p")
    assert sep and not tail, program
    return f"{head}/{tag}\\1/p"


UNIT = (
    host.text("facts/unit.sh")
    .replace("@SWITCH_UNIT@", commands.SWITCH_UNIT)
    .replace("@X_SED@", _tagged(commands.EXEC_PATH_SED, "x"))
    .replace("@E_SED@", r"s/^[[:space:]]*\(EnvironmentFile=\)/e\1/p")
    .replace("@P_SED@", r"s/^[[:space:]]*\(PassEnvironment=\)/e\1/p")
    .replace("@V_SED@", r"s/^[[:space:]]*EnvironmentFile=-\{0,1\}[[:space:]]*/v/p")
    .replace("@D_SED@", r"s/^[[:space:]]*DefaultEnvironment=/d/p")
    .replace("@EXEC_TARGET_W@", commands.EXEC_TARGET_SED[: -len("/p")] + "/w /dev/fd/3")
)

RUNTIME = host.text("facts/runtime.sh").replace("@EXEC_TARGET_SED@", commands.EXEC_TARGET_SED)

MEMORY = host.text("facts/memory.sh")

CLOCK = host.text("facts/clock.sh")

NIX_VERSION = (
    (journal.TRUST_SH + journal.TRUST_ALL_SH + host.text("facts/nix_version.sh"))
    .replace("@RECORD@", options.NIX_VERSION_RECORD)
    .replace("@OPTIONS_RECORD@", options.RECORD)
    .replace("@MODEL_RECORD@", probe.MODEL_RECORD)
)

FLAKE = host.text("facts/flake.sh")

JOURNAL = journal.SNIPPET

GENERATIONS = host.text("facts/generations.sh")

REBOOT = host.text("facts/reboot.sh")

SWITCH = host.text("facts/switch.sh").replace("@SWITCH_UNIT@", commands.SWITCH_UNIT)

PROBE = (
    host.text("facts/probe.sh")
    .replace("@MODEL_RECORD@", probe.MODEL_RECORD)
    .replace("@STATUS@", probe.STATUS_MARK)
)


# The shell that runs every fact's command: the facts set it as their shell_executable,
# so pyinfra wraps the command in `sh -c` whatever shell a host's data names.
SHELL = "sh"

# shellcheck's checks that do not fit a script made of sections (tests/unit/
# test_one_engine.py lints every fact's script): SC2317, a function a section does not
# call; SC2154, a variable an earlier section set; SC1003, sed's '$a\\'.
LINT = "# shellcheck disable=SC2317,SC2154,SC1003"


def command(snippets: list[str], env: dict[str, str]) -> StringCommand:
    """``export K=V …`` and one script for all SNIPPETS: one remote round trip, run by the
    ``sh -c`` that pyinfra wraps it in (SHELL; the bash a login shell runs execs it).
    The host data is in the quoted assignments, never in the script. Every line of the
    answer goes through sed's ``l`` (``remedy.core.readings.sections.unescape`` reads it
    back), so no byte the host holds reaches the SSH client as text it cannot decode."""
    if RUNTIME in snippets and UNIT not in snippets[: snippets.index(RUNTIME)]:
        raise ValueError("facts._remote.RUNTIME reads what UNIT read: put UNIT before it")
    body = "\n".join([PRELUDE, *snippets, f"echo '{END}'"])
    script = f"{LINT}\necho '{ESCAPED}'\n(\n{body}\n) 2>/dev/null | {ESCAPE_SH}\nexit 0"
    parts: list = []
    if env:
        parts = ["export", *(QuoteString(f"{k}={v}") for k, v in sorted(env.items())), ";"]
    return StringCommand(*parts, script)


BUILT = host.text("facts/built.sh")


OPTIONS_RECORD = host.text("facts/options_record.sh").replace("@RECORD@", options.RECORD)
