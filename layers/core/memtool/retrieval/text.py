"""Tokens for lexical search and hashing embeddings, in Chinese and English without a segmenter.

Latin text splits into lower-cased words; CJK runs become character unigrams and bigrams, so
"净收入" matches "净收入" and "收入" alike.
"""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

# Very common English words carry no signal for recall.
STOPWORDS = frozenset(
    "a an and are as at be by for from how in is it of on or the to what which with was were by my me i".split()
)


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def terms(text: str) -> list[str]:
    """Lexical terms: English words (dotted keys kept whole) and CJK unigrams + bigrams."""
    out: list[str] = []
    for match in _WORD.finditer(normalize(text)):
        token = match.group(0)
        if _CJK.match(token):
            out.extend(token)
            out.extend(token[i : i + 2] for i in range(len(token) - 1))
        elif token not in STOPWORDS:
            out.append(token)
            if "." in token:
                out.extend(part for part in token.split(".") if part not in STOPWORDS)
    return out


def features(text: str) -> list[str]:
    """Hashing-embedder features: lexical terms, CJK trigrams, and boundary-marked character
    trigrams of English words (so 'revenue' and 'revenues' share most features)."""
    out = [f"t:{term}" for term in terms(text)]
    for match in _WORD.finditer(normalize(text)):
        token = match.group(0)
        if _CJK.match(token):
            out.extend(f"c:{token[i : i + 3]}" for i in range(len(token) - 2))
        elif len(token) > 3 and token not in STOPWORDS:
            marked = f"<{token}>"
            out.extend(f"g:{marked[i : i + 3]}" for i in range(len(marked) - 2))
    return out
