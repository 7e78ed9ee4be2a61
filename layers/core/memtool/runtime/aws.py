"""boto3 clients built from settings: the one place that knows endpoints and credentials."""

from __future__ import annotations

import threading
from typing import Any

from memtool.settings import Settings

# One boto3 session per process: a session loads and caches the service models, which is most of
# the cost of a client (a quarter of a second each). Sessions are not thread-safe, so clients
# are made under a lock; the clients themselves are.
_session: Any = None
_session_lock = threading.Lock()




def client(
    service: str, settings: Settings, *, max_attempts: int = 5, connect_timeout: float = 3, read_timeout: float = 10
) -> Any:
    """A boto3 client; ``max_attempts=1`` leaves retrying to the caller (e.g. the Bedrock embedder,
    or StartSyncExecution, which a retry would run twice)."""
    import boto3
    from botocore.config import Config

    global _session
    with _session_lock:
        if _session is None:
            _session = boto3.session.Session()
        return _session.client(
            service,
            region_name=settings.region,
            endpoint_url=settings.aws_endpoint_url,
            aws_access_key_id=settings.aws_access_key_id,
            aws_secret_access_key=settings.aws_secret_access_key,
            config=Config(
                retries={"mode": "standard", "total_max_attempts": max_attempts},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                # moto (in-process and server mode) answers only on regional endpoints, not on the
                # account-id endpoints newer botocore picks for DynamoDB and its streams.
                account_id_endpoint_mode="disabled" if settings.is_local else "preferred",
                # A custom endpoint (moto, a test double) is one host: no "sync-" prefix for
                # StartSyncExecution, which only resolves on AWS's own names.
                inject_host_prefix=settings.aws_endpoint_url is None,
            ),
        )
