"""Progress while a deploy runs (issue 33 item 1): pyinfra's own output lines, as the
deploy prints them (recorded from a twin run), turned into one-line messages."""

from __future__ import annotations

from remedy.core.run.progress import StepWatch

# pyinfra 3's output of a deploy on twin lead1 (deploys/converge.py), trimmed
OUTPUT = [
    "--> Connecting to hosts...\n",
    "    [lead1] Connected\n",
    "--> Beginning operation run...\n",
    "--> Starting operation: Memory gate before Nix evaluates and builds (tt-stack#49) \n",
    "    [lead1] No changes\n",
    "--> Starting operation: Prove the build holds the desired state (tt-stack#34) \n",
    "    [lead1] building /nix/store/abc-nixos-system-cfx-llm2.drv\n",
    "    [lead1] Success\n",
    "--> Starting operation: Switch to the proven system (tt-stack#49) \n",
    "    [lead1] Error: executed 3 commands\n",
    "    [other] Success\n",
]


def feed(watch, lines, times):
    said = []
    for line, now in zip(lines, times, strict=True):
        said += watch.feed(line, now)
    return said


def test_each_step_is_said_as_it_starts_and_how_it_ended_where_it_did_something():
    watch = StepWatch("lead1")
    said = feed(watch, OUTPUT, [0, 0, 0, 0, 0.1, 1, 2, 40, 41, 42, 43])
    assert said == [
        "lead1: Connected",
        "lead1: Memory gate before Nix evaluates and builds (tt-stack#49)",
        "lead1: Prove the build holds the desired state (tt-stack#34)",
        "lead1: building /nix/store/abc-nixos-system-cfx-llm2.drv",
        "lead1: Prove the build holds the desired state (tt-stack#34): Success (39s)",
        "lead1: Switch to the proven system (tt-stack#49)",
        "lead1: Switch to the proven system (tt-stack#49): Error: executed 3 commands",
    ]


def test_a_long_step_says_every_ten_seconds_how_long_it_has_run():
    watch = StepWatch("lead1")
    watch.feed(OUTPUT[5], 100.0)
    assert watch.heartbeat(105.0) is None
    assert watch.heartbeat(110.0) == (
        "lead1: Prove the build holds the desired state (tt-stack#34): still running (10s)"
    )
    assert watch.heartbeat(115.0) is None
    assert watch.heartbeat(120.5) is not None
    watch.feed("    [lead1] Success\n", 121.0)
    assert watch.heartbeat(200.0) is None  # no step runs


def test_colour_codes_do_not_hide_a_step():
    watch = StepWatch("h")
    line = "\x1b[34m--> Starting operation:\x1b[0m \x1b[1mVerify tool calling\x1b[0m \n"
    assert watch.feed(line, 0) == ["h: Verify tool calling"]
