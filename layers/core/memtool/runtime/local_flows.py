"""Runs the real ASL locally on moto's Step Functions engine.

Lambda tasks in the state machines are dispatched in-process to the real handlers (there is no
Docker here to run Lambda containers), through the one seam moto's engine offers: the client it
builds for ``lambda:invoke``. A handler's exception becomes a Lambda function error, so Retry and
Catch in the ASL behave as in AWS.
"""

from __future__ import annotations

import io
import json
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtool.flows.runner import FlowExecution
from memtool.runtime.lambda_context import LocalLambdaContext, discard_unpublished_metrics
from memtool.runtime.moto_server import heap_trimmer

ACCOUNT = "123456789012"
REGION = "us-east-1"

_install_lock = threading.Lock()
_handlers: dict[str, Any] = {}
_original_client_for: Any = None


def function_arn(logical_id: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{logical_id}"


class InProcessLambda:
    """The subset of a boto3 Lambda client that moto's engine calls: ``invoke``."""

    def invoke(self, FunctionName: str, Payload: Any = None, **_: Any) -> dict[str, Any]:  # boto3 names
        name = FunctionName.rsplit(":function:", 1)[-1].split(":", 1)[0]
        handler = _handlers.get(name)
        if handler is None:
            raise KeyError(f"no local handler for Lambda function {FunctionName}")
        event = json.loads(Payload) if isinstance(Payload, (str, bytes)) else (Payload or {})
        try:
            result = handler(event, LocalLambdaContext(function_name=name))
        except Exception as exc:  # noqa: BLE001 - Lambda reports an unhandled error as a function error
            body = {
                "errorType": type(exc).__name__,
                "errorMessage": str(exc),
                "stackTrace": traceback.format_exception_only(type(exc), exc),
            }
            return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _stream(body)}
        finally:
            discard_unpublished_metrics()
        return {"StatusCode": 200, "ExecutedVersion": "$LATEST", "Payload": _stream(result)}


