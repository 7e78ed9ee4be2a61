"""AskFlow's Lambda tasks: {"step": <name>, "state": {...}} in, the next state out."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Tracer

from memtool.runtime import container

logger = Logger(service="memtool")
tracer = Tracer(service="memtool")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def lambda_handler(event: dict, context) -> dict:
    step = event.get("step")
    state = event.get("state") or {}
    logger.append_keys(step=step, episode_id=state.get("episode_id"))
    return container.ask_steps().run(str(step), state)
