"""Sessions that are summarised and distilled (docs/learning.md, Sessions).

A session's working memory keeps its newest ``MEMTOOL_SESSION_TURNS`` (10) turns. Older turns are
not dropped: they fold into the session's running summary, kept beside the turns
(``{"turns": [...], "summary": {...}}``): how many turns it holds, the metrics, dimensions and
filters its answered turns asked for (with counts), and its newest answered turn (question and
intent), so a follow-up still finds the thread after the window moved on.

Ending a session distils it into the user's profile: ``usage.frequent`` counts the metrics,
dimensions and filters the user keeps asking for, over every session they ended; the planner
offers a user's usual metric first when it has to ask which one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

USAGE_KEY = "usage.frequent"
USAGE_KINDS = ("metrics", "dimensions", "filters")


def _answered_intent(turn: Mapping[str, Any]) -> dict[str, Any] | None:
    intent = turn.get("intent")
    return intent if turn.get("status") == "answered" and isinstance(intent, dict) else None


def usage_of(turns: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """What the answered turns asked for: metric, dimension and filter (``dimension=value``) counts."""
    counts: dict[str, dict[str, int]] = {kind: {} for kind in USAGE_KINDS}

    def add(kind: str, name: object) -> None:
        if isinstance(name, str) and name:
            counts[kind][name] = counts[kind].get(name, 0) + 1

    for turn in turns:
        intent = _answered_intent(turn)
        if intent is None:
            continue
        add("metrics", intent.get("metric"))
        for dimension in intent.get("dimensions") or []:
            add("dimensions", dimension)
        for condition in intent.get("filters") or []:
            if isinstance(condition, dict):
                for value in condition.get("values") or [condition.get("value")]:
                    if value is not None:
                        add("filters", f"{condition.get('dimension')}={value}")
    return counts


def add_counts(into: Mapping[str, Any] | None, more: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Two sets of counts added up (a stored value of the wrong shape counts as none)."""
    out: dict[str, dict[str, int]] = {}
    for kind in USAGE_KINDS:
        mine = (into or {}).get(kind)
        merged = {k: v for k, v in mine.items() if isinstance(k, str) and isinstance(v, int)} if isinstance(mine, dict) else {}
        for name, n in more.get(kind, {}).items():
            merged[name] = merged.get(name, 0) + n
        out[kind] = dict(sorted(merged.items(), key=lambda item: (-item[1], item[0]))[:50])
    return out


def fold(summary: Mapping[str, Any] | None, dropped: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The running summary with the turns that left the window folded in."""
    before = dict(summary or {})
    folded = int(before.get("turns_folded") or 0) + len(dropped)
    counts = add_counts(before, usage_of(dropped))
    last = before.get("last_answered")
    for turn in dropped:
        if turn.get("status") == "answered":
            last = {"episode_id": turn.get("episode_id"), "question": turn.get("question"), "intent": _answered_intent(turn)}
    top = next(iter(counts["metrics"]), None)
    text = f"{folded} earlier turns" + (f"; asked most for {top}" if top else "")
    if isinstance(last, dict) and last.get("question"):
        text += f"; the last answered: {str(last['question'])[:200]}"
    return {"turns_folded": folded, **counts, "last_answered": last, "text": text}


def summary_of(value: Any) -> dict[str, Any] | None:
    """The running summary a working-memory value holds, when it is one this module wrote."""
    summary = value.get("summary") if isinstance(value, dict) else None
    if not isinstance(summary, dict) or not isinstance(summary.get("turns_folded"), int):
        return None
    last = summary.get("last_answered")
    if last is not None and not isinstance(last, dict):
        return None
    return summary


def usual_metrics(value: Any) -> dict[str, int]:
    """The user's metric counts from a ``usage.frequent`` value (none for one of another shape)."""
    metrics = value.get("metrics") if isinstance(value, dict) else None
    if not isinstance(metrics, dict):
        return {}
    return {k: v for k, v in metrics.items() if isinstance(k, str) and isinstance(v, int) and v > 0}
