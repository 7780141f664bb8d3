"""The suite's shares by measured duration (tests/sharding.py, ``--shard I/N``)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from tests import sharding
from tests.conftest import PROJECT


def test_each_test_is_in_exactly_one_share_and_the_deal_does_not_depend_on_order():
    tests = [(f"t{i}", float((i * 37) % 11)) for i in range(50)]
    dealt = sharding.shares(tests, 4)
    ids = [t for share in dealt for t in share]
    assert sorted(ids) == sorted(t for t, _ in tests)  # all of them, none twice
    shuffled = tests[:]
    random.Random(1).shuffle(shuffled)
    again = sharding.shares(shuffled, 4)
    assert [set(s) for s in again] == [set(s) for s in dealt]
    # each share runs in the order it was given
    order = {t: i for i, (t, _s) in enumerate(tests)}
    assert all(share == sorted(share, key=order.__getitem__) for share in dealt)


def test_the_longest_go_first_each_to_the_least_loaded_share():
    # what every N-th test did to the suite: the long tests fell in one share
    tests = [("a", 400.0), ("b", 10.0), ("c", 10.0), ("d", 300.0), ("e", 10.0), ("f", 10.0)]
    assert sharding.shares(tests, 3) == [["a"], ["d"], ["b", "c", "e", "f"]]
    assert sharding.totals(sharding.shares(tests, 2), dict(tests)) == [400.0, 340.0]


def test_a_test_the_file_does_not_know_counts_as_the_median_of_its_kind():
    known = {"twin1": 30.0, "twin2": 50.0, "twin3": 400.0, "unit1": 0.1, "unit2": 0.3}
    tests = [("twin1", True), ("twin2", True), ("twin3", True), ("new_twin", True),
             ("unit1", False), ("unit2", False), ("new_unit", False)]  # fmt: skip
    prices = dict(sharding.priced(tests, known))
    assert prices["new_twin"] == 50.0 and prices["new_unit"] == pytest.approx(0.2)
    assert prices["twin3"] == 400.0
    # none of its kind known: the median of the whole file
    assert dict(sharding.priced([("x", True)], {"u": 1.0, "v": 3.0}))["x"] == 2.0
    assert dict(sharding.priced([("x", True)], {}))["x"] == 1.0


def test_storing_merges_over_the_file_and_keeps_the_others(tmp_path):
    path = tmp_path / "durations.json"
    sharding.merge({"b": 2.04, "a": 1.0}, str(path))
    sharding.merge({"b": 3.0}, str(path))
    assert json.loads(path.read_text()) == {"a": 1.0, "b": 3.0}
    assert list(json.loads(path.read_text())) == ["a", "b"]  # sorted: small diffs
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert os.listdir(tmp_path) == ["durations.json"]  # no lock file, no temporary


def test_the_committed_file_names_only_tests_and_seconds():
    durations = sharding.load()
    assert durations, "tests/durations.json is missing or empty"
    assert all(k.startswith("tests/") and "::" in k for k in durations), list(durations)[:5]
    assert all(v >= 0 for v in durations.values())


def collected(*argv: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *argv],
        capture_output=True, text=True, cwd=PROJECT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_shares_of_a_collection_are_disjoint_and_cover_it():
    # the conftest's --shard on a real collection (after -k, as scripts/test.sh's
    # extra arguments select)
    args = ["tests/unit/test_sharding.py", "tests/unit/test_layout.py", "-k", "not layout_x"]
    everything = collected(*args)
    shares = [collected(*args, "--shard", f"{i}/3") for i in (1, 2, 3)]
    ids = [t for share in shares for t in share]
    assert sorted(ids) == sorted(everything) and len(set(ids)) == len(ids)
    assert all(shares), shares  # each share got some
