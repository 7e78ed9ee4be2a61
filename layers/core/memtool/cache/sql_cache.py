"""The SQL semantic cache: a question asked again skips recall and planning, never the warehouse.

What it caches is SQL, and a hit always runs it again, so the data is fresh. What it must never do
is answer one entity's question with another's SQL, so a hit is by construction, not by threshold:

- **Exact key.** A question the rule planner can plan on its own has a resolved intent; the key is
  the tenant, the semantic model's version (the catalog's and each name's), the intent's signature
  (metric, dimensions, filters with their resolved values, the absolute window, order, limit,
  unit), and the memories that could shape it: the caller's and the tenant's corrections of a term
  the question names, every active lesson, and the unit in force. When any of those is the user's
  (a correction, a lesson, a profile unit), the entry is the user's; otherwise the tenant's. A hit
  needs the whole key to match, so "上海" and "北京" (or 上个月 and 上上个月, 前3 and 前5, 净收入 and
  销售额, 不含电商 and 电商) are different keys and never each other's hit.
- **Masked match.** A question the rules cannot plan (the LLM path) is masked by the semantic
  layer's recognisers: entity values, windows, top-N numbers and units become typed slots. An entry
  is a candidate when its masked text is similar enough (per route, default 0.92), its slot set is
  the same, every recognised term (metrics, dimensions, grains, comparison, unknown words,
  negations) is the same, and the same memories shape it. The new values are then bound into the
  cached SQL through sqlglot (literal nodes, never text), and, where the entry has an intent, the
  result must equal the compiled intent with the new values bound in; anything unbound or ambiguous
  is no hit.

Entries are memories of kind ``cache`` in the same store (slot ``cache.<key>``, the tenant's or
the user's partition, a TTL of ``MEMTOOL_CACHE_TTL_SECONDS``) and the same vector index (the
masked text). A new lesson or a correction of a term the question names changes the key, and a
new semantic-model version changes it too: those entries are simply never found again and expire.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from memtool.memory.records import MemoryDraft, MemoryKind, MemoryRecord, MemoryScope, MemoryStatus, Provenance, Trigger
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition

logger = logging.getLogger("memtool.cache")

CACHE_KEY_PREFIX = "cache."
CACHED_ROUTES = ("nl2sql_query", "kpi_lookup")
CANDIDATES = 5
_LIST_LIMIT = 200


# ---- what a lookup found ----------------------------------------------------------------------


@dataclass(frozen=True)
class Shaping:
    """The memories that could shape a question's SQL, and the unit in force."""

    memories: tuple[tuple[str, int, str, str], ...]  # (id, version, owner, kind), sorted
    unit: str | None
    unit_from_profile: bool
    corrections: tuple[Any, ...] = ()  # TermMapping, to parse with
    lessons: tuple[Any, ...] = ()  # diagnosis.lessons.Lesson

    def user_scoped(self, user: str) -> bool:
        return self.unit_from_profile or any(owner == user for _, _, owner, _ in self.memories)

    def as_key(self) -> list[Any]:
        return [[memory_id, version] for memory_id, version, _, _ in self.memories] + [["unit", self.unit or ""]]


@dataclass
class CacheOutcome:
    """A lookup's answer: a hit with the SQL to run, or a miss with why."""

    hit: bool
    reason: str  # exact | masked | miss reasons: disabled, route, follow_up, not_planned, no_entry, ...
    key: str | None = None
    similarity: float | None = None
    bound_slots: list[dict[str, Any]] = field(default_factory=list)
    sql: str | None = None
    intent: dict[str, Any] | None = None
    entry_id: str | None = None
    entry_version: int | None = None
    entry_owner: str | None = None
    lessons: list[dict[str, Any]] = field(default_factory=list)
    memories: list[tuple[str, int, str]] = field(default_factory=list)  # (id, version, kind) that shaped it
    notes: list[str] = field(default_factory=list)  # the plan's own notes when it was planned
    refusals: list[str] = field(default_factory=list)  # candidates seen and refused, by reason

    def public(self) -> dict[str, Any]:
        return {
            "hit": self.hit,
            "key": self.key,
            "similarity": None if self.similarity is None else round(self.similarity, 6),
            "bound_slots": self.bound_slots,
            "reason": self.reason,
            "entry": None if self.entry_id is None else f"memory:{self.entry_id}@v{self.entry_version}",
        }


