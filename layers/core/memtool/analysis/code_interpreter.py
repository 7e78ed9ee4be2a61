"""The code interpreter tool: an analysis script run in a sandbox, never in memtool's process.

The script is the Bedrock planner's code when one is given, otherwise the templated script for
the analysis (``memtool.analysis.scripts``). It reads ``data.json`` ({columns, rows, params}) from
its working directory and writes ``result.json`` (the same shape as the matching ML tool's output)
and a ``chart.png``. Nothing generated runs anywhere but in the sandbox.

The sandbox is E2B in AWS and the local process sandbox on a laptop. E2B sits behind a circuit
breaker: when it keeps failing (or its circuit is open) the run falls back to the local process
sandbox, and the result says so in ``notes``.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memtool.analysis.kinds import TaskKind, spoken
from memtool.tools.base import BadArguments, DependencyUnavailable, FailureKind, Tool, ToolContext, ToolFailure
from memtool.tools.breakers import CircuitBreaker

logger = logging.getLogger("memtool.analysis")

MAX_ROWS = 10_000  # the tool's own limit; AskFlow sends only small tables here
MAX_CODE_CHARS = 20_000
MAX_INLINE_FILE_BYTES = 64_000  # a chart travels in the answer up to this size (Step Functions caps a state at 256 KB)


class CodeInterpreterInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    analysis: TaskKind = Field(description=f"which analysis the script performs: {spoken()}")
    columns: list[str] = Field(description="the table's column names, in order", min_length=1, max_length=64)
    rows: list[list[Any]] = Field(description="the table's rows; each row has one value per column", max_length=MAX_ROWS)
    params: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "the analysis's parameters: for example horizon (periods to forecast), focus (the period asked about), "
            "value_column, period_column"
        ),
    )
    return_files: bool = Field(True, description="return the files (charts) the script wrote; false when only the JSON result is needed")
    code: str | None = Field(
        None,
        description=(
            "a Python script to run instead of the templated one; it reads data.json ({columns, rows, params}) "
            "and writes result.json and *.png in its working directory"
        ),
        max_length=MAX_CODE_CHARS,
    )


class SandboxArtifact(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    content_type: str
    size: int
    data_base64: str | None = None  # None when the file was too large to travel in the answer


class CodeInterpreterOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    analysis: str
    result: dict[str, Any]
    files: list[SandboxArtifact] = Field(default_factory=list)
    script: str  # "templated:<kind>" or "generated"
    stdout: str = ""
    isolation: str = ""
    duration_ms: float = 0.0
    notes: list[str] = Field(default_factory=list)


class ResilientSandbox:
    """The configured sandbox behind its breaker, with the local process sandbox as fallback."""

    def __init__(self, primary: Any, *, fallback: Callable[[], Any] | None = None, breaker: CircuitBreaker | None = None) -> None:
        self._primary = primary
        self._fallback = fallback
        self._breaker = breaker

    def run(self, code: str, *, files: dict[str, bytes], timeout_seconds: float, charts: bool = True) -> tuple[Any, list[str]]:
        from memtool.analysis.sandbox.port import SandboxUnavailable

        notes: list[str] = []
        name = getattr(self._primary, "name", "sandbox")
        if self._breaker is not None and not self._breaker.allow():
            notes.append(f"{name} skipped: {self._breaker.open_error()}")
        else:
            try:
                run = self._primary.run(code, files=files, timeout_seconds=timeout_seconds, charts=charts)
            except SandboxUnavailable as exc:
                if self._breaker is not None:
                    self._breaker.record_failure(exc)
                notes.append(f"{name} unavailable ({exc})")
            else:
                if self._breaker is not None:
                    if run.error_kind == "unavailable":
                        self._breaker.record_failure(run.error or "unavailable")
                    else:
                        self._breaker.record_success()
                if run.error_kind != "unavailable":
                    return run, notes
                notes.append(f"{name} unavailable ({run.error})")
        if self._fallback is None:
            raise DependencyUnavailable(f"the code interpreter is unavailable: {'; '.join(notes)}")
        notes[-1] += "; ran in the local process sandbox instead"
        return self._fallback().run(code, files=files, timeout_seconds=timeout_seconds, charts=charts), notes


class AnalysisFailed(ToolFailure):
    """The script ran and failed (an error, a limit); the message is the sandbox's, safe to show."""

    kind: FailureKind = "internal"


_RETRY_KINDS = {"timeout", "cpu_limit"}


