"""The body and the answer of POST /ask (the answer is the ask flow's, documented as it is)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memtool.api.limits import Question
from memtool.api.memories import SessionId
from memtool.flows.ask import AskAnswer, AskCommand, AskError
from memtool.planning.plan import Route


class AskConditions(BaseModel):
    """This-time conditions: they win over the profile for this question, without changing it."""

    model_config = ConfigDict(extra="forbid")

    unit: Literal["元", "万元", "分"] | None = None
    chart: Literal["line", "bar", "pie", "kpi_card", "table"] | None = None


class AskBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: Question
    session_id: SessionId | None = None
    route: Route | None = None
    conditions: AskConditions = Field(default_factory=AskConditions)

    def command(self) -> AskCommand:
        """The ask flow's command for this body."""
        return AskCommand(
            question=self.question,
            session_id=self.session_id,
            route=self.route,
            conditions=self.conditions.model_dump(exclude_none=True),
        )


__all__ = ["AskAnswer", "AskBody", "AskConditions", "AskError"]