class CacheStats:
    """Hits, misses and refusals by reason, for /health and the tests (one per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._counts)
        hits = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("hit:")}
        misses = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("miss:")}
        refusals = {k.split(":", 1)[1]: v for k, v in counts.items() if k.startswith("refused:")}
        return {
            "hits": sum(hits.values()),
            "misses": sum(misses.values()),
            "stored": counts.get("stored", 0),
            "hits_by_kind": hits,
            "misses_by_reason": misses,
            "refusals_by_reason": refusals,
        }


STATS = CacheStats()


# ---- the cache --------------------------------------------------------------------------------


class SqlCache:
    def __init__(
        self,
        store: MemoryStore,
        *,
        clock: Any,
        settings: Any,
        rules: Callable[[str], Any],  # (tenant) -> RulePlanner over the tenant's model (its parser and compiler)
        today: Callable[[], date],
        index: Callable[[], Any] | None = None,  # -> VectorIndex | None
        embedder: Callable[[], Any] | None = None,  # -> Embedder
        stats: CacheStats = STATS,
    ) -> None:
        self._store = store
        self._clock = clock
        self._settings = settings
        self._rules = rules
        self._today = today
        self._index = index
        self._embedder = embedder
        self.stats = stats

    # ---- lookup ---------------------------------------------------------------------------

    def lookup(
        self,
        tenant: str,
        user: str,
        question: str,
        route: str,
        *,
        profile_unit: str | None = None,
        conditions: dict[str, Any] | None = None,
        previous_turn: dict[str, Any] | None = None,
    ) -> CacheOutcome:
        outcome = self._lookup(tenant, user, question, route, profile_unit, conditions or {}, previous_turn)
        self.stats.count(("hit:" if outcome.hit else "miss:") + outcome.reason)
        for reason in outcome.refusals:
            self.stats.count("refused:" + reason)
        return outcome

    def _lookup(
        self,
        tenant: str,
        user: str,
        question: str,
        route: str,
        profile_unit: str | None,
        conditions: dict[str, Any],
        previous_turn: dict[str, Any] | None,
    ) -> CacheOutcome:
        if not self._settings.cache_enabled:
            return CacheOutcome(False, "disabled")
        if route not in CACHED_ROUTES:
            return CacheOutcome(False, "route")
        from memtool.semantic.followup import is_follow_up

        rules = self._rules(tenant)
        today = self._today()
        now = self._clock.now()
        shaping = self.shaping(tenant, user, question, profile_unit=profile_unit, conditions=conditions, now=now)
        parsed = rules.parser.recognise(question, today=today, corrections=shaping.corrections)
        if previous_turn is not None and (previous_turn.get("status") == "needs_clarification" or is_follow_up(parsed)):
            # A reply to a clarification, or a follow-up, means what it means with the previous turn.
            return CacheOutcome(False, "follow_up")
        if parsed.lasting or parsed.this_time:
            # "以后默认用万元", "这次用分": the plan remembers or applies a preference; the cache would skip it.
            return CacheOutcome(False, "preference")
        planned = self._rule_plan(question, route, tenant, user, shaping, profile_unit, conditions)
        if planned is not None:
            key = self.entry_key(tenant, user, planned, shaping)
            record = self._entry(tenant, user, key, shaping, now)
            if record is None:
                return CacheOutcome(False, "no_entry", key=key)
            value = record.value if isinstance(record.value, dict) else {}
            if not self._still_live(tenant, user, value, now):
                self.forget(tenant, record.owner, record.id)
                return CacheOutcome(False, "stale_memory", key=key, refusals=["stale_memory"])
            return _hit("exact", record, key=key, similarity=1.0, sql=str(value.get("sql") or ""), intent=value.get("intent"))
        return self._masked_lookup(tenant, user, question, route, shaping, parsed, now)

    def _rule_plan(
        self, question: str, route: str, tenant: str, user: str, shaping: Shaping, profile_unit: str | None, conditions: dict[str, Any]
    ) -> Any:
        """The intent the rule planner resolves for the question alone, or None."""
        from memtool.planning.context import PlanContext, normalize_unit

        context = PlanContext(
            tenant=tenant,
            user=user,
            profile_unit=normalize_unit(profile_unit),
            conditions={k: v for k, v in conditions.items() if v is not None},
            corrections=list(shaping.corrections),
        )
        try:
            plan = self._rules(tenant).plan(question, route=route, context=context)
        except Exception:  # a question the rules cannot take is a masked lookup
            logger.debug("the rule planner could not plan %r for the cache", question, exc_info=True)
            return None
        if plan.status != "planned" or plan.intent is None or plan.remember is not None:
            return None
        return plan.intent

    def entry_key(self, tenant: str, user: str, intent: Any, shaping: Shaping) -> str:
        catalog = self._rules(tenant).parser.catalog
        payload = {
            "intent": intent.signature(tenant=tenant, model_version=catalog.model_version_for(intent)),
            "shaping": shaping.as_key(),
            "user": user if shaping.user_scoped(user) else None,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:40]

    def _entry(self, tenant: str, user: str, key: str, shaping: Shaping, now: datetime) -> MemoryRecord | None:
        where = Partition(tenant, user if shaping.user_scoped(user) else TENANT_OWNER)
        try:
            record = self._store.get_slot(where, MemoryKind.CACHE, CACHE_KEY_PREFIX + key, now)
        except Exception:  # an entry the store cannot read is a miss
            logger.warning("cache entry %s of %s could not be read", key, tenant, exc_info=True)
            return None
        if record is None or record.is_expired(now) or record.status is not MemoryStatus.ACTIVE:
            return None
        value = record.value if isinstance(record.value, dict) else {}
        return record if value.get("key") == key and value.get("sql") else None

    # ---- the masked path (questions only a model can plan) --------------------------------

    def _masked_lookup(
        self, tenant: str, user: str, question: str, route: str, shaping: Shaping, parsed: Any, now: datetime
    ) -> CacheOutcome:
        from memtool.semantic.masking import mask_question

        if self._index is None or self._embedder is None:
            return CacheOutcome(False, "not_parsed")
        index = self._index()
        if index is None:
            return CacheOutcome(False, "not_parsed")
        masked = mask_question(parsed)
        embedder = self._embedder()
        vector = embedder.embed([masked.key])[0]
        from memtool.retrieval.index import IndexUnavailable

        owners = (user, TENANT_OWNER)
        try:
            hits = _nearest_entries(index, tenant, owners, embedder.id, vector)
        except IndexUnavailable:
            return CacheOutcome(False, "index_unavailable")
        probe = _MaskedProbe(
            user=user,
            route=route,
            threshold=float(self._settings.cache_min_similarity.get(route, 0.92)),
            model_version=self._rules(tenant).parser.catalog.model_version,
            signature=[tuple(s) for s in masked.signature],
            terms=sorted(recognised_terms(parsed)),
            shaping=shaping,
        )
        records = self._store.get_many(tenant, [(h.owner, h.memory_id) for h in hits if h.owner in owners])
        refusals: list[str] = []
        for hit in hits:
            record = records.get(hit.memory_id)
            if record is None or record.is_expired(now) or record.status is not MemoryStatus.ACTIVE or record.kind is not MemoryKind.CACHE:
                continue
            value = record.value if isinstance(record.value, dict) else {}
            similarity = float(hit.cosine or 0.0)
            reason = probe.refusal(record, value, similarity)
            if reason is not None:
                refusals.append(reason)
                continue
            bound = self._bind(value, question, masked, tenant)
            if isinstance(bound, str):
                refusals.append(bound)
                continue
            sql, intent, slots = bound
            if not self._still_live(tenant, user, value, now):
                self.forget(tenant, record.owner, record.id)
                refusals.append("stale_memory")
                continue
            return _hit(
                "masked",
                record,
                key=str(value.get("key") or ""),
                similarity=similarity,
                sql=sql,
                intent=intent,
                bound_slots=slots,
                refusals=refusals,
            )
        return CacheOutcome(False, "no_candidate" if not refusals else "refused", refusals=refusals)

    def _bind(
        self, value: dict[str, Any], question: str, masked: Any, tenant: str
    ) -> tuple[str, dict[str, Any] | None, list[dict[str, Any]]] | str:
        """The cached SQL with the new question's slot values bound in, or the reason it cannot be."""
        from memtool.cache.binding import BindError, bind_sql
        from memtool.semantic.masking import rebind_intent

        old_slots = value.get("slots") or []
        new_slots = [slot_json(s) for s in masked.slots]
        intent = value.get("intent")
        bound_intent = None
        if isinstance(intent, dict):
            rules = self._rules(tenant)
            bound_intent = rebind_intent(intent, str(value.get("question") or ""), question, rules.parser, self._today(), same_shape=False)
            if bound_intent is None:
                return "unbound_slot"
        try:
            sql = bind_sql(str(value.get("sql") or ""), old_slots, new_slots, old_intent=intent, new_intent=bound_intent)
        except BindError as exc:
            return exc.reason
        if bound_intent is not None:
            # Both derivations must agree: the literals bound into the cached SQL, and the compiled
            # intent with the new values bound in (the lessons in force applied to both).
            from memtool.cache.binding import same_sql

            expected = self._compile_like_entry(value, bound_intent, tenant)
            if expected is None or not same_sql(sql, expected):
                return "bind_mismatch"
        pairs = [{"slot": o.get("name"), "from": o.get("text"), "to": n.get("text")} for o, n in zip(old_slots, new_slots, strict=True)]
        return sql, None if bound_intent is None else bound_intent.model_dump(mode="json"), pairs

    def _compile_like_entry(self, value: dict[str, Any], intent: Any, tenant: str) -> str | None:
        """The SQL the entry's planner would give for ``intent``: compiled, the entry's lessons applied."""
        from memtool.diagnosis.apply import options_from, rewrite
        from memtool.diagnosis.model import Repair

        repairs = []
        for lesson in value.get("lessons") or []:
            for raw in lesson.get("repairs") or []:
                try:
                    repairs.append(Repair.model_validate(raw))
                except ValueError:
                    return None
        compiler = self._rules(tenant).compiler.with_options(options_from([r for r in repairs if not r.sql_level]))
        try:
            sql = compiler.compile(intent).sql
        except Exception:  # noqa: BLE001 - an intent the compiler refuses has no SQL to compare
            return None
        return rewrite(sql, [r for r in repairs if r.sql_level])

    # ---- store ----------------------------------------------------------------------------

    def store(
        self,
        tenant: str,
        user: str,
        question: str,
        route: str,
        *,
        planned_intent: Any,
        sql: str,
        lessons: Sequence[dict[str, Any]],
        used: Sequence[tuple[str, int, str]] = (),
        notes: Sequence[str] = (),
        profile_unit: str | None,
        conditions: dict[str, Any] | None,
        planner: str,
        episode_id: str,
    ) -> MemoryRecord | None:
        """Keep the SQL of an answered question; returns the entry, or None when not cacheable."""
        from memtool.semantic.masking import mask_question

        if not self._settings.cache_enabled or route not in CACHED_ROUTES or not sql:
            return None
        rules = self._rules(tenant)
        now = self._clock.now()
        shaping = self.shaping(tenant, user, question, profile_unit=profile_unit, conditions=conditions or {}, now=now)
        parsed = rules.parser.recognise(question, today=self._today(), corrections=shaping.corrections)
        if parsed.lasting or parsed.this_time:
            return None  # a preference stated with the question: never replayed from the cache
        masked = mask_question(parsed)
        catalog = rules.parser.catalog
        if planned_intent is not None:
            key = self.entry_key(tenant, user, planned_intent, shaping)
        else:
            key = hashlib.sha256(json.dumps([tenant, masked.key, sql, shaping.as_key()], ensure_ascii=False).encode()).hexdigest()[:40]
        from memtool.memory.pii import redact

        value = {
            "key": key,
            "route": route,
            "question": redact(question).text,  # entries are shared in the tenant: no PII kept
            "masked": redact(masked.key).text,
            "signature": [list(s) for s in masked.signature],
            "slots": [slot_json(s) for s in masked.slots],
            "terms": recognised_terms(parsed),
            "intent": None if planned_intent is None else planned_intent.model_dump(mode="json"),
            "sql": sql,
            "lessons": list(lessons),
            "used": [list(u) for u in used],  # the memories that shaped it: a hit credits them (and needs them live)
            "notes": [str(n) for n in notes][:20],
            "shaping": shaping.as_key(),
            "model_version": catalog.model_version,
            "planner": planner,
        }
        scoped = shaping.user_scoped(user)
        where = Partition(tenant, user if scoped else TENANT_OWNER)
        draft = MemoryDraft(
            kind=MemoryKind.CACHE,
            key=CACHE_KEY_PREFIX + key,
            content=value["masked"],
            source_text=None,
            value=value,
            scope=MemoryScope.USER if scoped else MemoryScope.TENANT,
            # A shared entry names no one: who asked what stays in the asker's own episode.
            provenance=Provenance(trigger=Trigger.INTERACTION, author=user if scoped else None, episode_id=episode_id if scoped else None),
            ttl_seconds=int(self._settings.cache_ttl_seconds),
        )
        record = self._store.create(where, draft, now).record
        self.stats.count("stored")
        return record

    def _still_live(self, tenant: str, user: str, value: dict[str, Any], now: datetime) -> bool:
        """Every memory that shaped the entry (a few-shot it was planned from, a correction, the
        profile) is still there, live, at the version it had: otherwise the SQL is stale."""
        used = _used(value)
        if not used:
            return True
        refs = [(owner, memory_id) for memory_id, _, _ in used for owner in (user, TENANT_OWNER)]
        found = self._store.get_many(tenant, refs)
        for memory_id, version, _ in used:
            record = found.get(memory_id)
            if record is None or record.version != version or record.is_expired(now):
                return False
            if record.status not in (MemoryStatus.ACTIVE, MemoryStatus.APPROVED):
                return False
        return True

    def forget(self, tenant: str, owner: str, memory_id: str) -> None:
        """An entry whose SQL failed is never served again."""
        try:
            self._store.forget(Partition(tenant, owner), memory_id)
        except Exception:  # it expires anyway
            logger.warning("cache entry %s could not be forgotten", memory_id, exc_info=True)

    # ---- what shapes a question -----------------------------------------------------------

    def shaping(
        self, tenant: str, user: str, question: str, *, profile_unit: str | None, conditions: dict[str, Any], now: datetime
    ) -> Shaping:
        from memtool.diagnosis.lessons import LessonBook
        from memtool.planning.context import normalize_unit, term_mapping_from_memory
        from memtool.retrieval.scoring import QuestionTerms, correction_term

        asked = QuestionTerms.of(question)
        memories: list[tuple[str, int, str, str]] = []
        chosen: dict[str, tuple[tuple[int, str, float], Any]] = {}
        for owner in (user, TENANT_OWNER):
            page = self._store.list(
                Partition(tenant, owner), now, kind=MemoryKind.CORRECTION, status=MemoryStatus.ACTIVE, limit=_LIST_LIMIT
            )
            for record in page.items:
                term = correction_term(record)
                if term is None or not asked.has_phrase(term):
                    continue
                memories.append((record.id, record.version, record.owner, MemoryKind.CORRECTION.value))
                mapping = term_mapping_from_memory(record.model_dump(mode="json"))
                if mapping is not None:
                    rank = (int(owner == user), record.updated_at.isoformat(), record.confidence)
                    if mapping.term.lower() not in chosen or rank > chosen[mapping.term.lower()][0]:
                        chosen[mapping.term.lower()] = (rank, mapping)
        lessons = LessonBook(self._store).active(tenant, user, now)
        memories += [(lesson.memory_id, lesson.version, lesson.owner, MemoryKind.CAUSAL.value) for lesson in lessons]
        condition_unit = normalize_unit(conditions.get("unit"))
        unit = condition_unit or normalize_unit(profile_unit)
        return Shaping(
            memories=tuple(sorted(memories)),
            unit=unit,
            unit_from_profile=condition_unit is None and unit is not None,
            corrections=tuple(mapping for _, mapping in chosen.values()),
            lessons=tuple(lessons),
        )


