"""Bodies, parameters and answers of the pre-fill API (POST/GET /prefill, GET /suggestions, overrides)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from memtool.api.limits import PlainText
from memtool.api.memories import ID_PATTERN, MAX_VERSION, Identifier
from memtool.flows.prefill import (
    MAX_TASK_SOURCES,
    FactView,
    FrozenSource,
    HumanOverride,
    PrefillTask,
    ReviewState,
    SuggestedValue,
    SuggestionItem,
    SuggestionListing,
    TaskResult,
    TaskState,
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class CreatePrefillBody(_Body):
    source_ids: list[Identifier] = Field(min_length=1, max_length=MAX_TASK_SOURCES, description="sources (POST /sources) to read")
    run: StrictBool = Field(True, description="run at once; false: only freeze the input (run it with POST /prefill/{id}/run)")


class OverrideBody(_Body):
    text: PlainText = Field(min_length=1, max_length=8000, description="the value in effect from now on, whatever is suggested later")
    expected_version: int = Field(ge=1, le=MAX_VERSION, strict=True, description="the suggestion's version you read")
    reason: PlainText | None = Field(None, max_length=2000)


class ReviewBody(_Body):
    expected_version: int = Field(ge=1, le=MAX_VERSION, strict=True, description="the suggestion's version you reviewed")


PrefillIdParam = Annotated[str, Path(pattern=ID_PATTERN, description="the pre-fill task's id")]
SuggestionIdParam = Annotated[str, Path(pattern=ID_PATTERN, description="the suggestion's id")]
ReviewStateParam = Annotated[ReviewState | None, Query(description="only suggestions in this review state")]
SuggestionCursorParam = Annotated[PlainText | None, Query(max_length=2048, description="next_cursor of the previous page (opaque)")]
SuggestionLimitParam = Annotated[int, Query(ge=1, le=100, description="page size")]


class _Answer(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class PrefillTaskView(_Answer):
    id: str
    state: TaskState = Field(description="planned (input frozen) or done")
    sources: list[FrozenSource] = Field(description="the frozen input: each source at the version the task read")
    input_fingerprint: str = Field(description="SHA-256 over the sources' ids, versions and text digests")
    targets: list[TaskResult] = Field(
        description="each suggestion's slot with the version the task expected (0: none yet) and, once run, its outcome: "
        "written, kept_override (a human override stays in effect), unchanged, or superseded (the target moved on: nothing written)"
    )
    gaps: list[str] = Field(description="what the input did not cover")
    created_by: str
    ran_by: str | None
    ran_at: datetime | None
    created_at: datetime
    updated_at: datetime


class SuggestionView(_Answer):
    id: str
    version: int
    target: str = Field(description="<table>.<column>")
    suggestion: SuggestedValue = Field(description="the latest suggestion, with the task and frozen input it came from")
    source_facts: list[FactView] = Field(description="quotes the suggestion rests on, each found verbatim in its source version")
    human_override: HumanOverride | None
    effective_value: str = Field(description="the human override when there is one, else the suggestion")
    review_state: ReviewState
    coverage_gaps: list[str]
    reviewed_by: str | None
    updated_at: datetime


class SuggestionsListing(_Answer):
    items: list[SuggestionView]
    next_cursor: str | None


def prefill_task_view(task: PrefillTask) -> PrefillTaskView:
    value = task.value
    return PrefillTaskView(
        id=task.id,
        state=value.state,
        sources=value.sources,
        input_fingerprint=value.input_fingerprint,
        targets=value.targets,
        gaps=value.gaps,
        created_by=value.created_by,
        ran_by=value.ran_by,
        ran_at=value.ran_at,
        created_at=task.created_at,
        updated_at=task.updated_at,
    )


def suggestion_view(item: SuggestionItem) -> SuggestionView:
    value = item.value
    return SuggestionView(
        id=item.id,
        version=item.version,
        target=value.target,
        suggestion=value.suggestion,
        source_facts=value.source_facts,
        human_override=value.human_override,
        effective_value=value.effective_value,
        review_state=value.review_state,
        coverage_gaps=value.coverage_gaps,
        reviewed_by=value.reviewed_by,
        updated_at=item.updated_at,
    )


def suggestions_listing(listing: SuggestionListing) -> SuggestionsListing:
    return SuggestionsListing(items=[suggestion_view(i) for i in listing.items], next_cursor=listing.next_cursor)
