"""Replay recorded twin output through each fact (pyinfra-testing fixtures).

Fixtures live in tests/facts/<module>.<Fact>/<case>.json; they are recorded
from real twins by ``python -m tests.facts.record``.
"""

from pathlib import Path

from pyinfra_testing.facts import make_fact_tests

HERE = Path(__file__).parent

for folder in sorted(
    p for p in HERE.iterdir() if p.is_dir() and "." in p.name and p.name != "errors"
):
    test_class = make_fact_tests("facts", folder.name, folder)
    globals()[test_class.__name__] = test_class