@dataclass(frozen=True)
class _MaskedProbe:
    """What a masked candidate must match to be bound: the question's route, similarity threshold,
    semantic-model version, slot signature, recognised terms and shaping memories."""

    user: str
    route: str
    threshold: float
    model_version: str
    signature: list[tuple[Any, ...]]
    terms: list[str]
    shaping: Shaping

    def refusal(self, record: MemoryRecord, value: dict[str, Any], similarity: float) -> str | None:
        """Why the entry is not this question's candidate (the first check it fails), or None."""
        if similarity < self.threshold:
            return "below_threshold"
        if value.get("route") != self.route:
            return "other_route"
        if value.get("model_version") != self.model_version:
            return "model_version"
        if [tuple(s) for s in value.get("signature") or []] != self.signature:
            return "slot_set"
        if sorted(value.get("terms") or []) != self.terms:
            return "terms"
        if value.get("shaping") != self.shaping.as_key() or (record.owner == TENANT_OWNER and self.shaping.user_scoped(self.user)):
            return "shaping"
        return None


def _nearest_entries(index: Any, tenant: str, owners: tuple[str, str], embedder_id: str, vector: Any) -> Any:
    """The cache entries nearest the masked question's vector (raises IndexUnavailable)."""
    from memtool.retrieval.index import IndexFilter, IndexQuery

    return index.knn(
        IndexQuery(
            filter=IndexFilter(
                tenant=tenant,
                owners=owners,
                embedder=embedder_id,
                kinds=(MemoryKind.CACHE.value,),
                statuses=(MemoryStatus.ACTIVE.value,),
            ),
            k=CANDIDATES,
            vector=vector,
        )
    )


