"""memtool's application services as tools: ask, recall, feedback, remember, forget.

Each tool's input is the HTTP API's body with a description on every field (the same fields,
types, limits and validators: the MCP and Converse schemas are the API's schemas), and its output
is the API's answer model. The caller's identity is bound when the tools are built
(``service_tools(identity)``) and never read from the arguments: the input models forbid extra
fields, so a ``tenant`` or ``user`` argument is refused, not ignored.

Like an API handler, this module is an entry point: it sits above the API models and the
composition root (which it calls for its services), and nothing below imports it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from memtool.api.ask import AskAnswer, AskBody
from memtool.api.feedback import FeedbackAnswer, FeedbackBody, feedback_command
from memtool.api.limits import PlainText
from memtool.api.memories import (
    ID_PATTERN,
    CreateMemoryBody,
    MemoryWritten,
    RecallView,
    SupersededView,
    recall_view,
)
from memtool.errors import Forbidden, MemtoolError, NotFound, ValidationFailed
from memtool.identity import Identity
from memtool.planning.plan import Route
from memtool.tools.base import (
    BadArguments,
    Tool,
    ToolContext,
    ToolFailure,
    ToolNotFound,
)

Body = TypeVar("Body", bound=BaseModel)
Result = TypeVar("Result")

ASK_TIMEOUT_SECONDS = 30.0  # API Gateway waits 29 s for POST /ask; the flow's own steps time out before


def described(model: type[Body], name: str, descriptions: dict[str, str]) -> type[Body]:
    """``model`` with a description on each field (a tool's fields must say what they are).

    The fields keep their types, limits, defaults and the model's validators, so the tool's
    schema is the body's schema with descriptions added.
    """
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        described_info = copy.copy(info)
        described_info.description = descriptions.get(field_name, info.description)
        fields[field_name] = (info.annotation, described_info)
    return create_model(name, __base__=model, __doc__=model.__doc__, __module__=__name__, **fields)


AskArgs = described(
    AskBody,
    "AskArgs",
    {
        "question": "the data question, in Chinese or English (上个月各渠道的净收入; net revenue by channel last month)",
        "session_id": "a conversation's id: follow-ups in one session carry over its metric, filters and time window",
        "route": "force a route instead of the classifier's: nl2sql_query, kpi_lookup, business_knowledge_qa, deep_analysis_workflow",
        "conditions": "this-time conditions (money unit, chart type) that win over the user's profile for this question only",
    },
)

FeedbackArgs = described(
    FeedbackBody,
    "FeedbackArgs",
    {
        "episode_id": "the episode_id of the ask answer this feedback is about",
        "comment": "free text about the answer",
        "signals": "implicit signals (copied, follow_up_related, rephrased, abandoned, dwell_ms), used when there is no rating",
    },
)

RememberArgs = described(
    CreateMemoryBody,
    "RememberArgs",
    {
        "kind": "profile (a preference or fact about the user), episodic, correction (term -> meaning), knowledge "
        "(a shared definition; curators), working (this session only)",
        "content": "the memory in words, as a person would read it",
        "value": "the structured value of a slot (a correction's {term, means}, a preference's value)",
        "source_text": "the user's exact words the memory came from",
        "scope": "user (the caller's own) or tenant (shared with the tenant; curators only); default per kind",
        "confidence": "how sure the memory is, 0 to 1",
        "session_id": "the session a working memory belongs to",
        "tags": "labels to find the memory by",
        "provenance": "what made the memory: {trigger, episode_id?, sources?}",
    },
)


class RecallArgs(BaseModel):
    """GET /memories/search's parameters, plus a cap on how many memories come back."""

    model_config = ConfigDict(extra="forbid")

    text: Annotated[PlainText, Field(min_length=1, max_length=2000)] = Field(description="the text to recall for (a question)")
    route: Route = Field("nl2sql_query", description="the ask route whose per-kind budgets apply")
    tools: list[Annotated[PlainText, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=20, description="tool names the memories should fit (ranks tool-matched memories higher)"
    )
    limit: int | None = Field(
        None, ge=1, le=100, description="return at most this many memories (best first); default: the route's budgets"
    )


class ForgetArgs(BaseModel):
    """DELETE /memories/{id}."""

    model_config = ConfigDict(extra="forbid")

    memory_id: str = Field(pattern=ID_PATTERN, description="the id of the memory to forget, with every version of it")


class Forgotten(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    memory_id: str
    versions_removed: int = Field(description="how many stored versions were deleted")


def service_tools(identity: Identity) -> list[Tool[Any, Any]]:
    """The application services as tools acting for ``identity`` (tenant, user, roles)."""
    return [
        Tool(
            name="ask",
            description="Answer a data question over the warehouse: route, recall memories, plan SQL, guard, run, chart. "
            "Returns the SQL, columns, rows, a chart and the episode_id to give feedback on. A question the "
            "semantic layer cannot pin down comes back with status needs_clarification and the question to ask.",
            input_model=AskArgs,
            output_model=AskAnswer,
            handler=_as(identity, _ask),
            feedback=_ask_reward,
            summarize=lambda a: f"{a.status}: {a.row_count} rows" + (f" ({a.error.error})" if a.error else ""),
            timeout_seconds=ASK_TIMEOUT_SECONDS,
        ),
        Tool(
            name="recall",
            description="Recall the memories memtool would use for a question (profile, episodes, corrections, knowledge), "
            "each with its score, and a coverage report that says what recall could and could not see.",
            input_model=RecallArgs,
            output_model=RecallView,
            handler=_as(identity, _recall),
            feedback=lambda v: 1.0 if v.items else 0.0,
            summarize=lambda v: f"{len(v.items)} memories",
        ),
        Tool(
            name="feedback",
            description="Give feedback on an answer (by its episode_id): a rating (-1 wrong, 0 neutral, 1 right), a "
            "correction (free text or {term, means}), an expected value, a comment or implicit signals. The reward "
            "is credited to the memories the answer used.",
            input_model=FeedbackArgs,
            output_model=FeedbackAnswer,
            handler=_as(identity, _feedback),
            summarize=lambda f: f"reward {f.reward.total:+.2f}, {len(f.credited)} memories credited",
        ),
        Tool(
            name="remember",
            description="Remember something for the user: a preference, a correction (term -> meaning), a fact or a shared "
            "definition. A memory with a key replaces the user's earlier value of that key (history is kept).",
            input_model=RememberArgs,
            output_model=MemoryWritten,
            handler=_as(identity, _remember),
            summarize=lambda w: (
                f"{'created' if w.created else 'unchanged' if w.unchanged else 'new version'} {w.memory.id} v{w.memory.version}"
            ),
        ),
        Tool(
            name="forget",
            description="Forget one of the user's memories, every version of it (shared memories: curators only).",
            input_model=ForgetArgs,
            output_model=Forgotten,
            handler=_as(identity, _forget),
            summarize=lambda f: f"forgot {f.memory_id} ({f.versions_removed} versions)",
        ),
    ]


# ---- handlers: one service call each, for the bound identity -----------------------------------


def _ask(who: Identity, args: AskBody) -> AskAnswer:
    """An ask that failed is the tool's error (``isError``), with the flow's code and message, so an
    agent never reads a failed answer as a success."""
    from memtool.runtime import container
    from memtool.tools.base import ToolFailure

    answer = container.ask_service().ask(who, args.command())  # AskArgs is an AskBody
    if answer.status == "failed":
        error = answer.error
        code, message = (error.error, error.message) if error is not None else ("failed", "the question could not be answered")
        raise ToolFailure(f"{code}: {message} (episode {answer.episode_id})")
    return answer


def _ask_reward(answer: AskAnswer) -> float:
    # partial: the data was answered, an analysis the question asked for was not.
    return {"answered": 1.0, "remembered": 1.0, "partial": 0.5, "needs_clarification": 0.0, "no_data": 0.0}.get(answer.status, -1.0)


def _recall(who: Identity, args: RecallArgs) -> RecallView:
    from memtool.retrieval.recall import RecallRequest
    from memtool.runtime import container

    result = container.recall().recall(
        RecallRequest(tenant=who.tenant, user=who.user, text=args.text, route=args.route, tools=tuple(args.tools))
    )
    view = RecallView.model_validate(recall_view(result))
    if args.limit is not None:
        view.items = view.items[: args.limit]
    return view


def _feedback(who: Identity, args: FeedbackBody) -> FeedbackAnswer:
    from memtool.runtime import container

    if not args.says_something():  # as POST /feedback refuses an empty feedback
        raise BadArguments("give a rating (-1, 0 or 1), signals, a comment or a correction", field="rating")
    outcome = container.feedback_service().give(who, feedback_command(args))
    return FeedbackAnswer.model_validate(outcome.as_dict())


def _remember(who: Identity, args: CreateMemoryBody) -> MemoryWritten:
    from memtool.runtime import container

    result = container.memory_service().remember(who, args.command())
    old = result.superseded
    return MemoryWritten(
        memory=result.record,
        created=result.created,
        unchanged=result.unchanged,
        superseded=None if old is None else SupersededView(version=old.version, content=old.content),
        redactions=result.redactions,
    )


def _forget(who: Identity, args: ForgetArgs) -> Forgotten:
    from memtool.runtime import container

    outcome = container.memory_service().forget(who, args.memory_id)
    return Forgotten(memory_id=outcome.memory_id, versions_removed=outcome.versions_removed)


def _as(identity: Identity, handler: Callable[[Identity, Any], Result]) -> Callable[[Any, ToolContext], Result]:
    """The tool handler: ``handler`` for the bound identity, its domain errors as tool failures.

    A context naming another tenant or user is a wiring mistake (the server and the tools were
    built for different callers): refused rather than resolved either way.
    """

    def run(args: Any, context: ToolContext) -> Result:
        for name, bound, given in (("tenant", identity.tenant, context.tenant), ("user", identity.user, context.user)):
            if given is not None and given != bound:
                raise ToolFailure(f"these tools act for {name} {bound!r}, not {given!r}", field=name)
        try:
            return handler(identity, args)
        except MemtoolError as exc:
            raise tool_failure(exc) from exc

    return run


def tool_failure(error: MemtoolError) -> ToolFailure:
    """A domain error as the tool failure a caller can act on (the API maps the same errors to 4xx)."""
    if isinstance(error, ValidationFailed):
        return BadArguments(error.message, field=error.field)
    if isinstance(error, NotFound):
        return ToolNotFound(error.message, field=error.field)
    if isinstance(error, Forbidden):
        return ToolFailure(f"forbidden: {error.message}", field=error.field)
    return ToolFailure(error.message, field=error.field)


__all__ = ["described", "service_tools", "tool_failure"]
