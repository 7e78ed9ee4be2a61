"""The flow-runner port: run a state machine to completion and get its final state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class FlowExecution:
    status: str  # SUCCEEDED | FAILED | TIMED_OUT | ABORTED
    output: dict[str, Any] | None
    error: str | None = None
    cause: str | None = None
    elapsed_ms: float = 0.0


class FlowRunner(Protocol):
    def run(self, machine: str, execution_input: dict[str, Any]) -> FlowExecution: ...
