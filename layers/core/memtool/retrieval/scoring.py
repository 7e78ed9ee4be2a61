"""Recall scoring: the relevance floor's key-term rule, then relevance × decay × credit × recency
of use × tool match.

Key-term rule (the lexical half of the relevance floor; the other half is cosine similarity):
a memory *matches the question on a key term* when one of its key terms occurs in the question.
Both sides are compared NFKC-normalised and lower-cased (:func:`memtool.retrieval.text.normalize`).

- A memory's key terms come from its ``key``, its ``content`` and its ``source_text``, tokenised
  like BM25 tokenises them (:func:`memtool.retrieval.text.terms`), plus, for a correction, its
  ``value.term`` taken whole:
  - an English word (letters, digits, ``_``; a dotted key such as ``metric.refund_rate`` counts
    whole and also split at ``.`` and ``_``: ``metric``, ``refund_rate``, ``refund``, ``rate``);
  - a CJK bigram: two adjacent CJK characters of the text (``退款率`` gives ``退款`` and ``款率``).
- A key term has at least 2 characters and is not filler: not an English stop or filler word
  (:data:`FILLER_WORDS`: "the", "show", "please", "data", "words", ...), not all digits, not a CJK
  bigram holding a particle or pronoun (:data:`CJK_PARTICLES`: 的, 了, 吗, 么, 这, 我, ...), and not
  a filler bigram (:data:`FILLER_BIGRAMS`: 多少, 一下, 如何, 查询, 数据, ...).
- It *occurs in the question* when: an English word is one of the question's words (same
  tokenisation and splitting), with one trailing plural ``s`` ignored on both sides (``refunds`` ~
  ``refund``); a CJK bigram is a substring of the question; a correction's ``value.term`` occurs as
  a phrase: a substring of the question that, where the term starts or ends with an ASCII letter
  or digit, is not preceded or followed by another one of ``[a-z0-9_]`` (``GMV`` is found in
  "上月GMV多少" and "gmv by region", not in "gmvx").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memtool.memory.policy import EPISODIC_DECAY_PER_DAY
from memtool.memory.records import MemoryKind, MemoryRecord
from memtool.retrieval.index import RRF_RANK_CONSTANT
from memtool.retrieval.text import STOPWORDS, normalize, terms

BEST_FUSED = 2.0 / (RRF_RANK_CONSTANT + 1)  # first in both lists
DECAY_FLOOR = 0.1
TOOL_MATCH_BOOST = 1.25

# Words every question may hold that say nothing about which memory it needs.
FILLER_WORDS = STOPWORDS | frozenset(
    """
    am been being do does did doing done have has had having can could would should will shall may
    might must not no yes but if then so than too very just also only again more most less much many
    some any all each every other such same own into onto over under about above below between per via
    up down out off this that these those there here their them they we us our you your he she his her
    its show shows give tell list find get let lets please need want like make use used using see look
    why when where who whom whose one ones thing things something anything word words question questions
    answer answers data info information
    """.split()
)
# A CJK bigram holding one of these is grammar, not a topic ("的净", "是多", "我们").
CJK_PARTICLES = frozenset("的了吗呢吧啊么是在和与及或就都也把被这那哪我你他她它们请")
FILLER_BIGRAMS = frozenset(
    """
    多少 一下 如何 怎样 为何 为什 可以 能否 一个 一些 没有 有没 有多 看看 帮忙 查询 查看 查下 显示 告诉
    数据 情况 问题 所有 全部 需要 想要 知道 一样 时候 分析 统计
    """.split()
)
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_ASCII_WORD_CHAR = re.compile(r"[a-z0-9_]")


def _stem(word: str) -> str:
    """One trailing plural 's' off ('refunds' -> 'refund'; 'class' and 'gms' stay)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _is_key_term(term: str) -> bool:
    if len(term) < 2 or term.isdigit():
        return False
    if _CJK.match(term):
        return len(term) == 2 and not (set(term) & CJK_PARTICLES) and term not in FILLER_BIGRAMS
    return term not in FILLER_WORDS


def _split_words(term: str) -> list[str]:
    """A dotted or snake_case English term, whole and in parts."""
    if _CJK.match(term):
        return [term]
    return [term, *(part for part in re.split(r"[._]", term) if part and part != term)]


def _words(text: str) -> set[str]:
    """Key terms of a text: English words (whole and split, stemmed) and CJK bigrams."""
    out: set[str] = set()
    for term in terms(text):
        for word in _split_words(term):
            if _is_key_term(word):
                out.add(word if _CJK.match(word) else _stem(word))
    return out


