"""Input past what memtool can read is refused in words, never a crash: dates outside 1900-2200
(semantic.time_expressions) and models nested too deep (semantic.validation)."""

from __future__ import annotations

from datetime import date

import pytest
import yaml

from memtool.errors import ValidationFailed
from memtool.semantic.time_expressions import find_time_expressions, previous_window
from memtool.semantic.validation import MODEL_MAX_DEPTH, parse_for_checks, shape_problem, with_lines, yaml_depth_problem

TODAY = date(2026, 11, 29)


@pytest.mark.parametrize(
    ("question", "words"),
    [
        ("net revenue between 1900-01-01 and 9999-12-31", "9999-12-31"),  # was OverflowError: 9999-12-31 + 1 day
        ("0001-01-01以来的净收入", "0001-01-01"),
        ("revenue on 1899-12-31", "1899-12-31"),
        ("2300年3月的净收入", "2300年3月"),
        ("net revenue in December 9999", "December 9999"),
        ("orders in Q1 2300", "Q1 2300"),
        ("2300年第一季度的订单", "2300年第一季度"),
        ("revenue over the last 3000 years", "the last 3000 years"),  # was ValueError: year -974
        ("最近3660年的收入", "最近3660年"),
    ],
)
def test_a_date_outside_1900_to_2200_is_refused_quoting_the_words(question: str, words: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        find_time_expressions(question, TODAY)
    assert type(refused.value) is ValidationFailed  # the ask flow knows a step's refusal by this name
    assert refused.value.field == "question"
    expected = f'"{words}" is outside the dates memtool can read (1900-01-01 to 2200-12-31): ask about a period inside them'
    assert refused.value.message == expected


def test_the_edges_of_the_range_are_read_and_compared() -> None:
    [first, last] = find_time_expressions("between 1900-01-01 and 2200-12-31", TODAY)
    assert (first.window.start, last.window.end) == (date(1900, 1, 1), date(2201, 1, 1))
    assert previous_window(first.window, "yoy")[1].start == date(1899, 1, 1)
    assert previous_window(last.window, "yoy")[1].start == date(2199, 12, 31)


@pytest.mark.parametrize("text", ["SKU 3000-12 sales last month", "2026-02-30"])
def test_words_that_may_be_no_date_are_left_unread_not_refused(text: str) -> None:
    found = [m.text for m in find_time_expressions(text, TODAY)]
    assert "3000-12" not in found and "2026-02-30" not in found


def test_yaml_nested_deeper_than_a_model_is_refused_from_the_parser_events_at_its_line() -> None:
    flow = "name: deep\nmetrics: " + "[" * 200_000 + "]" * 200_000 + "\n"
    with pytest.raises(RecursionError):
        yaml.safe_load(flow)  # what `model validate` used to meet
    problem = yaml_depth_problem(flow)
    assert problem is not None and problem.line == 2
    assert problem.message == f"the YAML is nested deeper than {MODEL_MAX_DEPTH} levels; a semantic model is a few levels deep"
    assert with_lines([problem], flow)[0].line is None  # line_of does not compose it either (no RecursionError)
    assert yaml_depth_problem("name: shallow\nmetrics: [[[1]]]\n") is None
    assert yaml_depth_problem("name: [unclosed\n") is None  # the loader reports the syntax error


def test_a_model_too_deep_or_too_large_through_aliases_is_one_problem() -> None:
    cycle = yaml.safe_load("name: x\ntables: &t [*t]\n")
    model, problems = parse_for_checks(cycle)
    assert model is None and len(problems) == 1
    assert problems[0].message == f"is nested deeper than {MODEL_MAX_DEPTH} levels; a semantic model is a few levels deep"
    laughs = "a: &a [" + ", ".join(["lol"] * 9) + "]\n"
    for name, previous in zip("bcdefg", "abcdef", strict=True):
        laughs += f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]\n"
    problem = shape_problem(yaml.safe_load(laughs))
    assert problem is not None and problem.message.startswith("the model holds more than 200,000 values")
