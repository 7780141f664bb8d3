"""The environment a start chain's shell wrappers give a program, read without running them.

nixpkgs wraps every Python application (``pkgs/development/interpreters/python/wrap.sh``:
``wrapProgram`` with ``--prefix PATH``, ``--set PYTHONNOUSERSITE true`` and
``makeWrapperArgs``). ``makeShellWrapper`` (``pkgs/build-support/setup-hooks/
make-wrapper.sh``) writes a bash script of assignments, then ``exec -a "$0"
"/nix/store/…/bin/.NAME-wrapped" "$@"``:

    export PYTHONNOUSERSITE='true'                       # --set
    export VAR=${VAR-'value'}                             # --set-default
    PATH=${PATH:+':'$PATH':'}                             # --prefix PATH : DIR
    PATH=${PATH/':''DIR'':'/':'}
    PATH='DIR'$PATH
    PATH=${PATH#':'}
    PATH=${PATH%':'}
    export PATH
    if [[ $VAR != *':''DIR'':'* ]]; then                  # --suffix
        VAR=$VAR'DIR'
    fi
    unset VAR                                             # --unset

Older make-wrapper.sh wrote ``export VAR=VALUE${VAR:+SEP$VAR}`` for a prefix and
``export VAR+=${VAR:+SEP}VALUE`` for a suffix. ``evaluate`` computes those assignments
from the environment the wrapper inherits, like bash would. A line it cannot read (a
``--run`` command, a command substitution) leaves every variable it names unknown
(``UNKNOWN``), never guessed.
"""

from __future__ import annotations

import re

UNKNOWN = None  # a variable the wrapper sets to a value that cannot be known statically
REMOVED = "\0"  # what ``evaluate`` maps an ``unset`` variable to (no value holds a NUL)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN = re.compile(rf"^(?:export\s+)?({_NAME})(\+?)=(.*)$")
_EXPORT_ONLY = re.compile(rf"^export(?:\s+{_NAME})+$")
_UNSET = re.compile(rf"^unset((?:\s+{_NAME})+)$")
_IF_NOT_IN = re.compile(rf"^if \[\[ \$({_NAME}) != \*(.+)\* \]\]; then$")
# Lines that set no variable: the shebang, comments, bash options, the exec, a chdir,
# makeWrapper's flags array.
_INERT = re.compile(r"^(#.*|set [-+][a-z]+|exec\s.*|cd\s.*|declare -a extraFlagsArray=\(\)|fi)$")


class _Opaque(Exception):
    """A word whose value depends on something other than the environment."""


