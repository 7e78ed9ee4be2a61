"""Reward fusion: R = α·R_env + β·R_user (docs/architecture.md, Learning), each part in [-1, 1].

R_env is what the environment said about the episode: its outcome. R_user is what the user said:
an explicit rating, or, when there is none, implicit signals (copied the answer, asked a related
follow-up, rephrased the question, abandoned it, how long they looked at it). A reward above 0
credits a success, below 0 a failure. A thumbs-up on an answered episode is worth 1.0 (a few-shot
candidate's confidence); a thumbs-down on one is worth -β (the environment's "it ran" is
overruled).
"""

from __future__ import annotations

from dataclasses import dataclass

# The environment's verdict per episode outcome.
_ENV_REWARD = {
    "answered": 1.0,
    "answered_empty": -0.5,  # ran, but found nothing: usually the wrong filter or window
    "remembered": 0.5,
    "needs_clarification": 0.0,  # asked instead of guessing: neither right nor wrong
    "partial": 0.0,  # the data came back, an analysis it asked for did not run
    "guard_rejected": -1.0,
    "execution_error": -1.0,
    "failed": -1.0,
}

# Implicit signals and what each says about the answer; summed and clamped to [-1, 1].
SIGNAL_WEIGHTS = {"copied": 0.8, "follow_up_related": 0.4, "rephrased": -0.6, "abandoned": -0.8}
DWELL_SHORT_MS = 2_000  # glanced at and left
DWELL_LONG_MS = 15_000  # read
DWELL_WEIGHT = 0.2


def environment_reward(outcome: str, *, row_count: int | None = None, error: str | None = None) -> float:
    """R_env for an episode: answered with rows 1, empty -0.5, clarification 0, failures -1."""
    if outcome == "answered" and row_count == 0:
        return _ENV_REWARD["answered_empty"]
    if outcome == "failed" and error == "guardrail_blocked":
        return _ENV_REWARD["guard_rejected"]
    if outcome == "failed" and error is not None:
        return _ENV_REWARD["execution_error"]
    return _ENV_REWARD.get(outcome, _ENV_REWARD["failed"])


def signal_reward(signals: dict[str, object]) -> float | None:
    """R_user from implicit signals; None when no signal was given."""
    total, seen = 0.0, False
    for name, weight in SIGNAL_WEIGHTS.items():
        if signals.get(name) is True:
            total += weight
            seen = True
    dwell = signals.get("dwell_ms")
    if isinstance(dwell, int) and not isinstance(dwell, bool):
        seen = True
        if dwell < DWELL_SHORT_MS:
            total -= DWELL_WEIGHT
        elif dwell >= DWELL_LONG_MS:
            total += DWELL_WEIGHT
    return max(-1.0, min(1.0, total)) if seen else None


@dataclass(frozen=True)
class Reward:
    total: float
    env: float
    user: float | None  # None: the user said nothing (counts as 0)
    user_source: str  # "rating", "signals" or "none"
    alpha: float
    beta: float

    def as_dict(self) -> dict[str, object]:
        return {
            "total": round(self.total, 6),
            "env": self.env,
            "user": None if self.user is None else round(self.user, 6),
            "user_source": self.user_source,
            "alpha": self.alpha,
            "beta": self.beta,
        }


def fuse(env: float, *, rating: int | None, signals: dict[str, object], alpha: float, beta: float) -> Reward:
    """R = α·R_env + β·R_user; the rating wins over signals; no user signal counts as 0.

    A thumbs-down on an answer that ran overrides the environment: that the SQL returned rows is
    no evidence that it was right, so R_env counts as 0 and the reward is negative.
    """
    if rating == -1 and env > 0:
        env = 0.0
    user: float | None
    if rating is not None:
        user, source = float(rating), "rating"
    else:
        user = signal_reward(signals)
        source = "signals" if user is not None else "none"
    total = alpha * env + beta * (user or 0.0)
    return Reward(total=max(-1.0, min(1.0, total)), env=env, user=user, user_source=source, alpha=alpha, beta=beta)
