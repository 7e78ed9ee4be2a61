"""The answer of a non-API handler whose flow a later issue fills: a clear 501, never a crash."""

from __future__ import annotations

from typing import Any

from memtool.errors import NotImplementedYet


def not_implemented(function: str, event: Any, detail: str) -> dict[str, Any]:
    step = event.get("step") if isinstance(event, dict) else None
    error = NotImplementedYet(f"{function}: {detail}", field="step" if step else None)
    return {"statusCode": 501, **error.to_body(), "step": step}
