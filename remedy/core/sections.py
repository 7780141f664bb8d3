"""Delimited sections: how one remote command answers several questions at once.

pyinfra runs each fact as its own SSH exec (~130 ms). The engine's facts share
one remote script whose output is cut into sections by marker lines::

    @@remedy:section unit.show
    ...
    @@remedy:file /run/systemd/system/x.service.d/override.conf /run/...
    ...

Section names are fixed by the engine; ``@@remedy:file PATH REALPATH`` lines
introduce the content of one file within a section.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyinfra.api.exceptions import FactProcessError

SECTION = "@@remedy:section "
FILE = "@@remedy:file "
END = "@@remedy:end"


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
    sections: dict[str, list[Section]] = {}
    current: Section | None = None
    blob: FileBlob | None = None
    saw_end = False
    for line in output:
        if line.startswith(SECTION):
            name, _, arg = line[len(SECTION) :].strip().partition(" ")
            current = Section(name, arg)
            sections.setdefault(name, []).append(current)
            blob = None
        elif line.startswith(FILE) and current is not None:
            path, _, real = line[len(FILE) :].strip().partition(" ")
            blob = FileBlob(path, real or path)
            current.files.append(blob)
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