def correction_term(record: MemoryRecord) -> str | None:
    """A correction's ``value.term``, normalised, when it is a key term (≥ 2 characters, not filler)."""
    if record.kind is not MemoryKind.CORRECTION:
        return None
    value: Any = record.value
    term = value.get("term") if isinstance(value, dict) else None
    if not isinstance(term, str):
        return None
    term = " ".join(normalize(term).split())
    if len(term) < 2 or term in FILLER_WORDS or term in FILLER_BIGRAMS:
        return None
    return term


@dataclass(frozen=True)
class QuestionTerms:
    """A question as the key-term rule sees it (see the module docstring)."""

    text: str  # NFKC, lower-cased, whitespace collapsed
    words: frozenset[str]

    @classmethod
    def of(cls, question: str) -> QuestionTerms:
        return cls(" ".join(normalize(question).split()), frozenset(_words(question)))

    def has_phrase(self, term: str) -> bool:
        """``term`` (already normalised) occurs in the question on word boundaries for ASCII edges."""
        if not term:
            return False
        start = 0
        while (at := self.text.find(term, start)) >= 0:
            before = self.text[at - 1] if at else ""
            after = self.text[at + len(term)] if at + len(term) < len(self.text) else ""
            left_ok = not (_ASCII_WORD_CHAR.match(term[0]) and before and _ASCII_WORD_CHAR.match(before))
            right_ok = not (_ASCII_WORD_CHAR.match(term[-1]) and after and _ASCII_WORD_CHAR.match(after))
            if left_ok and right_ok:
                return True
            start = at + 1
        return False

    def matches_key_term(self, record: MemoryRecord) -> bool:
        term = correction_term(record)
        if term is not None and self.has_phrase(term):
            return True
        texts = (record.key or "", record.content, record.source_text or "")
        return any(not self.words.isdisjoint(_words(text)) for text in texts if text)


@dataclass(frozen=True)
class ScoreParts:
    relevance: float
    decay: float
    credit: float
    recency: float
    tool_match: float

    @property
    def total(self) -> float:
        return self.relevance * self.decay * self.credit * self.recency * self.tool_match


def relevance(
    fused: float | None, cosine: float | None, lexical_share: float | None = None, *, term_match: bool = False
) -> float:
    """Rank agreement from the index blended with similarity where the index gives it; a
    correction whose term the question names is as relevant as a memory can be."""
    if term_match:
        return 1.0
    if fused is not None:
        rank = min(1.0, fused / BEST_FUSED)
    else:
        rank = lexical_share or 0.0
    if cosine is None:
        return rank
    return 0.5 * rank + 0.5 * max(0.0, cosine)


def _days(since: datetime | None, now: datetime) -> float | None:
    return None if since is None else max(0.0, (now - since).total_seconds() / 86400)


def decay(record: MemoryRecord, now: datetime) -> float:
    """Episodic memories lose 0.02 of their weight per day since last used or written, whichever
    is later: maintenance writes the decay into the stored confidence as a new version, so the
    ranking counts only the days since (lifecycle.decay)."""
    if record.kind is not MemoryKind.EPISODIC:
        return 1.0
    used = record.last_used_at
    anchor = record.updated_at if used is None or used < record.updated_at else used
    days = _days(anchor, now) or 0.0
    return max(DECAY_FLOOR, 1.0 - EPISODIC_DECAY_PER_DAY * days)


def credit(record: MemoryRecord) -> float:
    """Success rate with a neutral prior (1.0 with no evidence), nudged by feedback and confidence."""
    c = record.credit
    success_rate = 2.0 * (c.successes + 1) / (c.successes + c.failures + 2)
    feedback = 1.0 + 0.25 * math.tanh(c.feedback_score)
    return max(0.05, min(2.5, success_rate * feedback * max(0.1, record.confidence)))


def recency(record: MemoryRecord, now: datetime) -> float:
    days = _days(record.last_used_at, now)
    return 1.0 if days is None else 1.0 + 0.2 * math.exp(-days / 14)


def score(
    record: MemoryRecord,
    now: datetime,
    *,
    fused: float | None,
    cosine: float | None,
    lexical_share: float | None,
    tool_match: bool,
    term_match: bool = False,
) -> ScoreParts:
    return ScoreParts(
        relevance=relevance(fused, cosine, lexical_share, term_match=term_match),
        decay=decay(record, now),
        credit=credit(record),
        recency=recency(record, now),
        tool_match=TOOL_MATCH_BOOST if tool_match else 1.0,
    )
