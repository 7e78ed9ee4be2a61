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
