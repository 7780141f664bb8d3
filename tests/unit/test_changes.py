"""What a switch changes beyond the managed settings (remedy.core.readings.changes)."""

from __future__ import annotations

from remedy.core.readings import changes


def test_kernel_parameters_that_change_need_a_reboot_and_are_shown_as_a_diff():
    lines = [
        "file kernel - -",
        "file initrd /nix/store/a-initrd /nix/store/a-initrd",
        "file kernel-modules /nix/store/m1 /nix/store/m2",
        "params-old hugepagesz=1G hugepages=4 iommu=pt",
        "params-new hugepagesz=1G hugepages=2 iommu=pt",
    ]
    files, removed, added = changes.parse_boot(lines)
    assert files == ("kernel-modules",)
    assert (removed, added) == (("hugepages=4",), ("hugepages=2",))
    c = changes.SystemChanges(files, removed, added)
    assert c.reboot_for == ["kernel-modules", "the kernel parameters"]
    assert c.summary()[1] == "kernel parameters: -hugepages=4 +hugepages=2"


def test_package_versions_are_capped_and_counted():
    text = "\n".join(
        ["\x1b[1mvllm-tt\x1b[0m: 0.9.2 → 0.9.3, +1.2 KiB", "nixos-system-cfx-llm2: +0.1 KiB"]
        + [f"pkg{i}: 1.{i} → 2.{i}" for i in range(12)]
    )
    found = changes.parse_diff_closures(text)
    assert found[0] == "vllm-tt: 0.9.2 → 0.9.3, +1.2 KiB"  # colours dropped
    assert not any(p.startswith("nixos-system") for p in found)  # a size alone
    summary = changes.SystemChanges(packages=found).summary()
    assert len(summary) == 11 and summary[-1] == "… and 3 more packages change"


def test_nothing_changes_nothing_is_said():
    same = ["file kernel - -", "params-old a b", "params-new b a"]
    files, removed, added = changes.parse_boot(same)
    assert changes.SystemChanges(files, removed, added).summary() == []


def test_diff_closures_as_each_nix_prints_it_names_the_forks_new_version():
    from pathlib import Path

    from remedy.twin import fixtures

    raw = Path(__file__).parents[1] / "facts" / "raw"
    for tag in ("nix_2_26", "nix_2_8"):
        found = changes.parse_diff_closures((raw / f"{tag}.diff_closures_heavy.txt").read_text())
        want = f"vllm-tt: {fixtures.VLLM_VERSION} → {fixtures.HEAVY_VLLM_VERSION}"
        assert any(p.startswith(want) for p in found), (tag, found)
