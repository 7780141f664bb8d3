"""The run's flow: which stage runs, from pyinfra's results of the earlier steps."""

from __future__ import annotations

from types import SimpleNamespace

from remedy.core.run import steps as steps_core
from remedy.core.run.plan import DURABLE, FALLBACK
from remedy.core.run.stop import StopRequest
from remedy.operations.flow import condition


class Meta:
    """An OperationMeta after execution: errored, changed, or neither."""

    def __init__(self, error: bool = False, change: bool = False):
        self.error, self.change = error, change

    def did_error(self) -> bool:
        return self.error

    def did_change(self) -> bool:
        return self.change


def flow(results: dict[str, Meta], path: str = DURABLE, stop: StopRequest | None = None):
    """(step, condition) for every template, the earlier steps done with RESULTS (by
    template name; not named: ran and changed nothing), under the run's STOP request."""
    done, out = [], []
    stop = stop or StopRequest()
    for t in steps_core.TEMPLATES:
        step = steps_core.Step(t, SimpleNamespace(skip=None))
        out.append((t.name, condition(step, list(done), path, stop)))
        done.append((step, results.get(t.name, Meta())))
    return dict(out)


def runs(conditions, name: str) -> bool:
    cond = conditions[name]
    return True if cond is None else cond()


def test_a_durable_run_that_succeeds_runs_no_fallback_step():
    c = flow({})
    assert runs(c, "Switch to the proven system")
    assert not runs(c, "Write the /run fallback override")
    assert not runs(c, "Roll back to the recorded generation")
    assert runs(c, "Report the outcome") and runs(c, "Remove the scratch clone")


def test_a_durable_step_that_gives_up_stops_the_durable_path_and_starts_the_fallback():
    c = flow({"Prove the build holds the desired state": Meta(error=True)})
    assert not runs(c, "Fast-forward the checkout to the proven commits")
    assert not runs(c, "Switch to the proven system")
    assert runs(c, "Write the /run fallback override")
    assert not runs(c, "Roll back to the recorded generation")  # nothing was switched
    assert runs(c, "Restart onto the /run override")


def test_a_failure_after_the_switch_rolls_back_even_when_the_override_cannot_take_effect():
    c = flow(
        {
            "Switch to the proven system": Meta(change=True),
            "Verify tool calling": Meta(error=True),
            "Write the /run fallback override": Meta(error=True),  # shadowed
        }
    )
    assert runs(c, "Write the /run fallback override")
    assert runs(c, "Roll back to the recorded generation")
    assert not runs(c, "Restart onto the /run override")  # not onto an override that failed
    assert not runs(c, "Verify the fallback")


def test_the_fallback_path_runs_the_fallback_steps_only():
    c = flow({}, path=FALLBACK)
    assert runs(c, "Write the /run fallback override") and runs(c, "Restart onto the /run override")
    assert not runs(c, "Roll back to the recorded generation")


def test_a_signal_stops_every_step_but_putting_a_removed_override_back():
    stopped = StopRequest("interrupted by SIGINT")
    c = flow({"Remove the stale /run override": Meta(change=True)}, stop=stopped)
    assert not runs(c, "Switch to the proven system")
    assert runs(c, "Write the /run fallback override")  # put back, no restart
    assert not runs(c, "Restart onto the /run override")
    after_switch = flow(
        {
            "Remove the stale /run override": Meta(change=True),
            "Switch to the proven system": Meta(change=True),
        },
        stop=stopped,
    )
    assert not runs(after_switch, "Write the /run fallback override")


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
