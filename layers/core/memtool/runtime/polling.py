"""A background thread that drains a queue (the outbox, the diagnose queue) until stopped."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

logger = logging.getLogger("memtool.local")


@dataclass
class BackgroundDrain:
    """Runs ``drainer.drain()`` every ``interval`` seconds until stopped; backs off while
    deliveries fail (``drainer.failed_attempts`` grows) or the queue itself fails.

    The drainer needs ``drain(max_batches=None) -> int`` and ``failed_attempts``. ``errors`` holds
    the queue's own recent failures while they last (``/health`` reports the feed failing).
    """

    drainer: Any
    interval: float = 0.2
    max_pause: float = 5.0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _wake: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    thread_name: ClassVar[str] = "memtool-drain"
    what: ClassVar[str] = "drain"  # in log lines: "<what> failed"
    join_seconds: ClassVar[float] = 10.0  # how long stop() waits for a delivery in progress

    def start(self) -> BackgroundDrain:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        pause = self.interval
        while not self._stop.is_set():
            self._wake.wait(pause)
            self._wake.clear()
            if self._stop.is_set():
                break
            failures_before = self.drainer.failed_attempts
            try:
                self.drainer.drain()
            except Exception as exc:  # noqa: BLE001 - the queue itself failed: keep going, visibly
                message = f"{type(exc).__name__}: {str(exc)[:200]}"
                self.errors = [*self.errors[-9:], message]
                logger.warning("%s failed: %s", self.what, message)
                pause = min(self.max_pause, pause * 2)
                continue
            self.errors = []  # /health reports the feed failing only while it is
            failing = self.drainer.failed_attempts > failures_before
            pause = min(self.max_pause, pause * 2) if failing else self.interval

    def stop(self, final_drain_seconds: float = 10.0) -> None:
        """Stop the thread, then deliver what is left (bounded); the rest waits for the next start.

        A delivery still running after ``join_seconds`` keeps its batch in flight (it comes back on
        the next start); draining beside it could deliver twice, so the final drain is skipped.
        """
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.join_seconds)
            if self._thread.is_alive():
                logger.warning("%s still busy at stop; what it holds is delivered on the next start", self.what)
                return
        deadline = time.monotonic() + final_drain_seconds
        while time.monotonic() < deadline:
            try:
                if self.drainer.drain(max_batches=1) == 0:
                    break
            except Exception as exc:  # noqa: BLE001 - what is left stays queued for the next start
                logger.warning("final %s failed: %s: %s", self.what, type(exc).__name__, exc)
                break
