"""Issue 27 item 6: remedy/core is grouped by kind, and the groups form layers.

Each group may import from the groups before it in ORDER, never from one after it, so the
import graph between groups has no cycle: programs (text run on a host) know nothing of the
readings, the readings nothing of the desired state, and so on up to the renderers.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "remedy" / "core"
ORDER = ["programs", "readings", "config", "run", "render"]


def _imported_groups(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        modules = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[:2] == ["remedy", "core"]:
                assert len(parts) >= 3, f"{path}: imports remedy.core itself, not a group"
                found.add(parts[2])
    return found


def test_core_holds_only_the_groups():
    flat = sorted(p.name for p in CORE.glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"a module outside a group: {flat}"
    assert sorted(p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__") == (
        sorted(ORDER)
    )


def test_each_group_imports_only_the_groups_before_it():
    wrong = []
    for group in ORDER:
        allowed = set(ORDER[: ORDER.index(group) + 1])
        for path in sorted((CORE / group).glob("*.py")):
            for other in _imported_groups(path) - allowed:
                wrong.append(f"{path.relative_to(CORE)} imports remedy.core.{other}")
    assert wrong == []