class _Word:
    """A bash word of the forms make-wrapper.sh writes, evaluated against ENV."""

    def __init__(self, text: str, env: dict[str, str | None]):
        self.s, self.i, self.env = text, 0, env

    def value(self, stop: str = "", quoted: bool = False) -> str:
        out = []
        while self.i < len(self.s) and self.s[self.i] not in stop:
            c = self.s[self.i]
            if quoted and c not in "$\\`":
                out.append(c)
                self.i += 1
            elif c == "'":
                end = self.s.find("'", self.i + 1)
                if end < 0:
                    raise _Opaque
                out.append(self.s[self.i + 1 : end])
                self.i = end + 1
            elif c == "\\" and self.i + 1 < len(self.s):
                out.append(self.s[self.i + 1])
                self.i += 2
            elif c == '"':
                self.i += 1
                out.append(self.value(stop='"', quoted=True))
                if self.i >= len(self.s):
                    raise _Opaque
                self.i += 1
            elif c == "$" and self.s.startswith("$'", self.i):
                out.append(self._ansi_c())
            elif c == "$":
                out.append(self._expansion())
            elif c in "`;&|<>()*?[ \t":
                raise _Opaque
            else:
                out.append(c)
                self.i += 1
        return "".join(out)

    def _ansi_c(self) -> str:
        out, i = [], self.i + 2
        escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "e": "\x1b"}
        while i < len(self.s) and self.s[i] != "'":
            if self.s[i] == "\\" and i + 1 < len(self.s):
                if self.s[i + 1] not in escapes:
                    raise _Opaque
                out.append(escapes[self.s[i + 1]])
                i += 2
            else:
                out.append(self.s[i])
                i += 1
        if i >= len(self.s):
            raise _Opaque
        self.i = i + 1
        return "".join(out)

    def _var(self, name: str) -> str | None:
        value = self.env.get(name, "")
        if value is UNKNOWN:
            raise _Opaque
        return value

    def _expansion(self) -> str:
        m = re.compile(_NAME).match(self.s, self.i + 1)
        if self.s.startswith("${", self.i):
            m = re.compile(_NAME).match(self.s, self.i + 2)
            if not m:
                raise _Opaque
            name, self.i = m.group(0), m.end()
            return self._braced(name)
        if not m:
            raise _Opaque
        self.i = m.end()
        return self._var(m.group(0))

    def _braced(self, name: str) -> str:
        op = self.s[self.i : self.i + 2]
        if op.startswith("}"):
            self.i += 1
            return self._var(name)
        is_set = name in self.env
        if is_set and self.env[name] is UNKNOWN:
            raise _Opaque
        current = self.env.get(name) or ""
        if op in (":+", ":-"):
            self.i += 2
            word = self.value(stop="}")
            result = (word if current else "") if op == ":+" else (current or word)
        elif op[0] in "+-":
            self.i += 1
            word = self.value(stop="}")
            result = (word if is_set else "") if op[0] == "+" else (current if is_set else word)
        elif op[0] in "#%":
            self.i += 1
            pattern = self.value(stop="}")
            if op[0] == "#":
                result = current[len(pattern) :] if current.startswith(pattern) else current
            else:
                result = current[: -len(pattern)] if pattern and current.endswith(pattern) \
                    else current  # fmt: skip
        elif op[0] == "/":
            self.i += 1
            pattern = self.value(stop="/}")
            replacement = ""
            if self.s.startswith("/", self.i):
                self.i += 1
                replacement = self.value(stop="}")
            result = current.replace(pattern, replacement, 1) if pattern else current
        else:
            raise _Opaque
        if not self.s.startswith("}", self.i):
            raise _Opaque
        self.i += 1
        return result


def word(text: str, env: dict[str, str | None]) -> str | None:
    """TEXT (one bash word) evaluated against ENV; UNKNOWN when it cannot be."""
    parser = _Word(text, env)
    try:
        value = parser.value()
    except _Opaque:
        return UNKNOWN
    return value if parser.i == len(text) else UNKNOWN


def evaluate(text: str, inherited: dict[str, str | None]) -> dict[str, str | None]:
    """What a wrapper script TEXT sets: {variable: value, UNKNOWN, or "" removed}, from
    the environment INHERITED (a value UNKNOWN there makes what is built on it UNKNOWN).
    Only the variables the wrapper touches are returned; a removed one maps to
    ``REMOVED``."""
    env: dict[str, str | None] = dict(inherited)
    touched: dict[str, str | None] = {}
    skipping = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if skipping:
            skipping = line != "fi"
            continue
        if line.startswith("exec "):
            break
        cond = _IF_NOT_IN.match(line)
        if cond:
            name, pattern = cond.group(1), word(cond.group(2), env)
            current = env.get(name) or ""
            if pattern is UNKNOWN or env.get(name, "") is UNKNOWN:
                touched[name] = env[name] = UNKNOWN
                skipping = True  # the branch's assignment is UNKNOWN as well
            else:
                skipping = pattern in current
            continue
        m = _ASSIGN.match(line)
        if m:
            name, append, rhs = m.groups()
            value = word(rhs, env)
            if append and value is not UNKNOWN:
                before = env.get(name, "")
                value = UNKNOWN if before is UNKNOWN else before + value
            env[name] = touched[name] = value
            continue
        m = _UNSET.match(line)
        if m:
            for name in m.group(1).split():
                env.pop(name, None)
                touched[name] = REMOVED
            continue
        if _EXPORT_ONLY.match(line) or _INERT.match(line):
            continue
        # anything else (a --run command, `source FILE`): what it names is unknown
        for name in re.findall(rf"\b({_NAME})\+?=", line):
            env[name] = touched[name] = UNKNOWN
    return touched


def exec_target(text: str) -> str | None:
    """The program a makeWrapper script execs (``exec -a "$0" "/nix/store/…"``), or None."""
    for raw in text.splitlines():
        m = re.match(r'^\s*exec\s+(?:-a\s+(?:"[^"]*"|\S+)\s+)?"?([^"\s]+)"?', raw)
        if m:
            return m.group(1)
    return None
