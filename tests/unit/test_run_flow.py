"""The run's flow: which steps a plan with nothing to do carries (when each stage runs is
the host program's: tests/unit/test_stages.py)."""

from __future__ import annotations

from types import SimpleNamespace

from remedy.core.run import steps as steps_core
from remedy.core.run.plan import DURABLE, FALLBACK


def _noop_steps(carriers: list[str]) -> list:
    """The steps of a plan with nothing to do, as plan_steps gives them their skips: a
    reason for every step but the outcome, a scratch clone a killed run left, and the
    removal of /run drop-ins the next boot carries (none: a reason too)."""
    out = []
    for t in steps_core.TEMPLATES:
        if t.key in ("outcome", "scratch_removed"):
            skip = None
        elif t.key == "remove_carriers":
            skip = None if carriers else "no /run drop-in carries"
        else:
            skip = "nothing to do: every setting holds"
        out.append(steps_core.Step(t, SimpleNamespace(skip=skip)))
    return out


def test_a_plan_with_nothing_to_do_runs_only_the_steps_that_can_act():
    from remedy.core.run.plan import NOOP
    from remedy.operations.flow import may_act

    names = [s.template.key for s in _noop_steps([]) if may_act(s, NOOP)]
    assert names == ["scratch_removed", "outcome"]
    # one with a drop-in the next boot now carries still removes it
    names = [s.template.key for s in _noop_steps(["/run/x.conf"]) if may_act(s, NOOP)]
    assert names == ["remove_carriers", "scratch_removed", "outcome"]
    # a plan that does something has every step (a durable failure starts the fallback)
    assert all(may_act(s, DURABLE) and may_act(s, FALLBACK) for s in _noop_steps([]))
