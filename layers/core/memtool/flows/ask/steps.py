"""AskFlow's steps, one method each; functions/flow_steps dispatches to them by name.

Each step takes the flow state and returns the next one. A step that cannot go on raises, and
the state machine's Catch decides what follows (Execute's failures go to Diagnose). The steps
live in one module per group of states, as the state machine (statemachine/ask_flow.asl.json)
runs them:

- ``plan``: Prepare, Recall, Plan;
- ``cache``: CacheLookup, CacheStore;
- ``execute``: Guard, Execute, Diagnose;
- ``analyze``: PlanAnalyses, Summarize (the deep-analysis route);
- ``visualize``: VisualizeKpi, Visualize;
- ``record``: Record, RecordFailure.

A memory the ask reads but cannot use (undecodable, or a typed slot holding the wrong shape) is
ignored with a note in the answer; it never fails the ask. Record appends the turn to the
session's working memory with optimistic locking, retrying on a conflict, and never loses the
answer over it.
"""

from __future__ import annotations

import time
from typing import Any

from memtool.flows.ask.analyze import AnalyzeSteps
from memtool.flows.ask.cache import CacheSteps
from memtool.flows.ask.execute import GuardAndExecuteSteps
from memtool.flows.ask.plan import PlanSteps
from memtool.flows.ask.record import RecordSteps
from memtool.flows.ask.state import AskState
from memtool.flows.ask.visualize import VisualizeSteps


class UnknownStep(ValueError):
    pass


class AskSteps(PlanSteps, CacheSteps, GuardAndExecuteSteps, AnalyzeSteps, VisualizeSteps, RecordSteps):
    """Every AskFlow state's step; ``run`` dispatches by the state's name (Task "Step" parameter)."""

    def run(self, step: str, raw_state: dict[str, Any]) -> dict[str, Any]:
        method = getattr(self, f"step_{step.lower()}", None)
        if method is None:
            raise UnknownStep(f"AskFlow has no step {step!r}")
        state = AskState.model_validate(raw_state)
        started = time.perf_counter()
        state = method(state)
        state.timings[step] = round((time.perf_counter() - started) * 1000 + state.timings.get(step, 0.0), 3)
        return state.model_dump(mode="json", exclude_none=False)