def _hit(
    how: str, record: MemoryRecord, *, key: str, similarity: float, sql: str, intent: dict[str, Any] | None, **more: Any
) -> CacheOutcome:
    value = record.value if isinstance(record.value, dict) else {}
    return CacheOutcome(
        True,
        how,
        key=key,
        similarity=similarity,
        sql=sql,
        intent=intent,
        entry_id=record.id,
        entry_version=record.version,
        entry_owner=record.owner,
        lessons=list(value.get("lessons") or []),
        memories=_used(value),
        notes=[str(n) for n in value.get("notes") or []],
        **more,
    )


def _used(value: dict[str, Any]) -> list[tuple[str, int, str]]:
    out = []
    for item in value.get("used") or []:
        if isinstance(item, list) and len(item) == 3:
            out.append((str(item[0]), int(item[1]), str(item[2])))
    return out


def slot_json(slot: Any) -> dict[str, Any]:
    value = slot.value
    if hasattr(value, "start") and hasattr(value, "end"):
        value = {"start": value.start.isoformat(), "end": value.end.isoformat(), "label": getattr(value, "label", "")}
    return {"kind": slot.kind, "name": slot.name, "text": slot.text, "value": value, "negated": slot.negated}


def recognised_terms(parsed: Any) -> list[str]:
    """Every recognised term a hit must share: metrics, groupings, grain, comparison, order,
    exclusions, unknown words. Slot values (entities, windows, numbers, units) are not terms."""
    terms = [f"metric:{m}" for m in parsed.metrics]
    terms += [f"ambiguous:{t}" for t, _ in parsed.ambiguous]
    terms += [f"dimension:{d}" for d in parsed.group_dims]
    terms += [f"exclude:{d}" for d in parsed.exclusions]
    terms += [f"unknown:{t}" for t in parsed.unknown_terms]
    terms += [f"unsupported:{t}" for t in parsed.unsupported]
    if parsed.grain:
        terms.append(f"grain:{parsed.grain}")
    if parsed.trend:
        terms.append("trend")
    if parsed.comparison:
        terms.append(f"comparison:{parsed.comparison}")
    if parsed.order:
        terms.append(f"order:{parsed.order}")
    if parsed.share:
        terms.append("share")
    if parsed.superlative:
        terms.append("superlative")
    return sorted(set(terms))

