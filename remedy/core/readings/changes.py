"""What a switch to a built system will change beyond the managed settings (pure).

After the build and before the switch remedy compares the running system with the
proven one, from the host's own answers:

* whether the kernel, the initrd or the kernel modules change (``kernel``,
  ``initrd``, ``kernel-modules`` of each toplevel): the new generation then needs a
  reboot to take full effect;
* the ``kernel-params`` diff (also a reboot: the running kernel keeps its command line);
* the packages whose version changes, from ``nix store diff-closures`` between the
  two systems, summarised to at most ``MAX_PACKAGES`` lines and the count of the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PACKAGES = 10
BOOT_FILES = ("kernel", "initrd", "kernel-modules")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class SystemChanges:
    boot_files: tuple[str, ...] = ()  # of BOOT_FILES, those that change
    params_removed: tuple[str, ...] = ()
    params_added: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()  # "vllm-tt: 0.9.2 → 0.9.3, +1.2 KiB"
    unread: str | None = None  # why the package diff is missing

    @property
    def reboot_for(self) -> list[str]:
        """What only a reboot activates."""
        out = [f for f in self.boot_files]
        if self.params_removed or self.params_added:
            out.append("the kernel parameters")
        return out

    def summary(self) -> list[str]:
        """For people: at most 80 columns a line once wrapped, packages capped."""
        lines = []
        if self.reboot_for:
            lines.append(
                "the new generation needs a reboot to take full effect: "
                + ", ".join(self.reboot_for)
                + " change"
            )
        if self.params_removed or self.params_added:
            lines.append(
                "kernel parameters: "
                + " ".join(
                    [*(f"-{p}" for p in self.params_removed), *(f"+{p}" for p in self.params_added)]
                )
            )
        shown = self.packages[:MAX_PACKAGES]
        for p in shown:
            lines.append(f"package {p}")
        if len(self.packages) > len(shown):
            lines.append(f"… and {len(self.packages) - len(shown)} more packages change")
        if self.unread:
            lines.append(f"packages: {self.unread}")
        return lines


def parse_boot(lines: list[str]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """``remedy/host/system_boot.sh``'s answer: (boot files that change, params removed,
    params added)."""
    changed, old, new = [], "", ""
    for line in lines:
        word, _, rest = line.partition(" ")
        if word == "file":
            name, _, pair = rest.partition(" ")
            a, _, b = pair.partition(" ")
            if a != b:
                changed.append(name)
        elif word == "params-old":
            old = rest
        elif word == "params-new":
            new = rest
    before, after = old.split(), new.split()
    removed = tuple(p for p in before if p not in after)
    added = tuple(p for p in after if p not in before)
    return tuple(changed), removed, added


def parse_diff_closures(text: str) -> tuple[str, ...]:
    """``nix store diff-closures`` lines (name: old → new, size), colours dropped; a
    package whose only change is its size is left out (a rebuild, not a new version)."""
    out = []
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).strip()
        m = re.match(r"^([^:\s]+): (.*)$", line)
        if not m or "→" not in m.group(2):
            continue
        out.append(line)
    return tuple(out)


def read_answer(lines: list[str]) -> SystemChanges:
    """The changes as a program said them: system_boot's lines
    (``remedy/host/system_boot.sh``), ``diff LINE`` (nix store diff-closures) and
    ``unread WHY`` (prove.sh's, and system_changes.sh's)."""
    boot = [x for x in lines if not x.startswith(("diff ", "unread "))]
    diff = "\n".join(x[5:] for x in lines if x.startswith("diff "))
    unread = next((x[7:] for x in lines if x.startswith("unread ")), None)
    files, removed, added = parse_boot(boot)
    packages = () if unread else parse_diff_closures(diff)
    return SystemChanges(files, removed, added, packages, unread)


def to_json(found: SystemChanges) -> dict:
    return {
        "reboot_for": found.reboot_for,
        "kernel_params_removed": list(found.params_removed),
        "kernel_params_added": list(found.params_added),
        "packages": list(found.packages),
        "packages_unread": found.unread,
    }
