"""The body and the answer of POST /feedback."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationInfo, field_validator

from memtool.api.limits import PlainText
from memtool.api.memories import Identifier
from memtool.diagnosis.requests import Expected

COMMENT_MAX_CHARS = 2000
CORRECTION_MAX_CHARS = 500
TERM_MAX_CHARS = 50
DWELL_MAX_MS = 86_400_000  # a day


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StructuredCorrection(_Body):
    """``term`` means ``means``: a metric, a dimension or a value the catalog has."""

    term: Annotated[PlainText, Field(min_length=1, max_length=TERM_MAX_CHARS)]
    means: Annotated[PlainText, Field(min_length=1, max_length=CORRECTION_MAX_CHARS)]
    scope: Literal["user", "tenant"] = Field("user", description="tenant: shared with everyone in the tenant (curators only)")


class Signals(_Body):
    """Implicit feedback, used when there is no rating."""

    copied: StrictBool | None = None
    follow_up_related: StrictBool | None = None
    rephrased: StrictBool | None = None
    abandoned: StrictBool | None = None
    dwell_ms: Annotated[StrictInt, Field(ge=0, le=DWELL_MAX_MS)] | None = None


class FeedbackBody(_Body):
    episode_id: Identifier
    rating: Literal[-1, 0, 1] | None = Field(None, description="-1 wrong, 0 neutral, 1 right")
    comment: Annotated[PlainText, Field(max_length=COMMENT_MAX_CHARS)] | None = None
    correction: Annotated[PlainText, Field(min_length=1, max_length=CORRECTION_MAX_CHARS)] | StructuredCorrection | None = Field(
        None, description='free text ("单子数就是订单数", "by takings I mean net revenue") or {term, means, scope?}'
    )
    signals: Signals | None = None
    expected: Expected | None = Field(
        None, description="the value the answer should have been, {value, unit?}: the answer is diagnosed against it (off the request path)"
    )

    @field_validator("expected")
    @classmethod
    def _one_verdict(cls, expected: Expected | None, info: ValidationInfo) -> Expected | None:
        if expected is not None and info.data.get("rating") == 1:
            raise ValueError("a thumbs-up says the answer is right and an expected value says it is not: send one of them")
        return expected

    @field_validator("rating", mode="before")
    @classmethod
    def _not_a_bool(cls, rating: Any) -> Any:
        if isinstance(rating, bool):
            raise ValueError("must be one of -1, 0, 1 (a number, not true/false)")
        return rating

    def says_something(self) -> bool:
        """A rating, a correction, a comment with words in it, or a signal that says something
        (a flag that is true, or a dwell time): anything else is an empty feedback."""
        signals = self.signals.model_dump(exclude_none=True) if self.signals is not None else {}
        signalled = any(value is True for value in signals.values()) or "dwell_ms" in signals
        worded = any(ch.isalnum() for ch in self.comment or "")
        return self.rating is not None or self.correction is not None or self.expected is not None or worded or signalled


class CreditedView(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    id: str
    version: int
    kind: str
    role: Literal["applied", "episode"] = Field(description="applied: the episode used it; episode: the episode's own record")
    uses: int
    successes: int
    failures: int
    feedback_score: float
    last_used_at: str | None
    status: str
    retired: bool
    status_reason: str | None


class RewardView(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    total: float = Field(description="R = alpha*env + beta*user")
    env: float
    user: float | None
    user_source: Literal["rating", "signals", "none"]
    alpha: float
    beta: float


class FeedbackAnswer(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    episode_id: str
    reward: RewardView
    replaced: bool = Field(description="an earlier rating of this episode was replaced, not added to")
    credited: list[CreditedView]
    correction: dict[str, Any] | None = Field(description="the correction memory written, when one was given")
    fewshot_candidate: dict[str, Any] | None = Field(description="the few-shot candidate recorded (pending review)")
    diagnosis_queued: bool = Field(
        False, description="a thumbs-down or an expected value queued a diagnosis; its result shows at GET /episodes/{id}"
    )
    notes: list[str]


def feedback_command(body: FeedbackBody) -> Any:  # -> flows.feedback.FeedbackCommand
    """The HTTP body as the feedback flow's command (flows know no API model)."""
    from memtool.flows.feedback import FeedbackCommand, StatedCorrection

    correction = None
    if isinstance(body.correction, str):
        correction = StatedCorrection(text=body.correction)
    elif body.correction is not None:
        correction = StatedCorrection(term=body.correction.term, means=body.correction.means, scope=body.correction.scope)
    signals = body.signals.model_dump(exclude_none=True) if body.signals is not None else {}
    return FeedbackCommand(
        episode_id=body.episode_id, rating=body.rating, comment=body.comment, correction=correction, signals=signals, expected=body.expected
    )
