"""How POST /maintenance/run starts MaintenanceFlow: to the end locally, started in AWS.

Locally the flow runs on moto's engine in this process (the same ASL as in AWS) and the answer is
its report. In AWS the flow is a Standard state machine that may run for minutes, longer than API
Gateway waits: the route starts an execution and answers its ARN (the report is then
``maintenance.report``, and the Step Functions console shows the run).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from memtool.flows.maintenance import Launched
from memtool.flows.runner import FlowRunner

MACHINE = "MaintenanceFlow"


class LocalMaintenanceLauncher:
    def __init__(self, runner: FlowRunner, timeout_seconds: float = 900.0) -> None:
        self._runner = runner
        self._timeout = timeout_seconds

    def launch(self, execution_input: dict[str, Any]) -> Launched:
        run: Any = self._runner.run
        execution = run(MACHINE, execution_input, timeout_seconds=self._timeout)
        return Launched(execution.status, execution.output, None, execution.error, execution.cause)


class StepFunctionsMaintenanceLauncher:
    def __init__(self, sfn: Any, arn: str) -> None:
        self._sfn = sfn
        self._arn = arn

    def launch(self, execution_input: dict[str, Any]) -> Launched:
        name = f"api-{execution_input.get('tenant') or 'all'}-{uuid.uuid4().hex[:12]}"[:80]
        started = self._sfn.start_execution(stateMachineArn=self._arn, name=name, input=json.dumps(execution_input, ensure_ascii=False))
        return Launched("RUNNING", None, started["executionArn"])
