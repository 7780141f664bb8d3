"""The suite's shares (``pytest --shard I/N``, tests/conftest.py) by measured duration.

tests/durations.json maps a test's node id to the seconds its last passing run took
(setup, call and teardown: a twin test's twin is booted in its setup). ``--shard I/N``
deals the selected tests out longest first, each to the share with the least time so far
(ties: the lowest share), then runs each share in collection order. A test the file does
not know counts as the median of the known tests of its kind (twin or not: a new twin
test is not priced like a unit test), or of all known tests when none of its kind is.
The same selection and file give every one of the N processes the same shares, so each
selected test runs in exactly one.

Refresh the file from pytest's own timings: ``pytest --store-durations ...`` merges the
durations of the tests that passed in that session into it (the others keep theirs;
``REMEDY_STORE_DURATIONS=1 scripts/test.sh`` does it for a whole CI run). A rough file
only makes the shares uneven, never wrong.
"""

from __future__ import annotations

import fcntl
import json
import os
import statistics
import tempfile
from collections.abc import Iterable, Sequence

DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")


def load(path: str = DURATIONS) -> dict[str, float]:
    """The durations file (node id: seconds); empty when it is missing."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    return {str(k): float(v) for k, v in data.items()}


def priced(tests: Sequence[tuple[str, bool]], known: dict[str, float]) -> list[tuple[str, float]]:
    """Each of TESTS ((node id, is a twin test)) with its duration: KNOWN's, else the
    median of the known tests of its kind among TESTS, else of all of KNOWN (else 1 s)."""
    kinds: dict[bool, list[float]] = {True: [], False: []}
    for nodeid, twin in tests:
        if nodeid in known:
            kinds[twin].append(known[nodeid])
    everything = list(known.values())
    fallback = {
        twin: statistics.median(values or everything or [1.0]) for twin, values in kinds.items()
    }
    return [(nodeid, known.get(nodeid, fallback[twin])) for nodeid, twin in tests]


def shares(tests: Sequence[tuple[str, float]], n: int) -> list[list[str]]:
    """TESTS ((node id, seconds)) dealt into N shares, longest first, each to the share
    with the least time so far (ties: the lowest share); each share in TESTS' order.
    Depends only on the set of TESTS, not on their order."""
    if n < 1:
        raise ValueError(f"{n} shares: expected at least 1")
    order = {nodeid: i for i, (nodeid, _s) in enumerate(tests)}
    totals = [0.0] * n
    dealt: list[list[str]] = [[] for _ in range(n)]
    for nodeid, seconds in sorted(tests, key=lambda t: (-t[1], t[0])):
        k = min(range(n), key=lambda j: (totals[j], j))
        totals[k] += seconds
        dealt[k].append(nodeid)
    return [sorted(share, key=order.__getitem__) for share in dealt]


def merge(measured: dict[str, float], path: str = DURATIONS) -> None:
    """Write MEASURED (node id: seconds) over the durations file at PATH, keeping the
    tests it does not name; atomically, under a lock on its folder (the shares of one CI
    run store at once)."""
    folder = os.path.dirname(os.path.abspath(path))
    lock = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = load(path)
        data.update({k: round(v, 1) for k, v in measured.items()})
        fd, tmp = tempfile.mkstemp(prefix=".durations.", dir=folder)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(dict(sorted(data.items())), fh, indent=0)
                fh.write("\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    finally:
        # unlocked first: gevent's os.close (the conftest patches) may close at the hub's
        # next turn, and the lock would stay held until then (the next merge waited on it)
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)


def totals(dealt: Iterable[Sequence[str]], durations: dict[str, float]) -> list[float]:
    """Each share's seconds by DURATIONS (what ``--shard`` expects a share to take)."""
    return [sum(durations[t] for t in share) for share in dealt]
