"""Issue 20, pure parts: Nix and NixOS output the twin's Nix versions do not print.

Recorded output (``tests/facts/raw``, ``tests/facts/serving.*``) comes from twins;
``tests/facts/documented`` holds the newer Nix shapes, written from the manual and
release notes (see its README). Version strings of Nix builds these machines do not
have come from the same places: nixVersions.git, Lix's and Determinate's own.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest
from pyinfra.api.exceptions import FactProcessError

import facts.serving
from remedy import host
from remedy.core.programs import bump, commands
from remedy.core.readings import memory, nix, systemd
from remedy.core.readings.serving import next_boot_dropins
from remedy.twin.fixtures import HEAVY_VLLM_VERSION

FACTS = Path(__file__).parent.parent / "facts"
RAW = FACTS / "raw"
DOCUMENTED = FACTS / "documented"


# -- 1. writeShellApplication is no compile -------------------------------------------


@pytest.mark.parametrize("version", ["nix_2_26", "nix_2_8"])
def test_a_strict_shell_start_script_is_a_text_file_and_vllm_still_compiles(version):
    """Recorded: a bump to the strict-shell start script on top of a vllm-tt change. Its
    checkPhase runs shellcheck-minimal (nixpkgs 24.11 trivial-builders), a build input
    the host must build here (the fixture's stand-in is in no cache): judged as any
    derivation, that is a compile (issue 44 item 10); the script itself is not."""
    text = (RAW / f"{version}.derivation_show_strict_shell.json").read_text()
    drvs = {d.name: d for d in nix.parse_derivation_show(text)}
    script = drvs["start-tenstorrent-serving"]
    assert script.env.get("preferLocalBuild") != "1", "the trap: it looks like a package"
    assert script.text_file and not script.compiles
    assert "shellcheck" in script.env.get("checkPhase", ""), script.env
    heavy = nix.local_build_derivations(text)
    assert sorted(h.rsplit("/", 1)[-1].split("-", 1)[1] for h in heavy) == [
        "shellcheck-minimal-0.10.0.drv",
        f"vllm-tt-{HEAVY_VLLM_VERSION}.drv",
    ]


def test_a_run_command_that_is_not_a_text_file_still_compiles():
    drv = nix.Derivation(
        "/nix/store/x-thing.drv",
        "/bin/sh",
        {"buildCommand": "make -j8 install", "passAsFile": "buildCommand"},
        [],
        [],
    )
    assert drv.compiles


def _documented_script(version: str = "nix_2_34") -> nix.Derivation:
    text = (DOCUMENTED / f"{version}.derivation_show.json").read_text()
    return {d.name: d for d in nix.parse_derivation_show(text)}["start-tenstorrent-serving"]


def test_a_text_file_is_known_by_its_build_command_as_nixpkgs_writes_it():
    """Issue 28 item 1: writeTextFile gives the derivation no `destination` attribute;
    its build command moves $textPath to $out'/bin/NAME'."""
    script = _documented_script()
    assert "destination" not in script.env and script.env["preferLocalBuild"] == ""
    assert script.text_file and not script.compiles
    # nixpkgs' writeTextFile before the executable bit moved into an `if`
    older = script.env["buildCommand"].replace(
        'if [ -n "$executable" ]; then\n  chmod +x "$target"\nfi\n',
        '(test -n "$executable" && chmod +x "$target") || true\n',
    )
    assert older != script.env["buildCommand"]
    assert dataclasses.replace(script, env={**script.env, "buildCommand": older}).text_file


@pytest.mark.parametrize(
    "change",
    [
        {"passAsFile": "buildCommand"},  # text is not passed as a file
        {"buildCommand": 'make -j8 install\nmv "$textPath" "$out"\n'},
        {"buildCommand": 'target=$out\nmv "$textPath" "$target"\ngcc -O2 x.c -o $out\n'},
        {"buildCommand": 'target=$out\nmv "$textPath" "$elsewhere"\n'},
    ],
)
def test_a_derivation_that_only_looks_like_a_text_file_still_compiles(change):
    script = _documented_script()
    drv = dataclasses.replace(script, env={**script.env, **change})
    assert not drv.text_file and drv.compiles


# -- 2. nix derivation show in Nix 2.32, 2.33 and 2.34 --------------------------------


@pytest.mark.parametrize("version", ["nix_2_32", "nix_2_33", "nix_2_34"])
def test_every_derivation_show_shape_gives_the_same_answer(version):
    text = (DOCUMENTED / f"{version}.derivation_show.json").read_text()
    drvs = nix.parse_derivation_show(text, "Nix 2.34.0")
    assert all(d.path.startswith("/nix/store/") for d in drvs)
    assert [d.name for d in drvs if d.compiles] == ["vllm-tt-0.9.2"]  # as documented
    (top,) = [d for d in drvs if d.name == "nixos-system-cfx-llm2"]
    assert len(top.input_drvs) == 2 and top.config


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"version": 4, "derivations": {"x.drv": 4}}', "'x.drv' is int"),
        ('{"x.drv": {"name": "x"}}', "'x.drv' has no env object"),
        ("warning: Git tree is dirty", "not JSON"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_an_unreadable_derivation_show_names_the_nix_that_printed_it(text, says):
    with pytest.raises(FactProcessError) as err:
        nix.local_build_derivations(text, "Nix 2.35.0")
    assert str(err.value).startswith("cannot read `nix derivation show` of Nix 2.35.0: ")
    assert says in str(err.value)


# -- 3. pre-release, Lix and Determinate version strings ------------------------------


@pytest.mark.parametrize(
    "line, version, implementation, update_form",
    [
        ("nix (Nix) 2.12.0pre20220902_0c7f213", "2.12.0", "nix", "--update-input"),
        ("nix (Nix) 2.34.0pre20251103_e3f5c2a", "2.34.0", "nix", "update"),
        ("nix (Nix) 2.26.3+1", "2.26.3", "nix", "update"),
        ("nix (Lix, like Nix) 2.91.1", "2.91.1", "lix", "--update-input"),
        ("nix (Lix, like Nix) 2.93.0-dev-pre20250412-fb8d73c", "2.93.0", "lix", "--update-input"),
        ("nix (Determinate Nix 3.6.2) 2.29.0", "2.29.0", "determinate", "update"),
    ],
)
def test_version_strings_of_other_builds(line, version, implementation, update_form):
    info = nix.parse_nix_version([line])
    assert (info.version, info.implementation) == (version, implementation)
    assert info.update_input_argv[-1] == update_form
    assert nix.derivation_show_is_new(info) is (info.version_tuple[:2] >= (2, 15))
    assert version in info.label


# -- 4. the unit's own drop-ins in the built system and at next boot ------------------


def _fact(folder: str, case: str, cls):
    data = json.loads((FACTS / folder / f"{case}.json").read_text())
    return cls().process(data["output"])


def test_the_proof_applies_the_built_systems_overrides_conf():
    built = _fact("serving.BuiltService", "asdropin", facts.serving.BuiltService)
    assert built.script is not None and built.script.tool_call_parser == "qwen3_xml"
    assert built.environment["QWEN36_SDPA_STREAMING"] == "1"
    assert built.environment["QWEN36_MERGE_BATCH_GUARD"] == "1"
    inline = _fact("serving.BuiltService", "inline", facts.serving.BuiltService)
    assert inline.script is not None and inline.script.tool_call_parser == "qwen3_xml"


def test_the_next_boot_view_takes_the_profiles_dropins_not_the_running_ones():
    """Running: the unit of #44 written inline; the profile: vllm-tt's own unit and
    overrides.conf. A reboot runs the profile's."""
    unit = _fact("serving.ServingUnit", "asdropin_next_boot", facts.serving.ServingUnit)
    after = unit.after_reboot
    assert after.parser.value == "qwen3_xml"
    assert after.exec_start_via.endswith("/tenstorrent-serving.service.d/overrides.conf")
    assert after.environment["QWEN36_MERGE_BATCH_GUARD"].source.endswith("overrides.conf")
    running = _fact("serving.ServingUnit", "asdropin", facts.serving.ServingUnit)
    assert running.now.parser.value == running.after_reboot.parser.value == "qwen3_xml"


def test_a_persons_etc_dropin_stays_and_the_generations_is_replaced():
    unit = "u.service"
    generation = systemd.UnitFile(
        f"/etc/systemd/system/{unit}.d/overrides.conf", "/nix/store/a-old/overrides.conf", "A"
    )
    person = systemd.UnitFile(f"/etc/systemd/system/{unit}.d/zz-limits.conf", "", "B")
    profile = systemd.UnitFile(
        f"/nix/var/nix/profiles/system/etc/systemd/system/{unit}.d/overrides.conf",
        "/nix/store/b-new/overrides.conf",
        "C",
    )
    after = next_boot_dropins([generation, person], [profile], unit)
    assert [(d.path, d.text) for d in after] == [
        (f"/etc/systemd/system/{unit}.d/zz-limits.conf", "B"),
        (f"/etc/systemd/system/{unit}.d/overrides.conf", "C"),
    ]


# -- 5. required_fix_rev with a remote input ------------------------------------------


@pytest.mark.parametrize(
    "url, remote",
    [
        ("git+file:///srv/git/tt-stack", "file:///srv/git/tt-stack"),
        ("git+http://127.0.0.1:9000/tt-stack/.git", "http://127.0.0.1:9000/tt-stack/.git"),
        (
            "git+https://git.example/tt-stack?ref=main&rev=" + "a" * 40,
            "https://git.example/tt-stack",
        ),
        (
            "git+ssh://git@git.example/bitpartner/tt-stack",
            "ssh://git@git.example/bitpartner/tt-stack",
        ),
        ("github:bitpartner/tt-stack", "https://github.com/bitpartner/tt-stack"),
        ("gitlab:bitpartner/tt-stack/main", "https://gitlab.com/bitpartner/tt-stack"),
        ("path:/srv/tt-stack", None),
        ("https://example/tt-stack.tar.gz", None),
    ],
)
def test_the_git_remote_of_a_flake_input(url, remote):
    assert nix.git_remote(url) == remote


def _git(repo: Path, *args: str) -> str:
    env = {"HOME": str(repo.parent), "PATH": "/usr/bin:/bin"}
    env.update({f"GIT_{who}_{what}": v for who in ("AUTHOR", "COMMITTER")
                for what, v in (("NAME", "a"), ("EMAIL", "a@x"))})  # fmt: skip
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def _ancestry(home: Path, url: str, fix: str, rev: str) -> subprocess.CompletedProcess:
    argv = bump.function_argv("ancestry", fix, rev, url)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run(argv, capture_output=True, text=True, env=env)


def test_ancestry_is_read_from_nixs_git_cache_then_from_the_remote(tmp_path):
    """The remote-side script, run with this machine's sh and git: first Nix's gitv3
    cache (a bare clone, as Nix keeps it), then a fetch of the remote itself."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    _git(upstream, "init", "-q", "-b", "master")
    for n in range(3):
        (upstream / "f").write_text(str(n))
        _git(upstream, "add", "f")
        _git(upstream, "commit", "-q", "-m", f"c{n}")
    fix, head = _git(upstream, "rev-parse", "HEAD~1"), _git(upstream, "rev-parse", "HEAD")
    _git(upstream, "checkout", "-q", "-b", "side", "HEAD~2")
    (upstream / "g").write_text("x")
    _git(upstream, "add", "g")
    _git(upstream, "commit", "-q", "-m", "side")
    side = _git(upstream, "rev-parse", "HEAD")
    url = upstream.as_uri()

    home = tmp_path / "home"
    cache = home / ".cache/nix/gitv3/0s3mfnqk4qay5pl9xip2pyxp3156ik2kwqdsqsm57lamphzxbxna"
    cache.parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(upstream), str(cache)], check=True)
    yes = _ancestry(home, url, fix, head)
    assert yes.returncode == 0 and yes.stdout.startswith("ancestry: yes (Nix's fetch"), yes
    no = _ancestry(home, url, side, head)
    assert no.returncode == 0 and no.stdout.startswith("ancestry: no (Nix's fetch"), no

    empty = tmp_path / "empty-home"
    empty.mkdir()
    fetched = _ancestry(empty, url, fix, head)
    assert fetched.stdout.startswith("ancestry: yes (fetched "), fetched
    assert not list(Path("/tmp").glob("remedy-ancestry.*")), "the temporary repo goes"
    gone = _ancestry(empty, (tmp_path / "nowhere").as_uri(), fix, head)
    assert gone.returncode == 2 and "cannot fetch" in gone.stderr


# -- 6. evaluation memory ---------------------------------------------------------------


def _headroom(kb: int) -> memory.MemoryHeadroom:
    return memory.MemoryHeadroom(mem_available_kb=kb, mem_total_kb=kb * 2)


def test_the_nix_bound_keeps_memavailable_above_the_gate():
    head = _headroom(9_000_000)  # 9.2 GB
    assert memory.nix_memory_bound(head, 4.0, None) == int(9_000_000 * 1024 - 4e9)
    assert memory.nix_memory_bound(head, 4.0, 2.0) == int(2e9)
    assert memory.nix_memory_bound(_headroom(1000), 4.0, None) == 1


def test_the_bounded_command_is_a_scope_with_memory_max_and_a_time_bound():
    argv = commands.nix_bounded(["runuser", "-u", "ops", "--", "nix", "build"], 123, "n", 60)
    assert argv[:2] == ["sh", "-c"] and argv[3:] == [
        "sh", "n", "123", "60s", "runuser", "-u", "ops", "--", "nix", "build",
    ]  # fmt: skip
    assert 'systemd-run --scope --quiet --unit="$u" -p MemoryMax="$max"' in argv[2]
    assert '-- timeout -k 10 "$t" "$@"' in argv[2]
    # the words of a stop at either bound, which the host library's bound_hit reads
    for words in ("killed at its memory bound", "stopped at its time bound"):
        assert words in argv[2] and f'*"{words}"*)' in host.text("lib.sh")


def test_a_command_that_hangs_is_stopped_at_its_time_bound_and_says_so():
    """Issue 32 item 4, run here with this machine's sh and coreutils' timeout (no
    memory bound: MAX 0, as on a host without systemd-run)."""
    proc = subprocess.run(
        commands.nix_bounded(["sleep", "30"], None, "n", 1), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 124
    assert "error: remedy: stopped at its time bound (nix_timeout_s=1s)" in proc.stderr
    quick = subprocess.run(commands.nix_bounded(["true"], None, "n", 5), capture_output=True)
    assert quick.returncode == 0 and quick.stderr == b""


def test_a_command_a_signal_ends_before_its_time_bound_says_the_signal_not_the_bound():
    """Issue 43 E3: a nix killed by SIGKILL under a second in was said to have run past
    its time bound (137 is timeout's own KILL too): the bound is said only once its time
    has passed, a signal before it by name."""
    proc = subprocess.run(
        commands.nix_bounded(["sh", "-c", "kill -KILL $$"], None, "n", 600),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 128 + 9
    assert re.search(
        r"error: remedy: ended by signal KILL \d+s in, before its time bound", proc.stderr
    ), proc.stderr
    assert "stopped at its time bound" not in proc.stderr
