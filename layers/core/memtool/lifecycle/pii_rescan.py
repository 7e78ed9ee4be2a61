"""PII re-scan: when the redaction rules change, what was stored before them is scanned again.

Every write path redacts with the rules of its day (``memory.pii``). Each tenant's maintenance
state (``maintenance.state`` in its shared partition) records the rules' version its memories
were last scanned with. While it is older than ``PII_RULES_VERSION``, this step re-runs the
redactor over every live memory's content, source text and value strings, and writes a new
version where the rules now catch something (the redaction counts added to the record's). When
the tenant's walk is done it records the version, so the next runs skip the tenant until the
rules change again. Redacting redacted text changes nothing, so a repeated scan is harmless.

The semantic model and maintenance's own records are not memories about people: they are left as
they are.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from memtool.lifecycle.walk import LIVE, LifecycleStore, StepResult, walk, write_patch
from memtool.memory.pii import PII_RULES_VERSION, scrub_fields
from memtool.memory.records import MemoryPatch, MemoryRecord
from memtool.memory.store import Partition

SKIPPED_KEYS = ("semantic_model",)
SKIPPED_PREFIXES = ("maintenance.",)


class PiiRescan:
    name = "pii_rescan"

    def __init__(
        self,
        store: LifecycleStore,
        scanned_version: Callable[[str], int],
        record_version: Callable[[str, int], None],
        batch: int = 2000,
        rules_version: int = PII_RULES_VERSION,
    ) -> None:
        self._store = store
        self._scanned_version = scanned_version
        self._record_version = record_version
        self._batch = batch
        self._rules = rules_version

    def run(self, tenant: str, cursor: str | None, now: datetime) -> StepResult:
        if cursor is None and self._scanned_version(tenant) >= self._rules:
            result = StepResult(counts={"up_to_date": 1, "redacted": 0})
            result.notes.append(f"scanned with PII rules v{self._rules} already")
            return result

        def visit(where: Partition, heads: list[MemoryRecord], result: StepResult) -> None:
            for record in heads:
                if record.status not in LIVE or _skipped(record):
                    continue
                result.add("scanned")
                content, source_text, value, counts = scrub_fields(record.content, record.source_text, record.value)
                if not any(counts.values()):
                    continue
                merged = {k: record.redactions.get(k, 0) + counts.get(k, 0) for k in {*record.redactions, *counts}}
                fields: dict[str, Any] = {"content": content, "redactions": merged}
                if source_text is not None:
                    fields["source_text"] = source_text
                if value is not None:
                    fields["value"] = value
                if write_patch(self._store, where, record, MemoryPatch(**fields), now, result) is not None:
                    result.add("redacted")
                    result.add("found", sum(counts.values()))

        result = walk(self._store, tenant, cursor, self._batch, None, visit, now)
        result.counts.setdefault("redacted", 0)
        if result.cursor is None:
            self._record_version(tenant, self._rules)
            result.counts["rules_version"] = self._rules
        return result


def _skipped(record: MemoryRecord) -> bool:
    key = record.key or ""
    return key in SKIPPED_KEYS or key.startswith(SKIPPED_PREFIXES)
