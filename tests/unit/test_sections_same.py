"""``@@remedy:same``: a file the snapshot printed before under the same real path is not
read again, and the reader copies it (issue 34)."""

from __future__ import annotations

import pytest
from pyinfra.api.exceptions import FactProcessError

from remedy.core.readings import sections

STORE = "/nix/store/aaaa-nixos-system/etc/systemd/system/x.service"


def answer(*lines: str) -> list[str]:
    return [*lines, sections.END]


def test_a_same_file_gets_the_content_printed_before():
    got = sections.split(answer(
        "@@remedy:section unit.files", f"@@remedy:file /etc/systemd/system/x.service {STORE}",
        "[Service]", "ExecStart=/bin/true", "",
        "@@remedy:section unit.next",
        f"@@remedy:file /nix/var/nix/profiles/system/etc/systemd/system/x.service {STORE}",
        sections.SAME,
    ), "T")  # fmt: skip
    (first,) = got["unit.files"][0].files
    (again,) = got["unit.next"][0].files
    assert again.path.startswith("/nix/var/nix/profiles/") and again.realpath == STORE
    assert again.text == first.text == "[Service]\nExecStart=/bin/true\n\n"
    again.lines.append("changed")  # a copy: the first file's lines stay as read
    assert first.text == "[Service]\nExecStart=/bin/true\n\n"


def test_an_empty_file_is_the_same_as_an_empty_file():
    got = sections.split(answer(
        "@@remedy:section a", f"@@remedy:file /a {STORE}",
        "@@remedy:section b", f"@@remedy:file /b {STORE}", sections.SAME,
    ), "T")  # fmt: skip
    assert got["b"][0].files[0].lines == []


def test_a_same_file_with_nothing_read_before_is_an_error_naming_it():
    with pytest.raises(FactProcessError, match="/b is said to be the same .* none was"):
        sections.split(answer("@@remedy:section b", f"@@remedy:file /b {STORE}",
                              sections.SAME), "T")  # fmt: skip


def test_the_marker_inside_a_file_after_its_first_line_is_content():
    got = sections.split(answer(
        "@@remedy:section a", f"@@remedy:file /a {STORE}", "x", sections.SAME,
    ), "T")  # fmt: skip
    assert got["a"][0].files[0].lines == ["x", sections.SAME]


def test_a_wrapper_printed_before_is_taken_from_the_start_scripts():
    """`wsame` after `wrapper W`: W's first 400 lines are those of the script printed
    under that name in unit.scripts; a wrapper said to be printed that was not is an
    error of the remote script, not an empty wrapper."""
    from pyinfra.api.exceptions import FactProcessError

    from remedy.core.readings import runtime
    from remedy.core.readings.sections import FileBlob

    text = ["#! /bin/bash -e", *(f"export V{i}=1" for i in range(450))]
    scripts = {"/nix/store/w": FileBlob("/nix/store/w", "/nix/store/w", text)}
    state = runtime.parse(["chain", "wrapper /nix/store/w", "wsame"], [], scripts)
    assert state.chain.wrappers["/nix/store/w"] == "\n".join(text[:400]) + "\n"
    with pytest.raises(FactProcessError, match="/nix/store/x is said to be a script"):
        runtime.parse(["chain", "wrapper /nix/store/x", "wsame"], [], scripts)