def _stream(payload: Any) -> io.BytesIO:
    return io.BytesIO(json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8"))


def install_in_process_lambdas(handlers: dict[str, Any]) -> None:
    """Route moto's Lambda task invocations for these function names to these handlers."""
    global _original_client_for
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    with _install_lock:
        _handlers.update(handlers)
        if _original_client_for is None:
            _original_client_for = lambda_eval_utils.boto_client_for

            def client_for(*args: Any, **kwargs: Any) -> Any:
                if kwargs.get("service") == "lambda":
                    return InProcessLambda()
                return _original_client_for(*args, **kwargs)

            lambda_eval_utils.boto_client_for = client_for


def enable_execution_in_moto() -> None:
    """Make moto's Step Functions backend execute definitions (in this process), and fast."""
    from moto.core.config import default_user_config

    default_user_config["stepfunctions"] = {"execute_state_machine": True}
    _cache_json_path_parsing()
    _cache_definition_parsing()
    _forget_finished_threads()


# Finished threads moto's thread list may hold before it is pruned (about 2.5 KB each, and an ask
# starts about eleven): 256 is some 25 asks' worth, under a megabyte, and pruning (a scan of the
# list) then runs once per 25 asks or so, not on every thread start.
THREAD_LIST_SLACK = 256


class _LiveThreads(list[Any]):  # moto's own list of Thread objects
    """moto's Step Functions engine (ported from LocalStack) appends every thread it starts (one
    per execution, per state, per Map iteration and Parallel branch) to a module-level
    ``TMP_THREADS`` list, for LocalStack's shutdown to join, and moto never empties it: the
    finished threads, with their events, locks and closures, were the largest part of the local
    runtime's growth under load (about 11 threads, some 25 KB, per ask). Appending here drops
    the finished ones whenever the list is longer than ``THREAD_LIST_SLACK``, so it holds at most
    the live threads plus that slack. Nothing in moto reads the list."""

    def append(self, thread: Any) -> None:
        super().append(thread)
        if len(self) > THREAD_LIST_SLACK:
            # moto appends a thread before starting it, so the newest stays whatever it says. A
            # racing append may be lost to the slice assignment: it costs only a thread that
            # nothing would ever have joined.
            self[:] = [t for t in self[:-1] if t.is_alive()] + [thread]


def _forget_finished_threads() -> None:
    """Put ``_LiveThreads`` in place of moto's ``TMP_THREADS`` in every module that imported it."""
    import sys

    from moto.stepfunctions.parser import utils

    original = utils.TMP_THREADS
    if isinstance(original, _LiveThreads):
        return
    bounded = _LiveThreads(t for t in original if t.is_alive())
    utils.TMP_THREADS = bounded  # modules imported from now on bind to it
    for name, module in list(sys.modules.items()):
        if name.startswith("moto.stepfunctions") and getattr(module, "TMP_THREADS", None) is original:
            module.TMP_THREADS = bounded  # type: ignore[attr-defined]


def _cache_definition_parsing() -> None:
    """moto parses a definition's whole ASL (an ANTLR grammar) when the machine is created and
    again at every execution: some 300 ms for AskFlow, about as long as the rest of an ask's flow
    overhead. The program it builds holds no execution state: that lives in the execution's
    Environment (its heap, stack and context) and, for Map and Parallel states, in the job pool,
    worker threads and branch pool each evaluation creates afresh; the iterations of one Map
    already share its states, concurrently, in moto itself. So each definition is parsed once and
    its program shared by every execution of it."""
    from functools import lru_cache

    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    if getattr(AmazonStateLanguageParser.parse, "memtool_cached", False):
        return
    cached = lru_cache(maxsize=16)(AmazonStateLanguageParser.parse)

    def parse(definition: str) -> Any:
        return cached(definition)

    # a monkeypatch of moto, marked so that a second call leaves it alone: neither an attribute on a
    # function nor an assigned method is something mypy types
    parse.memtool_cached = True  # type: ignore[attr-defined]
    AmazonStateLanguageParser.parse = staticmethod(parse)  # type: ignore[method-assign]


def _cache_json_path_parsing() -> None:
    """moto's engine parses every InputPath/ResultPath/Parameters path at every state of every
    execution, and jsonpath_ng builds a new LR parser (its yacc tables) for each parse: most of
    an ask's CPU went there. Parsed paths are immutable; parse each distinct one once."""
    from functools import lru_cache

    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    for module in (json_path, result_path):
        # through the module's namespace: result_path imports jsonpath_ng's parse without re-exporting it
        namespace = vars(module)
        if not hasattr(namespace["parse"], "cache_info"):
            namespace["parse"] = lru_cache(maxsize=1024)(namespace["parse"])


def render_definition(template: dict[str, Any], root: Path, machine: str) -> tuple[str, str]:
    """The state machine's ASL with its DefinitionSubstitutions applied; returns (type, definition)."""
    props = template["Resources"][machine]["Properties"]
    definition = (root / props["DefinitionUri"]).read_text(encoding="utf-8")
    for name, value in (props.get("DefinitionSubstitutions") or {}).items():
        resolved = function_arn(value["Fn::GetAtt"][0]) if isinstance(value, dict) and "Fn::GetAtt" in value else str(value)
        definition = definition.replace("${" + name + "}", resolved)
    return props.get("Type", "STANDARD"), definition


def scale_timeouts(definition: str, scale: float) -> str:
    """The definition with every TimeoutSeconds (the flow's and each state's) multiplied by ``scale``."""

    def scaled(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key: max(1, round(value * scale)) if key == "TimeoutSeconds" and isinstance(value, int) else scaled(value)
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [scaled(item) for item in node]
        return node

    return json.dumps(scaled(json.loads(definition)), ensure_ascii=False)


class _ExecutionLog(list):
    """moto deep-copies a state machine, executions and their locks included, at every start;
    past executions are of no use to the copy, so it gets an empty log. moto appends each new
    execution here before it starts the execution's thread, which is where the runner learns
    to be woken when the execution ends instead of polling for it."""

    def __deepcopy__(self, memo: dict[int, Any]) -> _ExecutionLog:
        return _ExecutionLog()

    def append(self, execution: Any) -> None:
        _signal_when_ended(execution)
        super().append(execution)


# The attribute on a moto Execution that holds the threading.Event set when its thread ends.
_ENDED = "memtool_ended"


def _signal_when_ended(execution: Any) -> None:
    """Give the execution an Event its worker thread sets on the way out, after moto has recorded
    the status and the output (ExecutionWorker._execution_logic calls terminated() last), and
    also when the ASL program raises out of the thread."""
    ended = threading.Event()
    setattr(execution, _ENDED, ended)
    make_worker = execution._get_start_execution_worker

    def worker_that_signals() -> Any:
        worker = make_worker()
        logic = worker._execution_logic

        def logic_then_signal() -> None:
            try:
                logic()
            finally:
                ended.set()

        worker._execution_logic = logic_then_signal  # read by Thread(target=...) in start()
        return worker

    execution._get_start_execution_worker = worker_that_signals


def _ended_event(execution_arn: str) -> threading.Event | None:
    from moto.stepfunctions.responses import get_backend

    return getattr(get_backend(ACCOUNT, REGION).describe_execution(execution_arn), _ENDED, None)


def _running(execution_arn: str) -> bool:
    from moto.stepfunctions.responses import get_backend

    return get_backend(ACCOUNT, REGION).describe_execution(execution_arn).status == "RUNNING"


# How long a SUCCEEDED execution may still be without its output (moto sets the status first).
OUTPUT_SETTLE_SECONDS = 5.0


def _succeeded_without_output(execution_arn: str) -> bool:
    from moto.stepfunctions.responses import get_backend

    execution = get_backend(ACCOUNT, REGION).describe_execution(execution_arn)
    return execution.status == "SUCCEEDED" and getattr(execution, "output", None) is None


def _forget_execution(machine_arn: str, execution_arn: str) -> None:
    """Drop a finished execution from moto's backend: it keeps every one (and scans them all on
    each describe), which made memory and latency grow with every ask."""
    from moto.stepfunctions.responses import get_backend

    machine = get_backend(ACCOUNT, REGION).describe_state_machine(machine_arn)
    for execution in list(machine.executions):
        if execution.execution_arn == execution_arn:
            try:
                machine.executions.remove(execution)  # list.remove is atomic; moto appends concurrently
            except ValueError:
                pass
            return


def _make_restartable(arn: str) -> None:
    from moto.stepfunctions.responses import get_backend

    machine = get_backend(ACCOUNT, REGION).describe_state_machine(arn)
    machine.executions = _ExecutionLog(machine.executions)


@dataclass
class LocalFlowRunner:
    """Creates the template's state machines on moto and runs executions to completion."""

    sfn: Any  # a boto3 stepfunctions client pointed at moto
    template: dict[str, Any]
    root: Path
    # Only for an execution without the end hook (see _wait_until_ended); polling faster only
    # competes with the engine's thread for the GIL.
    poll_seconds: float = 0.02
    # In AWS each step runs in its own Lambda; here every step of every flow shares this process's
    # CPU, so the ASL's TimeoutSeconds (AWS's budgets under API Gateway's 29 s) are multiplied by
    # this (MEMTOOL_LOCAL_FLOW_TIMEOUT_SCALE; 1 runs the AWS numbers).
    timeout_scale: float = 1.0
    _arns: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def arn(self, machine: str) -> str:
        with self._lock:
            if machine not in self._arns:
                sm_type, definition = render_definition(self.template, self.root, machine)
                if self.timeout_scale != 1:
                    definition = scale_timeouts(definition, self.timeout_scale)
                self._arns[machine] = self.sfn.create_state_machine(
                    name=f"{machine}-{uuid.uuid4().hex[:8]}",
                    definition=definition,
                    roleArn=f"arn:aws:iam::{ACCOUNT}:role/{machine}Role",
                    type=sm_type,
                )["stateMachineArn"]
                _make_restartable(self._arns[machine])
            return self._arns[machine]

    def run(self, machine: str, execution_input: dict[str, Any], *, timeout_seconds: float = 120) -> FlowExecution:
        started = time.perf_counter()
        machine_arn = self.arn(machine)
        execution_arn = self.sfn.start_execution(
            stateMachineArn=machine_arn,
            name=f"{execution_input.get('episode_id') or 'run'}-{uuid.uuid4().hex[:6]}",
            input=json.dumps(execution_input, ensure_ascii=False),
        )["executionArn"]
        if not self._wait_until_ended(execution_arn, timeout_seconds):
            self.sfn.stop_execution(executionArn=execution_arn, error="memtool.Timeout")
            _forget_execution(machine_arn, execution_arn)
            return FlowExecution("TIMED_OUT", None, "States.Timeout", "the local flow ran too long")
        # moto marks an execution SUCCEEDED a moment before it sets its output
        # (stepfunctions/parser/backend/execution.py): read the answer once it is there.
        settled = time.monotonic() + OUTPUT_SETTLE_SECONDS
        while _succeeded_without_output(execution_arn) and time.monotonic() < settled:
            time.sleep(self.poll_seconds)
        described = self.sfn.describe_execution(executionArn=execution_arn)
        _forget_execution(machine_arn, execution_arn)
        heap_trimmer.after_flow()
        output = json.loads(described["output"]) if described.get("output") else None
        return FlowExecution(
            described["status"],
            output,
            described.get("error"),
            described.get("cause"),
            (time.perf_counter() - started) * 1000,
        )

    def _wait_until_ended(self, execution_arn: str, timeout_seconds: float) -> bool:
        """Wait on the engine itself (same process): woken by the execution's thread as it ends,
        or, for an execution started before the hook was in place, by polling its record (polling
        DescribeExecution over HTTP cost more CPU than the steps themselves). The answer is then
        read once through the API, as a Step Functions client would. False on timeout."""
        ended = _ended_event(execution_arn)
        if ended is not None:
            return ended.wait(timeout_seconds) or not _running(execution_arn)
        deadline = time.monotonic() + timeout_seconds
        while _running(execution_arn):
            if time.monotonic() > deadline:
                return False
            time.sleep(self.poll_seconds)
        return True


def local_flow_runner(sfn: Any, *, timeout_scale: float = 1.0) -> LocalFlowRunner:
    """The local runtime's flows: moto's engine set to run them, the template's functions installed
    as in-process Lambdas (each a fleet of warm handler copies), the state machines from the template."""
    from memtool.runtime.handlers import function_fleet
    from memtool.runtime.template import load_template, project_root

    root = project_root()
    enable_execution_in_moto()
    install_in_process_lambdas(
        {
            "FlowStepsFunction": function_fleet(root, "flow_steps"),
            "AnalyzeFunction": function_fleet(root, "analyze"),
            "MlToolsFunction": function_fleet(root, "ml_tools"),
            "MaintenanceFunction": function_fleet(root, "maintenance"),
        }
    )
    return LocalFlowRunner(sfn, load_template(root / "template.yaml"), root, timeout_scale=timeout_scale)
