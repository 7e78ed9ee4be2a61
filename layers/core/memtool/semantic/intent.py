"""What a question asks for, independent of language and SQL: the planner's output, the
compiler's input, and (with the absolute time window) the semantic cache's key."""

from __future__ import annotations

import hashlib
import json
from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Grain = Literal["day", "week", "month", "quarter", "year"]


class TimeWindow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    start: date  # inclusive
    end: date  # exclusive
    label: str = ""  # the words it came from, e.g. "上个月" / "last month"


class Filter(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dimension: str  # catalog dimension name, e.g. "city"
    op: Literal["in", "not_in"] = "in"
    values: tuple[str, ...]  # warehouse values, e.g. ("上海",)


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["yoy", "mom", "wow", "qoq"]  # 同比 / 环比
    window: TimeWindow  # the window compared against


class Intent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str  # catalog metric name, e.g. "net_revenue"
    dimensions: tuple[str, ...] = ()  # group-by dimensions, e.g. ("channel",) or ("month",)
    filters: tuple[Filter, ...] = ()
    time_window: TimeWindow | None = None
    comparison: Comparison | None = None
    order: Literal["desc", "asc"] | None = None
    limit: int | None = Field(None, ge=1, le=10_000)
    unit: Literal["元", "万元", "分"] | None = None  # display unit for money metrics
    # A share of a total: "groups" (each group's share of the scope's total), or the dimension whose
    # filter is the part ("医院渠道的净收入占比": the channel filter's share of all channels).
    share: str | None = None
    # The date a period reads when the metric's source has several (a poll's start and end): one of
    # ``Catalog.time_column_choices``; None reads the default.
    time_column: str | None = Field(None, max_length=200)

    def signature(self, *, tenant: str, model_version: str) -> str:
        """The semantic-cache key: metric, dimensions (in order), filters, the absolute window and the
        absolute comparison window, order, limit, unit, model version, tenant."""
        payload = {
            "tenant": tenant,
            "model_version": model_version,
            "metric": self.metric,
            "dimensions": list(self.dimensions),  # in order: it is the order of the result's columns
            "filters": sorted((f.dimension, f.op, sorted(f.values)) for f in self.filters),
            "window": None if self.time_window is None else [self.time_window.start.isoformat(), self.time_window.end.isoformat()],
            "comparison": None
            if self.comparison is None
            else [self.comparison.kind, self.comparison.window.start.isoformat(), self.comparison.window.end.isoformat()],
            "order": self.order,
            "limit": self.limit,
            "unit": self.unit,
        }
        if self.share is not None:  # absent for every other intent, so their keys stay what they were
            payload["share"] = self.share
        if self.time_column is not None:
            payload["time_column"] = self.time_column
        return hashlib.sha256(json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:32]
