"""What asks for a diagnosis: the expected value a user reports, and the off-path diagnose event."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DiagnoseReason = Literal["negative_feedback", "failed_episode", "on_demand"]
ExpectedUnit = Literal["元", "万元", "分"]

# A value in another money unit, in 元.
UNIT_IN_YUAN: dict[str, float] = {"元": 1.0, "万元": 10_000.0, "分": 0.01}


class Expected(BaseModel):
    """The value the user expected the answer to be, with its money unit when it is money."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float = Field(strict=True, description="the number the user expected (one value: a total, a rate, a count)")
    unit: ExpectedUnit | None = Field(None, description="元, 万元 or 分 for money; omitted: the answer's own unit")

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value) or abs(value) > 1e15:
            raise ValueError("must be a finite number no larger than 1e15 in size")
        return value


class DiagnoseRequest(BaseModel):
    """One diagnose event: whose episode, why, and what the user said about it.

    ``request_id`` makes a redelivered event a no-op: a diagnosis already stored for it is not run again.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(min_length=1, max_length=128)
    user: str = Field(min_length=1, max_length=128)
    episode_id: str = Field(min_length=1, max_length=64)
    reason: DiagnoseReason
    request_id: str = Field(min_length=1, max_length=200)
    expected: Expected | None = None
    comment: str | None = Field(None, max_length=2000)
