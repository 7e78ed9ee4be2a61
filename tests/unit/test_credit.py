"""credit_after: how one episode's reward changes a memory's credit (new, retried, re-rated).

alpha and the rewards are chosen so that every expected score is exact in binary floating point:
the assertions compare exact numbers, computed here by hand, not by the code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memtool.errors import ValidationFailed
from memtool.memory.credit import credit_after
from memtool.memory.records import CREDIT_RECENT_KEPT, Credit, CreditEntry

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
ALPHA = 0.25


def credit(after: Credit, episode_id: str, reward: float, minutes: int = 0) -> Credit:
    return credit_after(after, episode_id=episode_id, reward=reward, alpha=ALPHA, now=T0 + timedelta(minutes=minutes))


def test_a_new_episode_counts_a_use_its_class_and_one_ema_step():
    # Given no credit yet
    # When a success, then a failure, then a neutral reward come in from three episodes
    first = credit(Credit(), "ep-1", 1.0)
    second = credit(first, "ep-2", -1.0, minutes=1)
    third = credit(second, "ep-3", 0.0, minutes=2)

    # Then each counts one use, its class once, and one EMA step: 0.25; 0.75*0.25-0.25; 0.75*that
    assert (first.uses, first.successes, first.failures, first.feedback_score) == (1, 1, 0, 0.25)
    assert (second.uses, second.successes, second.failures, second.feedback_score) == (2, 1, 1, -0.0625)
    assert (third.uses, third.successes, third.failures, third.feedback_score) == (3, 1, 1, -0.046875)
    assert third.recent == [
        CreditEntry(episode_id="ep-1", reward=1.0, at=T0),
        CreditEntry(episode_id="ep-2", reward=-1.0, at=T0 + timedelta(minutes=1)),
        CreditEntry(episode_id="ep-3", reward=0.0, at=T0 + timedelta(minutes=2)),
    ]


def test_the_same_episode_with_the_same_reward_is_a_retry_and_changes_nothing():
    once = credit(Credit(), "ep-1", 0.5)

    again = credit(once, "ep-1", 0.5, minutes=5)

    assert again == once
    assert (again.uses, again.successes, again.feedback_score) == (1, 1, 0.125)
    assert again.recent == [CreditEntry(episode_id="ep-1", reward=0.5, at=T0)]  # not even the time moves


def test_a_new_rating_of_the_same_episode_replaces_the_old_one():
    # Given a success from ep-1 (score 0.25)
    rated = credit(Credit(), "ep-1", 1.0)

    # When the user re-rates ep-1 as a failure
    rerated = credit(rated, "ep-1", -1.0, minutes=3)

    # Then it is still one use, now a failure, and the score is what one failure alone would make
    assert (rerated.uses, rerated.successes, rerated.failures) == (1, 0, 1)
    assert rerated.feedback_score == -0.25  # 0.25 + 0.25 * (-1 - 1)
    assert rerated.feedback_score == credit(Credit(), "ep-9", -1.0).feedback_score
    assert rerated.recent == [CreditEntry(episode_id="ep-1", reward=-1.0, at=T0 + timedelta(minutes=3))]


def test_a_replacement_to_neutral_only_removes_the_old_class():
    rated = credit(credit(Credit(), "ep-1", -0.5), "ep-2", 1.0, minutes=1)  # scores -0.125, then 0.15625

    neutral = credit(rated, "ep-1", 0.0, minutes=2)

    assert (neutral.uses, neutral.successes, neutral.failures) == (2, 1, 0)
    # 0.15625 + 0.25 * 0.75 * (0 - -0.5): ep-2 came after ep-1, so ep-1's step is worth 0.75 of what it was
    assert neutral.feedback_score == 0.25
    assert neutral.feedback_score == credit(credit(Credit(), "ep-1", 0.0), "ep-2", 1.0).feedback_score
    assert [(e.episode_id, e.reward) for e in neutral.recent] == [("ep-1", 0.0), ("ep-2", 1.0)]


def test_the_ledger_keeps_the_newest_episodes_and_a_forgotten_one_counts_again():
    # Given more episodes than the ledger keeps
    current = Credit()
    for n in range(CREDIT_RECENT_KEPT + 2):
        current = credit(current, f"ep-{n}", 1.0, minutes=n)

    # Then only the newest are kept, oldest first
    assert current.uses == CREDIT_RECENT_KEPT + 2
    assert [e.episode_id for e in current.recent] == [f"ep-{n}" for n in range(2, CREDIT_RECENT_KEPT + 2)]

    # And a rating of a forgotten episode counts as a new use; a remembered one does not
    assert credit(current, "ep-0", 1.0).uses == CREDIT_RECENT_KEPT + 3
    assert credit(current, "ep-2", 1.0).uses == CREDIT_RECENT_KEPT + 2


def test_the_score_stays_within_minus_one_and_one():
    # A replacement on a score that other rewards moved since could overshoot; it is clamped
    near_top = Credit(uses=1, successes=0, failures=1, feedback_score=0.9,
                      recent=[CreditEntry(episode_id="ep-1", reward=-1.0, at=T0)])
    assert credit(near_top, "ep-1", 1.0).feedback_score == 1.0  # 0.9 + 0.25 * 2 = 1.4, clamped
    near_bottom = Credit(uses=1, successes=1, failures=0, feedback_score=-0.9,
                         recent=[CreditEntry(episode_id="ep-1", reward=1.0, at=T0)])
    assert credit(near_bottom, "ep-1", -1.0).feedback_score == -1.0


@pytest.mark.parametrize("reward", [1.5, -1.01, float("nan"), float("inf")])
def test_a_reward_outside_minus_one_to_one_is_refused(reward):
    with pytest.raises(ValidationFailed) as refused:
        credit(Credit(), "ep-1", reward)
    assert refused.value.field == "reward"


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5])
def test_an_alpha_outside_zero_to_one_is_refused(alpha):
    with pytest.raises(ValidationFailed) as refused:
        credit_after(Credit(), episode_id="ep-1", reward=1.0, alpha=alpha, now=T0)
    assert refused.value.field == "alpha"


def test_a_partial_answer_is_neither_a_success_nor_a_failure_for_the_environment():
    from memtool.feedback.reward import environment_reward

    assert environment_reward("answered", row_count=12) == 1.0
    assert environment_reward("partial", row_count=12) == 0.0  # the data came back; an analysis did not
    assert environment_reward("failed") == -1.0


def test_a_partial_episode_is_not_a_negative_example_but_a_failed_one_is():
    from datetime import datetime, timezone

    from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, MemoryStatus
    from memtool.retrieval.recall import is_negative_example

    def episode(outcome: str) -> MemoryRecord:
        now = datetime(2026, 11, 29, tzinfo=timezone.utc)
        return MemoryRecord.model_validate(
            {"tenant": "acme", "owner": "li", "id": f"mem_{outcome}", "version": 1, "kind": MemoryKind.EPISODIC.value,
             "content": "q", "value": {"outcome": outcome}, "created_at": now, "updated_at": now,
             "scope": MemoryScope.USER.value, "status": MemoryStatus.ACTIVE.value}
        )

    assert not is_negative_example(episode("answered")) and not is_negative_example(episode("partial"))
    assert is_negative_example(episode("failed"))