def _generated_problem(analysis: str, run: Any) -> str | None:
    """Why a generated script's run cannot be used, or None: it must succeed and write the
    analysis's result shape (the summary and the chart read that shape)."""
    from pydantic import ValidationError

    from memtool.analysis.ml.models import RESULT_MODELS

    if not run.ok:
        return f"{run.error_kind}: {run.error}"
    model = RESULT_MODELS.get(analysis)
    if model is None or not isinstance(run.result, dict):
        return "no result.json object"
    try:
        model.model_validate(run.result)
    except ValidationError as error:
        first = error.errors()[0]
        return f"result.json does not match the {analysis} shape ({'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg')})"
    return None


def code_interpreter_tool(
    sandbox: Callable[[], ResilientSandbox], *, timeout_seconds: float = 30.0
) -> Tool[CodeInterpreterInput, CodeInterpreterOutput]:
    def handle(arguments: CodeInterpreterInput, context: ToolContext) -> CodeInterpreterOutput:
        from memtool.analysis.scripts import templated_script

        width = len(arguments.columns)
        for index, row in enumerate(arguments.rows):
            if len(row) != width:
                raise BadArguments(f"rows[{index}] has {len(row)} values for {width} columns", field="rows")
        params = dict(arguments.params)
        if not arguments.return_files:
            params["chart"] = False  # the templated script draws nothing, and the sandbox skips matplotlib
        data = json.dumps({"columns": arguments.columns, "rows": arguments.rows, "params": params}, ensure_ascii=False, default=str)
        inputs = {"data.json": data.encode("utf-8")}
        generated = bool(arguments.code)
        first: list[str] = []
        if generated and params.get("method") == "rate_mix":
            # A ratio's rate/mix parts are checked by nothing a generated script could be held to
            # (its result shape is the additive one): the templated kernel answers.
            generated = False
            first.append("the generated script was not used (a rate/mix attribution runs the templated kernel)")
        script = arguments.code if generated and arguments.code else templated_script(arguments.analysis, params)
        run, notes = sandbox().run(script, files=inputs, timeout_seconds=timeout_seconds, charts=generated or arguments.return_files)
        notes = [*first, *notes]
        if generated:
            problem = _generated_problem(arguments.analysis, run)
            if problem is not None:
                # The model's script is a proposal: when it fails or writes the wrong shape, the
                # templated script answers, and the answer says so.
                logger.info("episode %s: generated %s script not used: %s", context.episode_id, arguments.analysis, problem)
                run, more = sandbox().run(
                    templated_script(arguments.analysis, params),
                    files=inputs,
                    timeout_seconds=timeout_seconds,
                    charts=arguments.return_files,
                )
                notes = [*notes, f"the generated script was not used ({problem}); the templated script ran instead", *more]
                generated = False
        if not run.ok:
            kind = "timeout" if run.error_kind in _RETRY_KINDS else None
            message = f"the {arguments.analysis} script failed in the sandbox ({run.error_kind}): {run.error}"
            logger.warning("episode %s: %s; stderr: %s", context.episode_id, message, (run.stderr or "")[-2000:])
            failure = AnalysisFailed(message)
            if kind == "timeout":
                failure.kind = "timeout"
            raise failure
        if not isinstance(run.result, dict):
            raise AnalysisFailed(f"the {arguments.analysis} script wrote no result.json object")
        budget = MAX_INLINE_FILE_BYTES
        files: list[SandboxArtifact] = []
        for item in run.files if arguments.return_files else []:
            inline = item.size <= budget
            budget -= item.size if inline else 0
            files.append(
                SandboxArtifact(
                    name=item.name,
                    content_type=item.content_type,
                    size=item.size,
                    data_base64=base64.b64encode(item.data).decode("ascii") if inline else None,
                )
            )
        return CodeInterpreterOutput(
            analysis=arguments.analysis,
            result=run.result,
            files=files,
            script="generated" if generated else f"templated:{arguments.analysis}",
            stdout=(run.stdout or "")[:2000],
            isolation=run.isolation,
            duration_ms=run.duration_ms,
            notes=notes,
        )

    return Tool(
        name="code_interpreter",
        description=(
            "Run an analysis script on a small table in an isolated sandbox (no network, no host files) and return its "
            "JSON result and charts. Use for tables of at most a few hundred rows."
        ),
        input_model=CodeInterpreterInput,
        output_model=CodeInterpreterOutput,
        handler=handle,
        feedback=lambda output: 1.0 if output.result else 0.0,
        timeout_seconds=timeout_seconds + 15.0,  # the sandbox's own wall clock ends the run first
        summarize=lambda output: (
            f"{output.script} in {output.isolation or 'sandbox'}: result keys {', '.join(list(output.result)[:8])}; "
            f"files {', '.join(f.name for f in output.files) or 'none'}"
        ),
    )
