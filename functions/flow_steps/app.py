"""AskFlow's Lambda tasks: {"step": <name>, "state": {...}} in, the next state out."""

from __future__ import annotations

from memtool.observability import instrumented, invocation_keys
from memtool.runtime import container


@instrumented(emit_metrics=False)
def lambda_handler(event: dict, context) -> dict:
    step = event.get("step")
    state = event.get("state") or {}
    invocation_keys(step=step, episode_id=state.get("episode_id"))
    return container.ask_steps().run(str(step), state)
