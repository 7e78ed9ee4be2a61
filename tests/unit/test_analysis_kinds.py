"""The analysis kinds have one source, memtool/analysis/kinds.py; every table keyed by kind covers them.

A list of the kinds written anywhere else in the library (a Literal, a tuple, a list, a set of
four or more of them) is a second copy, and fails here. The tables that must be keyed by kind
(the question's words, the templated scripts, the result models, the summaries, the charts, the
ML tools) have exactly the kinds, so a kind added in kinds.py and forgotten in one of them fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from memtool.analysis import kinds, scripts, selection
from memtool.analysis.code_interpreter import CodeInterpreterInput
from memtool.analysis.kinds import KINDS, TASK_KINDS, AnalysisKind, TaskKind
from memtool.analysis.ml.models import RESULT_MODELS
from memtool.analysis.ml.registry import ml_tools
from memtool.analysis.summary import summarize_analysis
from memtool.viz import analysis_charts

LIBRARY = Path(__file__).resolve().parents[2] / "layers" / "core" / "memtool"
SIX = {"anomaly", "forecast", "attribution", "clustering", "correlation", "regression"}


def test_the_kinds_in_their_order():
    assert KINDS == ("anomaly", "forecast", "attribution", "clustering", "correlation", "regression")
    assert (*KINDS, "segments") == TASK_KINDS
    assert get_args(AnalysisKind) == KINDS and get_args(TaskKind) == TASK_KINDS
    assert kinds.spoken() == "anomaly, forecast, attribution, clustering, correlation or regression"


def test_every_table_keyed_by_kind_has_exactly_the_kinds():
    assert tuple(selection._WORDS) == KINDS  # the words a question asks with, in the order the answer runs them
    assert set(scripts._DRIVERS) == set(TASK_KINDS)
    assert set(RESULT_MODELS) == set(TASK_KINDS)
    assert set(analysis_charts._TITLES) == set(analysis_charts._BUILDERS) == set(KINDS)
    assert sorted(tool.name for tool in ml_tools()) == sorted(f"ml_{kind}" for kind in TASK_KINDS)
    schema = CodeInterpreterInput.model_json_schema()["properties"]["analysis"]
    assert tuple(schema["enum"]) == TASK_KINDS and schema["description"].endswith(kinds.spoken())


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_a_summary(kind):
    try:
        summarize_analysis(kind, {}, lang="en", metric_label="net revenue", unit=None)
    except ValueError as error:
        assert "no summary" not in str(error)
    except (KeyError, TypeError, IndexError):
        pass  # the writer ran; an empty result is not its input


@pytest.mark.parametrize("kind", ["segments", "trend"])
def test_a_kind_without_a_summary_is_refused(kind):
    with pytest.raises(ValueError, match="no summary"):
        summarize_analysis(kind, {}, lang="en", metric_label="net revenue", unit=None)  # type: ignore[arg-type]


def kind_lists(source: str) -> list[int]:
    """Lines of a Literal, tuple, list or set that spells four or more of the six kinds."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):  # a Literal[...]'s slice is a Tuple
            continue
        named = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)} & SIX
        if len(named) >= 4:
            found.append(node.lineno)
    return found


def test_the_kinds_are_spelled_as_a_list_only_in_kinds_py():
    found = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        name = str(path.relative_to(LIBRARY))
        lines = kind_lists(path.read_text(encoding="utf-8"))
        if lines and name != "analysis/kinds.py":
            found[name] = sorted(set(lines))
    assert found == {}, f"the analysis kinds spelled again beside memtool/analysis/kinds.py: {found}"
    assert kind_lists((LIBRARY / "analysis" / "kinds.py").read_text(encoding="utf-8"))  # the check sees the one source


def test_the_check_catches_a_second_copy():
    assert kind_lists('Kind = Literal["anomaly", "forecast", "attribution", "clustering", "correlation", "regression"]\n') == [1]
    assert kind_lists('KINDS = ("anomaly", "forecast", "attribution", "clustering")\n') == [1]
    assert kind_lists('if kind in ("anomaly", "forecast", "attribution"):\n    pass\n') == []  # a subset with a meaning of its own
