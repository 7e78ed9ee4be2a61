"""The templated attribution script on a ratio's table, in the real local process sandbox: the same
rate/mix result as the kernel in-process, and a generated script never replaces it."""

from __future__ import annotations

from typing import Any

import pytest

from memtool.analysis import kernels
from memtool.analysis.code_interpreter import ResilientSandbox, code_interpreter_tool
from memtool.analysis.sandbox.local import LocalProcessSandbox
from memtool.tools.base import ToolContext, ToolRegistry
from memtool.tools.executor import ToolExecutor

COLUMNS = ["month", "dimension", "member", "refund_amount", "gross_revenue"]
ROWS = [
    ["2026-06", "channel", "医院", 900.0, 30000.0],
    ["2026-06", "channel", "零售", 300.0, 20000.0],
    ["2026-07", "channel", "医院", 310.0, 31000.0],
    ["2026-07", "channel", "零售", 380.0, 19000.0],
    ["2026-06", "refund_reason", "质量问题", 1000.0, 50000.0],
    ["2026-06", "refund_reason", "物流延误", 200.0, 50000.0],
    ["2026-07", "refund_reason", "质量问题", 400.0, 50000.0],
    ["2026-07", "refund_reason", "物流延误", 290.0, 50000.0],
]
PARAMS: dict[str, Any] = {
    "method": "rate_mix", "period_column": "month", "dimension_column": "dimension", "member_column": "member",
    "numerator_column": "refund_amount", "denominator_column": "gross_revenue", "value_column": "refund_rate",
    "dimensions": ["channel", "refund_reason"], "shared_denominator": ["refund_reason"],
    "totals": {"2026-06": [1200.0, 50000.0], "2026-07": [690.0, 50000.0]}, "rounding": 0.005,
    "before_period": "2026-06", "after_period": "2026-07",
}  # fmt: skip
WRONG = (  # the additive shape, with nothing in it
    "import json\njson.dump({'before_period': 'x', 'after_period': 'y', 'before_total': 0, 'after_total': 0, 'total_change': 0, "
    "'dimensions': []}, open('result.json', 'w'))\n"
)


@pytest.fixture(scope="module")
def interpreter() -> ToolExecutor:
    sandbox = ResilientSandbox(LocalProcessSandbox(cpu_seconds=10))
    return ToolExecutor(ToolRegistry([code_interpreter_tool(lambda: sandbox, timeout_seconds=20)]))


def expected() -> dict[str, Any]:
    keys = ("period_column", "dimension_column", "member_column", "numerator_column", "denominator_column", "totals",
            "before_period", "after_period", "shared_denominator", "rounding")  # fmt: skip
    return kernels.rate_attribution_report(COLUMNS, ROWS, **{k: PARAMS[k] for k in keys})


def test_the_templated_script_gives_the_kernels_rate_and_mix_parts_and_draws_them(interpreter):
    result = interpreter.call(
        "code_interpreter", {"analysis": "attribution", "columns": COLUMNS, "rows": ROWS, "params": PARAMS}, ToolContext(episode_id="ep-1")
    )
    assert result.success, result.error
    assert result.data["script"] == "templated:attribution"
    assert result.data["result"] == expected()
    assert [f["name"] for f in result.data["files"]] == ["chart.png"]


def test_a_generated_script_never_answers_a_ratios_attribution(interpreter):
    arguments = {"analysis": "attribution", "columns": COLUMNS, "rows": ROWS, "params": PARAMS, "code": WRONG, "return_files": False}
    result = interpreter.call("code_interpreter", arguments, ToolContext(episode_id="ep-2"))
    assert result.success, result.error
    assert result.data["script"] == "templated:attribution" and result.data["result"] == expected()
    assert result.data["notes"] == ["the generated script was not used (a rate/mix attribution runs the templated kernel)"]
