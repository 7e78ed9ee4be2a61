"""The timeout chain of a deployment, for `memtool aws check` (:mod:`memtool.deploy.check`).

Every API-facing function stays under API Gateway's 29 s; a function that runs a state machine
synchronously waits connect + read + a margin, its client's read timeout is longer than the
flow's ``TimeoutSeconds``, which is longer than every Task's, and no Task's Lambda outlives its
Task. The numbers come from the resolved template (function Timeouts), each state machine's ASL
file (TimeoutSeconds) and the settings (the sync flow client's timeouts).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

API_GATEWAY_TIMEOUT_SECONDS = 29  # the REST API integration timeout's fixed maximum
CLIENT_MARGIN_SECONDS = 1.0  # what a caller keeps beyond connect + read to answer in time
ASL_DEFAULT_TIMEOUT_SECONDS = 99_999_999  # a Task or flow without TimeoutSeconds
# The settings (memtool.settings.Settings) that hold the sync flow client's timeouts.
CONNECT_SETTING = "ask_flow_connect_timeout_seconds"
READ_SETTING = "ask_flow_read_timeout_seconds"
# The environment variable that makes a function a synchronous caller of a state machine.
SYNC_FLOW_VARIABLE = "MEMTOOL_ASK_STATE_MACHINE_ARN"


@dataclass(frozen=True)
class TaskTimeout:
    state: str
    timeout: int | None  # the Task's TimeoutSeconds (None: not set, the ASL default)
    function: str | None  # the Lambda it invokes
    function_timeout: int | None


@dataclass(frozen=True)
class FlowTimeouts:
    state_machine: str
    timeout: int | None  # the flow's TimeoutSeconds
    tasks: tuple[TaskTimeout, ...]
    caller: str | None = None  # the function that runs it synchronously (StartSyncExecution)
    caller_timeout: int | None = None


@dataclass(frozen=True)
class TimeoutChain:
    api_functions: dict[str, int]  # API-facing function -> its Timeout
    flows: tuple[FlowTimeouts, ...]
    connect_seconds: float  # the sync flow client's connect timeout
    read_seconds: float  # and read timeout
    margin_seconds: float = CLIENT_MARGIN_SECONDS

    def flow(self, state_machine: str) -> FlowTimeouts:
        (found,) = [f for f in self.flows if f.state_machine == state_machine]
        return found


def timeout_chain_problems(chain: TimeoutChain) -> list[str]:
    problems = []
    for name, timeout in sorted(chain.api_functions.items()):
        if timeout >= API_GATEWAY_TIMEOUT_SECONDS:
            problems.append(f"{name}: Timeout {timeout} s is not under API Gateway's {API_GATEWAY_TIMEOUT_SECONDS} s")
    for flow in chain.flows:
        for task in flow.tasks:
            task_timeout = task.timeout if task.timeout is not None else ASL_DEFAULT_TIMEOUT_SECONDS
            if task.function_timeout is not None and task.function_timeout > task_timeout:
                problems.append(
                    f"{flow.state_machine}.{task.state}: {task.function}'s Timeout {task.function_timeout} s outlives "
                    f"the Task's TimeoutSeconds {task.timeout}"
                )
        if flow.caller is None:
            continue
        # A synchronous flow: every bound must be explicit and nested.
        waited = chain.connect_seconds + chain.read_seconds + chain.margin_seconds
        if flow.caller_timeout is None or flow.caller_timeout < waited:
            problems.append(
                f"{flow.caller}: Timeout {flow.caller_timeout} s is under connect {chain.connect_seconds:g} + read "
                f"{chain.read_seconds:g} + margin {chain.margin_seconds:g} s = {waited:g} s: it dies before its flow answers"
            )
        if flow.timeout is None:
            problems.append(f"{flow.state_machine}: no TimeoutSeconds (a synchronous flow must stop before its caller)")
        elif not chain.read_seconds > flow.timeout:
            problems.append(
                f"{flow.caller}'s read timeout {chain.read_seconds:g} s is not longer than {flow.state_machine}'s "
                f"TimeoutSeconds {flow.timeout}: a slow flow is abandoned while it still runs"
            )
        for task in flow.tasks:
            if task.timeout is None:
                problems.append(f"{flow.state_machine}.{task.state}: no TimeoutSeconds")
            elif flow.timeout is not None and not flow.timeout > task.timeout:
                problems.append(
                    f"{flow.state_machine}.{task.state}: TimeoutSeconds {task.timeout} is not under the flow's {flow.timeout}"
                )
    return problems


def describe_chain(chain: TimeoutChain) -> list[str]:
    lines = []
    api = ", ".join(f"{n} {t} s" for n, t in sorted(chain.api_functions.items()))
    lines.append(f"API Gateway {API_GATEWAY_TIMEOUT_SECONDS} s > every API-facing function's Timeout ({api})")
    for flow in chain.flows:
        tasks = sorted({(t.timeout, t.function, t.function_timeout) for t in flow.tasks}, key=str)
        steps = "; ".join(
            f"Task {'unset' if timeout is None else f'{timeout} s'} "
            f"{'>=' if function_timeout is None else _holds(timeout, '>=', function_timeout)} {function or '?'} {function_timeout} s"
            for timeout, function, function_timeout in tasks
        )
        flow_timeout = "unset" if flow.timeout is None else f"{flow.timeout} s"
        if flow.caller is not None:
            waited = chain.connect_seconds + chain.read_seconds + chain.margin_seconds
            lines.append(
                f"{flow.caller} {flow.caller_timeout} s {_holds(flow.caller_timeout, '>=', waited)} connect {chain.connect_seconds:g} "
                f"+ read {chain.read_seconds:g} + margin {chain.margin_seconds:g} = {waited:g} s; read {chain.read_seconds:g} s "
                f"{_holds(chain.read_seconds, '>', flow.timeout)} {flow.state_machine} {flow_timeout} > {steps}"
            )
        else:
            lines.append(f"{flow.state_machine} {flow_timeout} (not synchronous): {steps}")
    return lines


def _holds(left: float | None, op: str, right: float | None) -> str:
    """``op`` when ``left op right`` holds, else ``NOT op`` (an unset side never holds)."""
    if left is None or right is None:
        return f"NOT {op}"
    return op if (left > right if op == ">" else left >= right) else f"NOT {op}"


def function_chain(chain: TimeoutChain, function: str) -> list[str]:
    """Where one function sits in the chain: under API Gateway, as a flow's caller, as a flow's step.
    Each comparison is printed as it holds (``NOT >=`` where it is broken)."""
    lines = []
    if function in chain.api_functions:
        api_timeout = chain.api_functions[function]
        relation = _holds(API_GATEWAY_TIMEOUT_SECONDS, ">", api_timeout)
        lines.append(f"API Gateway {API_GATEWAY_TIMEOUT_SECONDS} s {relation} Timeout {api_timeout} s")
    for flow in chain.flows:
        if flow.caller == function:
            waited = chain.connect_seconds + chain.read_seconds + chain.margin_seconds
            flow_timeout = "unset" if flow.timeout is None else f"{flow.timeout} s"
            lines.append(
                f"Timeout {flow.caller_timeout} s {_holds(flow.caller_timeout, '>=', waited)} connect {chain.connect_seconds:g} "
                f"+ read {chain.read_seconds:g} + margin {chain.margin_seconds:g} = {waited:g} s; read {chain.read_seconds:g} s "
                f"{_holds(chain.read_seconds, '>', flow.timeout)} {flow.state_machine} {flow_timeout}"
            )
        steps = sorted({t.timeout for t in flow.tasks if t.function == function}, key=str)
        if steps:
            limits = ", ".join("unset" if s is None else f"{s} s" for s in steps)
            step_timeout = next(t.function_timeout for t in flow.tasks if t.function == function)
            least = None if None in steps else min(s for s in steps if s is not None)
            relation = ">=" if step_timeout is None else _holds(least, ">=", step_timeout)
            lines.append(f"a step of {flow.state_machine}: Task TimeoutSeconds {limits} {relation} Timeout {step_timeout} s")
    return lines or ["not on the API path nor a flow step (an event source's consumer)"]


def _asl_tasks(states: Mapping[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        if state.get("Type") == "Task":
            yield name, state
        for branch in state.get("Branches", []):
            yield from _asl_tasks(branch["States"])
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from _asl_tasks(processor["States"])


def _substitute(substitutions: Mapping[str, Any], match: re.Match[str]) -> str:
    return str(substitutions.get(match.group(1), match.group(0)))


def read_timeout_chain(deployment: Any, source: Mapping[str, Any], template_dir: Path) -> TimeoutChain:
    """The chain's numbers: function Timeouts from the resolved template, TimeoutSeconds from each
    state machine's ASL file, the client's timeouts from the settings (or the function's env)."""
    from memtool.settings import Settings

    functions = deployment.functions()
    timeouts = {name: int(deployment.resources[name]["Properties"].get("Timeout", 3)) for name in functions}
    arn_of = {
        f"arn:{deployment.partition}:lambda:{deployment.region}:{deployment.account}:function:{deployment.physical_name(n)}": n
        for n in functions
    }
    sm_arn_of = {
        f"arn:{deployment.partition}:states:{deployment.region}:{deployment.account}:stateMachine:{deployment.physical_name(n)}": n
        for n in deployment.state_machines()
    }
    callers = {}
    for name in functions:
        target = deployment.environment(name).get(SYNC_FLOW_VARIABLE)
        if target in sm_arn_of:
            callers[sm_arn_of[target]] = name
    defaults = Settings.model_fields
    connect = float(defaults[CONNECT_SETTING].default) if CONNECT_SETTING in defaults else None
    read = float(defaults[READ_SETTING].default) if READ_SETTING in defaults else None
    if connect is None or read is None:
        raise ValueError(f"memtool.settings.Settings has no {CONNECT_SETTING} / {READ_SETTING}: the client timeouts are unknown")
    for caller in callers.values():
        env = deployment.environment(caller)
        connect = float(env.get(f"MEMTOOL_{CONNECT_SETTING.upper()}", connect))
        read = float(env.get(f"MEMTOOL_{READ_SETTING.upper()}", read))

    flows = []
    for machine in deployment.state_machines():
        source_props = source["Resources"][machine]["Properties"]
        definition = json.loads((template_dir / source_props["DefinitionUri"]).read_text(encoding="utf-8"))
        substitutions = deployment.resources[machine]["Properties"].get("DefinitionSubstitutions") or {}
        tasks = []
        for state_name, state in _asl_tasks(definition["States"]):
            arguments = state.get("Parameters") or state.get("Arguments") or {}
            target = str(arguments.get("FunctionName") or arguments.get("FunctionName.$") or state.get("Resource", ""))
            target = re.sub(r"\$\{([A-Za-z0-9_]+)\}", partial(_substitute, substitutions), target)
            function = next((n for arn, n in arn_of.items() if target == arn or target.startswith(arn + ":")), None)
            tasks.append(
                TaskTimeout(state_name, state.get("TimeoutSeconds"), function, timeouts.get(function) if function else None)
            )
        caller = callers.get(machine)
        flows.append(
            FlowTimeouts(machine, definition.get("TimeoutSeconds"), tuple(tasks), caller, timeouts.get(caller) if caller else None)
        )
    api_functions = {name: timeouts[name] for name in functions if api_routes(source, name)}
    return TimeoutChain(api_functions, tuple(flows), connect, read)


def api_routes(source: Mapping[str, Any], function: str) -> list[str]:
    events = (source["Resources"].get(function, {}).get("Properties") or {}).get("Events") or {}
    return [f"{e['Properties']['Method'].upper()} {e['Properties']['Path']}" for e in events.values() if e.get("Type") == "Api"]
