"""A memory's credit after one episode's reward: the pure rule every record store applies.

Feedback on an episode credits each memory the episode applied. A rating may arrive twice
(a retried request) or change (the user re-rates the answer): the credit's ledger of recent
episodes tells the three apart, so a retry counts once and a new rating replaces the old one
instead of counting as a second use. Stores run this inside their compare-and-swap
(``MemoryStore.update_credit``), so it must stay pure: same credit in, same credit out.
"""

from __future__ import annotations

import math
from datetime import datetime

from memtool.errors import ValidationFailed
from memtool.memory.records import CREDIT_RECENT_KEPT, Credit, CreditEntry

SCORE_BOUNDS = (-1.0, 1.0)  # rewards and the feedback score share this range


def credit_after(credit: Credit, *, episode_id: str, reward: float, alpha: float, now: datetime) -> Credit:
    """The credit once ``episode_id``'s ``reward`` (in [-1, 1]) counts, with EMA weight ``alpha``.

    A success is a reward above 0, a failure one below 0; 0 counts as a use and nothing else.
    The same episode with the same reward changes nothing (``credit`` itself comes back). The
    same episode with another reward replaces its rating: uses stay, the old class count moves
    to the new class, and the score moves by ``alpha * (1 - alpha)**k * (new - old)``, where k
    is the number of episodes credited after it: exactly the score the new reward would have
    given in its place (the entry keeps its place in the ledger). An episode the ledger has
    forgotten (older than the newest ``CREDIT_RECENT_KEPT``) counts as a new one.
    """
    _check_reward(reward)
    if not 0 < alpha <= 1:
        raise ValidationFailed("alpha must be in (0, 1]", field="alpha")
    position = next((i for i, entry in enumerate(credit.recent) if entry.episode_id == episode_id), None)
    earlier = credit.recent[position] if position is not None else None
    entry = CreditEntry(episode_id=episode_id, reward=reward, at=now)
    others = [e for e in credit.recent if e.episode_id != episode_id]
    if earlier is None:
        successes, failures = _counted(credit.successes, credit.failures, reward, +1)
        return Credit(
            uses=credit.uses + 1,
            successes=successes,
            failures=failures,
            feedback_score=_clamped((1 - alpha) * credit.feedback_score + alpha * reward),
            recent=[*others, entry][-CREDIT_RECENT_KEPT:],
        )
    if earlier.reward == reward:
        return credit  # a retried rating
    assert position is not None
    successes, failures = _counted(credit.successes, credit.failures, earlier.reward, -1)
    successes, failures = _counted(successes, failures, reward, +1)
    later = len(credit.recent) - position - 1  # EMA steps made since this episode's own
    recent = list(credit.recent)
    recent[position] = entry  # in its place: the ledger stays in the order the episodes first counted
    return Credit(
        uses=credit.uses,
        successes=successes,
        failures=failures,
        feedback_score=_clamped(credit.feedback_score + alpha * (1 - alpha) ** later * (reward - earlier.reward)),
        recent=recent,
    )


def _check_reward(reward: float) -> None:
    low, high = SCORE_BOUNDS
    if not (math.isfinite(reward) and low <= reward <= high):
        raise ValidationFailed(f"reward must be a number in [{low:g}, {high:g}], not {reward!r}", field="reward")


def _counted(successes: int, failures: int, reward: float, step: int) -> tuple[int, int]:
    """Success and failure counts with ``reward``'s class moved by ``step`` (never below 0)."""
    if reward > 0:
        return max(0, successes + step), failures
    if reward < 0:
        return successes, max(0, failures + step)
    return successes, failures


def _clamped(score: float) -> float:
    low, high = SCORE_BOUNDS
    return min(high, max(low, score))
