"""The analysis kinds: the one place they are spelled.

A question asks for one of six analyses by name (``AnalysisKind``, in the order ``KINDS`` lists
them, which is the order the answer runs and reports them). A task may also be ``segments``, the
anomaly analysis's drill-down ("where is it?"), which no question asks for by name
(``TaskKind``). Every table keyed by kind (the question's words, the templated scripts, the ML
tools' result models, the summaries, the charts) is typed or tested against these.
"""

from __future__ import annotations

from typing import Literal, TypeGuard, get_args

AnalysisKind = Literal["anomaly", "forecast", "attribution", "clustering", "correlation", "regression"]
KINDS: tuple[AnalysisKind, ...] = get_args(AnalysisKind)

TaskKind = Literal[AnalysisKind, "segments"]
TASK_KINDS: tuple[TaskKind, ...] = get_args(TaskKind)


def is_analysis_kind(value: str) -> TypeGuard[AnalysisKind]:
    return value in KINDS


def spoken(kinds: tuple[str, ...] = KINDS) -> str:
    """``anomaly, forecast, ... or regression``: the kinds as a sentence names them."""
    return kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} or {kinds[-1]}"


__all__ = ["KINDS", "TASK_KINDS", "AnalysisKind", "TaskKind", "is_analysis_kind", "spoken"]
