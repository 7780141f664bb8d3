"""volatile_walk lists what the snapshot's `find` listed under /run/systemd/system (issue
30: one process fewer a read), with the shell's globs over two levels; where it cannot
tell (a directory deeper down, a name with a newline) it says so and find runs. Checked
against GNU find itself on real trees, under dash and bash --posix."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from facts import _remote

SHELLS = [s for s in (["dash"], ["bash", "--posix"]) if shutil.which(s[0])]


def walk(shell: list[str], *dirs: str) -> tuple[set[str], bool]:
    start = _remote.RUNTIME.index("volatile_walk() {")
    fn = _remote.RUNTIME[start : _remote.RUNTIME.index("\n}\n", start) + 3]
    script = "_nl='\n'\n" + fn + 'volatile_walk "$@"\nprintf "%s" "$_vf"; echo "|$_vw"'
    out = subprocess.run([*shell, "-c", script, "sh", *dirs], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    listed, _, fallback = out.rpartition("|")
    return set(listed.splitlines()), fallback.strip() == "1"


def find(*dirs: str) -> set[str]:
    argv = ["find", *dirs, "-mindepth", "1", "(", "-type", "l", "-o", "-type", "f", ")"]
    return set(
        subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split("\n")
    ) - {""}


@pytest.fixture
def run_dir(tmp_path):
    top = tmp_path / "system"
    top.mkdir()
    dropins = top / "tenstorrent-serving.service.d"
    dropins.mkdir()
    (dropins / "override.conf").write_text("[Service]\n")
    (dropins / "zz-debug env.conf").write_text("[Service]\n")
    (dropins / ".hidden.conf").write_text("")
    (dropins / "..odd").write_text("")
    (dropins / "a*b?.conf").write_text("")
    (top / "x.service").write_text("[Unit]\n")
    (top / "dangling.service").symlink_to(tmp_path / "nowhere")
    wants = top / "multi-user.target.wants"
    wants.mkdir()
    (wants / "x.service").symlink_to(top / "x.service")
    (top / "linked.d").symlink_to(dropins)  # a link to a directory: listed, not entered
    os.mkfifo(top / "a-fifo")  # neither a file nor a link: find leaves it out
    (top / "empty.d").mkdir()
    control = tmp_path / "system.control"
    control.mkdir()
    (control / "y.service.d").mkdir()
    (control / "y.service.d" / "50-CPUWeight.conf").write_text("[Service]\n")
    return str(top), str(control)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_two_levels_are_listed_as_find_lists_them(shell, run_dir):
    listed, fallback = walk(shell, *run_dir)
    assert not fallback
    assert listed == find(*run_dir)
    assert any(p.endswith("/zz-debug env.conf") for p in listed)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_deeper_directory_or_a_name_with_a_newline_leaves_it_to_find(shell, run_dir):
    top, _control = run_dir
    deep = os.path.join(top, "tenstorrent-serving.service.d", "sub")
    os.mkdir(deep)
    assert walk(shell, top)[1]
    os.rmdir(deep)
    assert not walk(shell, top)[1]
    with open(os.path.join(top, "two\nlines.conf"), "w"):
        pass
    assert walk(shell, top)[1]
