"""AskFlow in AWS: StartSyncExecution on the Express state machine, checking the returned status."""

from __future__ import annotations

import json
import time
from typing import Any

from memtool.flows.runner import FlowExecution

# The client makes one attempt (container.flow_runner): a retried StartSyncExecution that had
# started its flow would run the flow twice. These refusals start nothing, so they are retried here.
NOT_STARTED_CODES = frozenset({"ThrottlingException", "TooManyRequestsException"})
RETRY_PAUSES_SECONDS = (0.2, 0.6)


class StepFunctionsRunner:
    def __init__(self, sfn: Any, arns: dict[str, str], *, pauses: tuple[float, ...] = RETRY_PAUSES_SECONDS) -> None:
        self._sfn = sfn
        self._arns = arns
        self._pauses = pauses

    def _start(self, **request: Any) -> dict[str, Any]:
        """StartSyncExecution, again after a refusal that started no flow (a throttle, or a
        connection that was never made); any other failure, a read timeout above all, is final."""
        from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError

        for pause in (*self._pauses, None):
            try:
                response: dict[str, Any] = self._sfn.start_sync_execution(**request)
                return response
            except ClientError as exc:
                if pause is None or exc.response.get("Error", {}).get("Code") not in NOT_STARTED_CODES:
                    raise
            except (EndpointConnectionError, ConnectTimeoutError):
                if pause is None:
                    raise
            time.sleep(pause)
        raise AssertionError("unreachable")

    def run(self, machine: str, execution_input: dict[str, Any]) -> FlowExecution:
        arn = self._arns.get(machine)
        if not arn:
            raise RuntimeError(f"no state machine ARN configured for {machine}")
        from botocore.exceptions import ReadTimeoutError

        started = time.perf_counter()
        try:
            response = self._start(
                stateMachineArn=arn,
                name=str(execution_input.get("episode_id") or "") or None,
                input=json.dumps(execution_input, ensure_ascii=False),
            )
        except ReadTimeoutError as exc:
            episode = execution_input.get("episode_id")
            # The client is built with one attempt (container.flow_runner): the flow started once
            # and may still finish and record its episode; the caller is not kept waiting past it.
            return FlowExecution(
                status="TIMED_OUT",
                output=None,
                error="States.Timeout",
                cause=f"AskFlow did not answer episode {episode} within the client's read timeout "
                f"({exc.kwargs.get('endpoint_url', 'Step Functions')}), which is longer than the flow's own timeout",
                elapsed_ms=(time.perf_counter() - started) * 1000,
            )
        output = response.get("output")
        return FlowExecution(
            status=response["status"],
            output=json.loads(output) if output else None,
            error=response.get("error"),
            cause=response.get("cause"),
            elapsed_ms=(time.perf_counter() - started) * 1000,
        )
