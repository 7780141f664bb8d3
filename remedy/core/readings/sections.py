"""Delimited sections: how one remote command answers several questions at once.

pyinfra runs each fact as its own SSH exec (~130 ms). The engine's facts share
one remote script whose output is cut into sections by marker lines::

    @@remedy:section unit.show
    ...
    @@remedy:file /run/systemd/system/x.service.d/override.conf /run/...
    ...

Section names are fixed by the engine; ``@@remedy:file PATH REALPATH`` lines
introduce the content of one file within a section (each name as ``read_name`` reads
it). ``@@remedy:same`` right after one
says that its content is that of the file printed earlier under the same REALPATH (the
script reads each file once: issue 34).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pyinfra.api.exceptions import FactProcessError

SECTION = "@@remedy:section "
FILE = "@@remedy:file "
SAME = "@@remedy:same"
END = "@@remedy:end"
# The first line of an answer whose every other line went through ``LC_ALL=C sed -n 'l 0'``
# on the host (facts/_remote.py): pure ASCII on the wire, whatever bytes the host holds
# (a file name that is not UTF-8 once wedged every read in paramiko's decoder).
ESCAPED = "@@remedy:escaped"
ESCAPE_SH = "LC_ALL=C sed -n 'l 0'"

_SED_ESCAPES = {b"\\": b"\\", b"a": b"\a", b"b": b"\b", b"f": b"\f", b"n": b"\n",
                b"r": b"\r", b"t": b"\t", b"v": b"\v"}  # fmt: skip
_SED_ESCAPE = re.compile(rb"\\([0-7]{3}|.)")


def unescape(line: str) -> str:
    """One line as sed's ``l`` wrote it (``\\ooo`` for a byte that is not printable ASCII,
    ``\\t``, ``\\\\``…, then ``$``), back to its text: UTF-8, and a byte that is not shown
    escaped (``zz-\\xff.conf``)."""
    if line.endswith("$"):
        line = line[:-1]
    if "\\" not in line:
        return line

    def byte(m: re.Match) -> bytes:
        code = m.group(1)
        return bytes([int(code, 8)]) if len(code) == 3 else _SED_ESCAPES.get(code, code)

    return _SED_ESCAPE.sub(byte, line.encode("ascii", "backslashreplace")).decode(
        "utf-8", "backslashreplace"
    )


_FIELD_ESCAPE = re.compile(r"\\(\\|040|011|012)")
_FIELD_CHARS = {"\\": "\\", "040": " ", "011": "\t", "012": "\\n"}


def read_name(text: str) -> str:
    """A name as the host printed it among blank-separated fields (``qname`` in
    remedy/host/facts/prelude.sh: a backslash as ``\\\\``, a blank as ``\\040``, a tab as
    ``\\011``, a newline as ``\\012``), back to the name. A newline is named ``\\n``, as
    a byte that is not UTF-8 is named ``\\xNN``: one entry, on one line."""
    if "\\" not in text:
        return text
    return _FIELD_ESCAPE.sub(lambda m: _FIELD_CHARS[m.group(1)], text)


@dataclass
class FileBlob:
    path: str
    realpath: str
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")


@dataclass
class Section:
    name: str
    arg: str
    lines: list[str] = field(default_factory=list)
    files: list[FileBlob] = field(default_factory=list)


def split(output: list[str], fact: str) -> dict[str, list[Section]]:
    """Group output lines by section name; garbage before the first marker is an error."""
    if output and output[0].strip() == ESCAPED:
        output = [unescape(line) for line in output[1:]]
    sections: dict[str, list[Section]] = {}
    current: Section | None = None
    blob: FileBlob | None = None
    saw_end = False
    printed: dict[str, FileBlob] = {}  # the first file under each real path
    for line in output:
        if line.startswith(SECTION):
            name, _, arg = line[len(SECTION) :].strip().partition(" ")
            current = Section(name, arg)
            sections.setdefault(name, []).append(current)
            blob = None
        elif line.startswith(FILE) and current is not None:
            path, _, real = line[len(FILE) :].strip().partition(" ")
            path, real = read_name(path), read_name(real)
            blob = FileBlob(path, real or path)
            current.files.append(blob)
            printed.setdefault(blob.realpath, blob)
        elif line.strip() == SAME and blob is not None and not blob.lines:
            first = printed.get(blob.realpath)
            if first is None or first is blob:
                raise FactProcessError(
                    f"{fact}: {blob.path} is said to be the same as a file read before under "
                    f"{blob.realpath}, and none was: the remote script is broken"
                )
            blob.lines = list(first.lines)
        elif line.strip() == END:
            saw_end = True
        elif current is None:
            if line.strip():
                raise FactProcessError(
                    f"{fact}: unexpected output before the first section marker: {line[:120]!r} "
                    "(is something printing from a login script?)"
                )
        elif blob is not None:
            blob.lines.append(line)
        else:
            current.lines.append(line)
    if not sections:
        raise FactProcessError(
            f"{fact}: no section markers in the output; the remote script "
            "did not run (is /bin/sh there?)"
        )
    if not saw_end:
        raise FactProcessError(f"{fact}: output ends before {END}; the remote script was cut short")
    return sections


def one(sections: dict[str, list[Section]], name: str, fact: str) -> Section:
    found = sections.get(name)
    if not found:
        raise FactProcessError(f"{fact}: section {name!r} missing from the output")
    return found[0]
