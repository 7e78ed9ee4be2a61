"""BM25 over a handful of texts: the recall fallback when the index is unavailable."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from memtool.retrieval.text import terms

K1, B = 1.2, 0.75


def bm25_scores(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 of ``query`` against each text, with statistics from ``texts`` themselves."""
    wanted = set(terms(query))
    if not wanted or not texts:
        return [0.0] * len(texts)
    documents = [Counter(terms(text)) for text in texts]
    lengths = [sum(doc.values()) for doc in documents]
    average = (sum(lengths) / len(lengths)) or 1.0
    frequency = {term: sum(1 for doc in documents if term in doc) for term in wanted}
    scores = []
    for doc, length in zip(documents, lengths, strict=True):
        score = 0.0
        for term in wanted:
            tf = doc.get(term, 0)
            if not tf:
                continue
            idf = math.log(1 + (len(documents) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        scores.append(score)
    return scores
