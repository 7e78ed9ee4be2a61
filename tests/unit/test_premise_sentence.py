"""A why-question's premise checked against the data: "why did it rise" when it fell says so (issue 22)."""

from __future__ import annotations

import pytest

from memtool.analysis.summary import premise_sentence

FELL, ROSE = {"total_change": -0.0162}, {"total_change": 12.5}


@pytest.mark.parametrize(
    ("question", "result", "lang", "expected"),
    [
        ("为什么7月退款率升高", FELL, "zh", "注意：问题说退款率升高了，但数据里它是下降的。"),
        ("why did the refund rate rise in July", FELL, "en", "Note: the question says refund rate rose, but in the data it fell. "),
        ("why did the refund rate drop in July", ROSE, "en", "Note: the question says refund rate fell, but in the data it rose. "),
        ("为什么7月退款率下降", ROSE, "zh", "注意：问题说退款率下降了，但数据里它是上升的。"),
    ],
)
def test_a_premise_the_data_contradicts_is_named(question: str, result: dict[str, float], lang: str, expected: str) -> None:
    assert premise_sentence(question, result, lang, "退款率" if lang == "zh" else "refund rate") == expected


@pytest.mark.parametrize(
    ("question", "result"),
    [
        ("why did the refund rate rise in July", ROSE),  # the data agrees
        ("为什么7月退款率下降", FELL),
        ("why did the refund rate change in July", FELL),  # no direction named
        ("why did it rise and then fall", FELL),  # both: nothing to contradict
        ("why did the refund rate rise", {"total_change": 0}),
        ("why did the refund rate rise", {}),
    ],
)
def test_nothing_is_said_when_the_premise_holds_or_is_not_stated(question: str, result: dict[str, float]) -> None:
    assert premise_sentence(question, result, "en", "refund rate") == ""
