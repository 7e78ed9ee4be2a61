"""AskFlow in AWS: StartSyncExecution on the Express state machine, checking the returned status."""

from __future__ import annotations

import json
import time
from typing import Any

from memtool.flows.runner import FlowExecution


class StepFunctionsRunner:
    def __init__(self, sfn: Any, arns: dict[str, str]) -> None:
        self._sfn = sfn
        self._arns = arns

    def run(self, machine: str, execution_input: dict[str, Any]) -> FlowExecution:
        arn = self._arns.get(machine)
        if not arn:
            raise RuntimeError(f"no state machine ARN configured for {machine}")
        started = time.perf_counter()
        response = self._sfn.start_sync_execution(
            stateMachineArn=arn,
            name=str(execution_input.get("episode_id") or "") or None,
            input=json.dumps(execution_input, ensure_ascii=False),
        )
        output = response.get("output")
        return FlowExecution(
            status=response["status"],
            output=json.loads(output) if output else None,
            error=response.get("error"),
            cause=response.get("cause"),
            elapsed_ms=(time.perf_counter() - started) * 1000,
        )
