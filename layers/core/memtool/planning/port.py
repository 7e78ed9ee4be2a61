"""The planning port: what AskFlow's steps need of a planner, whichever one the settings chose.

``RulePlanner`` (the local default and every fallback) and ``BedrockPlanner`` both satisfy it;
``AskSteps`` receives a factory for one and builds it on the first step that plans (building a
planner reads the warehouse's entity values, which Record and Visualize never need).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from memtool.planning.context import PlanContext
    from memtool.planning.plan import Plan, Route
    from memtool.planning.rule_planner import RulePlanner


class Planner(Protocol):
    @property
    def name(self) -> str:
        """The planner's name in a plan: rules, or bedrock:<model id>."""
        ...

    @property
    def rules(self) -> RulePlanner:
        """The rule planner: this one, or the one a model-backed planner falls back to (its
        question parser and intent compiler serve the steps that parse without planning)."""
        ...

    def plan(self, question: str, *, route: Route | str | None = None, context: PlanContext | None = None) -> Plan: ...

    def write_analysis_script(
        self, question: str, analysis: str, columns: Sequence[str], sample: Sequence[Sequence[Any]], params: Mapping[str, Any]
    ) -> str | None:
        """A script for one analysis, or None: the templated script runs (the rule planner writes none)."""
        ...
