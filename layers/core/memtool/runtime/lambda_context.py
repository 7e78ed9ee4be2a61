"""A Lambda context object for handlers invoked in-process by the local runtime and tests."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field


@dataclass
class LocalLambdaContext:
    function_name: str = "memtool-local"
    memory_limit_in_mb: int = 1024
    timeout_seconds: float = 30.0
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/memtool-local"
    log_stream_name: str = "local"
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    @property
    def function_version(self) -> str:
        return "$LATEST"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_seconds - (time.monotonic() - self._started)) * 1000))


def discard_unpublished_metrics() -> None:
    """After an in-process invocation with metrics disabled, drop what the handler recorded.

    Powertools keeps one metric buffer per process and, when metrics are disabled, never clears
    it on flush: it grows until a metric reaches 100 values and is then printed as an EMF dump
    anyway. In Lambda each container handles one invocation at a time and publishes; locally the
    buffer is simply discarded.
    """
    from aws_lambda_powertools.metrics import Metrics
    from aws_lambda_powertools.metrics.functions import is_metrics_disabled

    if is_metrics_disabled():
        Metrics().clear_metrics()
