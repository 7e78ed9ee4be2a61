"""A chart chosen among an answer's candidates (POST /charts/choice): kept as the caller's chart for
that shape of data, a profile memory in slot ``display.chart_for.<shape>``, which the next answer
of that shape uses and cites (docs/console.md; AskFlow's Visualize reads it)."""

from __future__ import annotations

from dataclasses import dataclass

from memtool.clock import Clock
from memtool.errors import NotFound, ValidationFailed
from memtool.flows.memory_write import MemoryService
from memtool.identity import Identity
from memtool.memory.commands import NewMemory
from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, Trigger
from memtool.memory.slots import chart_for_key, episode_key
from memtool.memory.store import MemoryStore, Partition, UndecodableRecord


@dataclass(frozen=True)
class ChartChoice:
    memory: MemoryRecord
    shape: str
    chart_type: str
    replaced: bool  # an earlier choice for this shape was superseded


class ChartChoiceService:
    def __init__(self, store: MemoryStore, memories: MemoryService, clock: Clock) -> None:
        self._store = store
        self._memories = memories
        self._clock = clock

    def choose(self, who: Identity, episode_id: str, chart_type: str) -> ChartChoice:
        from memtool.viz.charts import fits_kind

        try:
            episode = self._store.get_slot(Partition(who.tenant, who.user), MemoryKind.EPISODIC, episode_key(episode_id), self._clock.now())
        except UndecodableRecord:
            episode = None
        if episode is None:
            raise NotFound(f"episode {episode_id} not found (an answer of yours)", field="episode_id")
        value = episode.value if isinstance(episode.value, dict) else {}
        shape = value.get("chart_shape")
        if not isinstance(shape, str) or not shape or not fits_kind("table", shape):
            raise ValidationFailed(f"the answer of episode {episode_id} has no chart to choose for", field="episode_id")
        if not fits_kind(chart_type, shape):
            raise ValidationFailed(f"a {chart_type} chart cannot draw a {shape}", field="chart_type")
        written = self._memories.remember(
            who,
            NewMemory(
                kind=MemoryKind.PROFILE,
                key=chart_for_key(shape),
                content=f"chart for a {shape}: {chart_type}",
                value={"chart": chart_type, "shape": shape, "episode_id": episode_id},
                scope=MemoryScope.USER,
                trigger=Trigger.FEEDBACK,
                episode_id=episode_id,
            ),
        )
        return ChartChoice(written.record, shape, chart_type, replaced=written.superseded is not None)
