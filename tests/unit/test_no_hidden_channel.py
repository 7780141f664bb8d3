"""No hidden channel between the steps: what a step found out is a value on its own
pyinfra result, under a declared key, and the stop request is an argument.

Read from the source (AST): the operations modules keep no module-level dict, list
or set that an operation writes, and every key a step records or the outcome reads
is declared in ``remedy.core.run.report_keys`` with its types.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from remedy.core.run import report_keys

ROOT = Path(__file__).resolve().parents[2]
OPERATIONS = ROOT / "remedy" / "operations"
MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque", "Counter"}
MUTATORS = {
    "append", "extend", "insert", "update", "setdefault", "pop", "popitem", "clear",
    "remove", "add", "discard", "__setitem__",
}  # fmt: skip


def _modules() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text(), str(p)) for p in sorted(OPERATIONS.glob("*.py"))}


def _mutable(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return name in MUTABLE_CALLS
    return False


def module_containers(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level to a dict, list or set."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and _mutable(node.value):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and _mutable(node.value):
            if isinstance(node.target, ast.Name):
                out.add(node.target.id)
    return out


def _is_operation(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if getattr(target, "id", None) == "operation" or getattr(target, "attr", None) == (
            "operation"
        ):
            return True
    return False


def _functions(modules) -> dict[str, list[ast.FunctionDef]]:
    by_name: dict[str, list[ast.FunctionDef]] = {}
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                by_name.setdefault(node.name, []).append(node)
    return by_name


def _called(fn) -> set[str]:
    """The names FN calls or passes on (a FunctionCommand's body is passed, not called;
    FN's own parameters are values, not functions of the package)."""
    params = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
            out |= {a.id for a in node.args if isinstance(a, ast.Name) and a.id not in params}
    return out


def reachable_from_operations(modules) -> list[ast.FunctionDef]:
    """Every function of the package an operation's body may run (by name: more than it
    does, never less)."""
    by_name = _functions(modules)
    todo = [fn for fns in by_name.values() for fn in fns if _is_operation(fn)]
    seen: dict[int, ast.FunctionDef] = {}
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen[id(fn)] = fn
        for name in _called(fn):
            todo += by_name.get(name, [])
    return list(seen.values())


def writes(fn, names: set[str]) -> list[str]:
    """How FN writes one of NAMES (module-level containers), as 'name.method' lines."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Global):
            out += [f"global {n}" for n in node.names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in names and node.func.attr in MUTATORS:
                out.append(f"{owner.id}.{node.func.attr}()")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if not isinstance(node, ast.AugAssign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Subscript) and getattr(t.value, "id", None) in names:
                    out.append(f"{t.value.id}[...] =")
    return out


def test_the_operations_modules_keep_no_module_level_state():
    """Issue 42 item 4: no module-level dict, list or set in remedy/operations, and no
    function that rebinds a module's name (``global``): the run's lifecycle is a value
    (remedy.lifecycle.Run), passed explicitly."""
    modules = _modules()
    found = {name: sorted(module_containers(tree)) for name, tree in modules.items()}
    assert {name: names for name, names in found.items() if names} == {}
    rebinding = [
        f"{name}: {fn.name}: global {', '.join(node.names)}"
        for name, tree in modules.items()
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
        if isinstance(node, (ast.Global, ast.Nonlocal))
    ]
    assert rebinding == []


def test_the_check_finds_a_module_container_and_a_global():
    """The check itself, on a module that has both."""
    tree = ast.parse("_RUNS = {}\n_N: list = []\ndef f():\n    global _X\n    _X = 1\n")
    assert module_containers(tree) == {"_RUNS", "_N"}
    assert [n for n in ast.walk(tree) if isinstance(n, ast.Global)]


def test_no_operation_writes_a_module_level_container():
    modules = _modules()
    names = set().union(*(module_containers(tree) for tree in modules.values()))
    found = {fn.name: w for fn in reachable_from_operations(modules) if (w := writes(fn, names))}
    assert not found, f"operations write module state: {found}"


def test_the_check_sees_a_write_through_a_helper():
    """The check itself: a helper an operation calls that writes a module dict is found."""
    tree = ast.parse(
        "_SAID = {}\n"
        "def say(**v):\n    _SAID.setdefault('h', {}).update(v)\n"
        "@operation()\ndef op():\n    say(x=1)\n    yield 'true'\n"
    )
    modules = {"said.py": tree}
    assert module_containers(tree) == {"_SAID"}
    found = [writes(fn, {"_SAID"}) for fn in reachable_from_operations(modules)]
    assert ["_SAID.setdefault()"] in found


def _keywords_of(calls: set[str]) -> set[str]:
    """The keyword names passed to CALLS (say, gave_up) anywhere in remedy/operations."""
    out = set()
    for tree in _modules().values():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in calls:
                out |= {k.arg for k in node.keywords if k.arg and k.arg != "fg"}
    return out


def _said_by_programs() -> set[str]:
    """The keys the host programs say (remedy/host: ``say KEY``, ``say_items KEY``,
    ``answer say+ KEY``)."""
    import re

    out = set()
    for path in (ROOT / "remedy" / "host").rglob("*.sh"):
        text = path.read_text()
        out |= set(re.findall(r"^\s*(?:\[ .*\] \|\| )?say (\w+) ", text, re.M))
        out |= set(re.findall(r"\bsay_items (\w+) ", text))
        out |= set(re.findall(r"\banswer say\+ (\w+) ", text))
        out |= set(re.findall(r"@@remedy say (\w+) ", text))
    return out - {"KEY"}


def test_every_key_a_step_records_is_declared():
    recorded = _keywords_of({"say", "gave_up"}) | _said_by_programs()
    assert {"new_rev", "why", "restarts", "switch_exit"} <= recorded  # the scan sees them
    assert recorded <= set(report_keys.KEYS), recorded - set(report_keys.KEYS)


def test_every_key_the_outcome_reads_is_declared():
    tree = ast.parse((ROOT / "remedy" / "core" / "run" / "outcome.py").read_text())
    read = set()
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_first":
            key = node.args[1]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get":
            # what a step said, or what the host's outcome program said (told)
            if getattr(node.func.value, "attr", getattr(node.func.value, "id", None)) in (
                "said", "told"
            ):  # fmt: skip
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and getattr(
            node.value, "attr", getattr(node.value, "id", None)
        ) in ("said", "told"):
            key = node.slice
        if isinstance(key, ast.Constant):  # (by variable: only inside _first itself)
            read.add(key.value)
    # the scan sees them
    assert {"outcome_result", "outcome_line", "notes", "rollback_failed"} <= read, read
    assert read <= set(report_keys.KEYS), read - set(report_keys.KEYS)


def test_an_undeclared_key_or_a_wrong_type_is_refused():
    assert report_keys.checked({"new_rev": "abc", "restarts": 1}) == {
        "new_rev": "abc",
        "restarts": 1,
    }
    with pytest.raises(KeyError, match="lacks"):
        report_keys.checked({"new_revision": "abc"})
    with pytest.raises(TypeError, match="restarts"):
        report_keys.checked({"restarts": "1"})


def function_commands(tree: ast.Module) -> list[str]:
    """Where a module names pyinfra's FunctionCommand (an import or a use)."""
    found = []
    for node in ast.walk(tree):
        names = node.names if isinstance(node, ast.ImportFrom) else []
        if any(a.name == "FunctionCommand" for a in names):
            found.append(f"line {node.lineno}: import")
        elif isinstance(node, (ast.Name, ast.Attribute)) and (
            getattr(node, "id", None) == "FunctionCommand"
            or getattr(node, "attr", None) == "FunctionCommand"
        ):
            found.append(f"line {node.lineno}: use")
    return found


def test_the_steps_yield_the_commands_they_run_not_a_python_function():
    """Issue 27: every command a step runs is yielded to pyinfra (``-v`` shows it, and
    ``--dry -v`` shows the Nix steps' commands): no FunctionCommand in the operations."""
    found = {n: f for n, tree in _modules().items() if (f := function_commands(tree))}
    assert not found, f"FunctionCommand in remedy/operations: {found}"
    planted = ast.parse(
        "from pyinfra.api import FunctionCommand\ndef op():\n    yield FunctionCommand(f, (), {})\n"
    )
    assert function_commands(planted) == ["line 1: import", "line 3: use"]


def _generators(trees: dict[str, ast.Module]) -> set[str]:
    """MODULE.NAME of every top-level function of the operations modules that yields (a
    step's commands), and journal.record's callers' view of it (``journal.record``)."""
    out = set()
    for name, tree in trees.items():
        for fn in tree.body:
            if isinstance(fn, ast.FunctionDef) and any(
                isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(fn)
            ):
                out.add(f"{name[:-3]}.{fn.name}")
    return out


def test_a_function_that_yields_commands_is_always_yielded_from():
    """A generator called as a plain function runs nothing: its commands never reach
    pyinfra (a postponed restart that journal.record never wrote let the switch restart
    the server). Every call of one is ``yield from``, or handed on whole (returned)."""
    trees = _modules()
    generators = _generators(trees)
    lost = []
    for name, tree in trees.items():
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            f = call.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                target = f"{f.value.id}.{f.attr}"
            elif isinstance(f, ast.Name):
                target = f"{name[:-3]}.{f.id}"
            else:
                continue
            if target in generators and not isinstance(
                parents.get(call), (ast.YieldFrom, ast.Return)
            ):
                lost.append(f"{name}:{call.lineno}: {target}(...) is not yielded from")
    assert generators, "no generator found: the check reads nothing"
    assert lost == [], lost
