"""The host-side engine: every program remedy runs on a host, kept as files here.

``lib.sh`` is what every step program shares; ``steps/NAME.sh`` is one step's guard,
body and answer. A step program is the library followed by the step's text
(``step_program``): the deploy's operation yields it, the manual script carries it,
and both run the same text. Other files are programs of their own (the run journal's
trust, what runs on a builder, ...), which a text takes in with an include line.

Only this module reads the files; it adds nothing to them but the includes.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_INCLUDE = re.compile(r"^# @include (\S+)\n", re.M)
_INCLUDE_TEXT = re.compile(r"^# @include-text ([A-Za-z_][A-Za-z0-9_]*) (\S+)\n", re.M)


def _printer(name: str, body: str) -> str:
    """A function NAME that prints BODY (a here-document: nothing in it is expanded)."""
    tag = f"REMEDY_TEXT_{name}"
    return f"{name}() {{\n  cat <<'{tag}'\n{body.rstrip(chr(10))}\n{tag}\n}}\n"


@functools.cache
def text(name: str) -> str:
    """The program file NAME (relative to this package), with its includes: ``# @include
    FILE`` takes FILE's text in where it stands; ``# @include-text NAME FILE`` defines
    a function NAME that prints it (a program to hand to ``sh -c "$(NAME)"``, here or
    on a builder)."""
    raw = (resources.files(__package__) / name).read_text(encoding="utf-8")
    raw = _INCLUDE_TEXT.sub(lambda m: _printer(m.group(1), text(m.group(2))), raw)
    return _INCLUDE.sub(lambda m: text(m.group(1)), raw)


def step_names() -> tuple[str, ...]:
    """Every step program, by name."""
    folder = resources.files(__package__) / "steps"
    return tuple(sorted(p.name[:-3] for p in folder.iterdir() if p.name.endswith(".sh")))


@functools.cache
def step_program(name: str) -> str:
    """The text of step NAME's program: the library, then the step's own."""
    return text("lib.sh") + "\n# ---- the step: " + name + "\n" + text(f"steps/{name}.sh")
