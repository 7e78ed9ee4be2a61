"""The E2B sandbox: one Firecracker microVM per script run, created with no internet and always killed.

Each ``run`` creates a sandbox (lifetime a little longer than the script's timeout, internet
access off), uploads the input files and ``script.py`` into ``/home/user/work``, runs
``python script.py`` there with the timeout, collects stdout, stderr, ``result.json`` and the other
files the script wrote, and kills the sandbox in ``finally`` whatever happened. The ``e2b`` SDK is
imported inside ``run`` only, so importing this module costs nothing. The API key comes from the
composition root (Secrets Manager in AWS), never from the environment here.
"""

from __future__ import annotations

import math
import posixpath
import time
from collections.abc import Mapping
from typing import Any

from memtool.analysis.sandbox.port import (
    MAX_RESULT_BYTES,
    MAX_RETURNED_FILE_BYTES,
    MAX_RETURNED_FILES,
    RESULT_FILE,
    SandboxErrorKind,
    SandboxFile,
    SandboxRun,
    SandboxUnavailable,
    cap_text,
    check_input_names,
    content_type_of,
)

WORKDIR = "/home/user/work"
SCRIPT = "script.py"
LIFETIME_MARGIN_SECONDS = 60  # the VM outlives the script long enough to collect its outputs
SCRIPT_ENV = {"MPLBACKEND": "Agg", "OPENBLAS_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}


class E2BSandbox:
    """Runs a script in a fresh E2B microVM with internet access off."""

    name = "e2b"

    def __init__(
        self,
        api_key: str,
        *,
        template: str | None = None,
        domain: str | None = None,
        connection_opts: Mapping[str, Any] | None = None,
        max_files: int = MAX_RETURNED_FILES,
        max_files_bytes: int = MAX_RETURNED_FILE_BYTES,
        max_result_bytes: int = MAX_RESULT_BYTES,
    ) -> None:
        if not api_key:
            raise SandboxUnavailable("E2B needs an API key")
        self._api_key = api_key
        self.template = template
        self.domain = domain
        self._connection_opts = dict(connection_opts or {})  # e.g. api_url/sandbox_url for a test double
        self.max_files = max_files
        self.max_files_bytes = max_files_bytes
        self.max_result_bytes = max_result_bytes

    # charts is not used: E2B's template has them ready
    def run(self, code: str, *, files: dict[str, bytes], timeout_seconds: float = 30.0, charts: bool = True) -> SandboxRun:
        check_input_names(files)
        if SCRIPT in files or RESULT_FILE in files:
            raise ValueError(f"sandbox input files may not be named {SCRIPT} or {RESULT_FILE}")
        started = time.monotonic()
        sandbox = self._create(timeout_seconds)
        try:
            return self._run_in(sandbox, code, files, timeout_seconds, started)
        finally:
            try:
                sandbox.kill()
            except Exception:  # noqa: BLE001 - the VM also dies at its own lifetime; the run's verdict stands
                pass

    def _create(self, timeout_seconds: float) -> Any:
        try:
            from e2b import Sandbox
        except ImportError as exc:
            raise SandboxUnavailable("the e2b package is not installed") from exc
        opts: dict[str, Any] = {"api_key": self._api_key, **self._connection_opts}
        if self.domain:
            opts["domain"] = self.domain
        try:
            return Sandbox.create(
                template=self.template,
                timeout=int(math.ceil(timeout_seconds)) + LIFETIME_MARGIN_SECONDS,
                allow_internet_access=False,
                envs=dict(SCRIPT_ENV),
                **opts,
            )
        except Exception as exc:  # any failure to create means no sandbox: the caller may fall back
            raise SandboxUnavailable(f"E2B could not create a sandbox: {type(exc).__name__}: {exc}") from exc

    def _run_in(self, sandbox: Any, code: str, files: dict[str, bytes], timeout_seconds: float, started: float) -> SandboxRun:
        from e2b import CommandExitException, TimeoutException

        def finish(kind: SandboxErrorKind | None, error: str | None, stdout: str, stderr: str) -> SandboxRun:
            result, outputs = (None, []) if kind == "unavailable" else self._collect(sandbox, set(files))
            return SandboxRun(
                ok=kind is None,
                result=result,
                stdout=cap_text(stdout.encode()),
                stderr=cap_text(stderr.encode()),
                files=outputs,
                error=error,
                error_kind=kind,
                duration_ms=(time.monotonic() - started) * 1000.0,
                isolation="e2b",
            )

        try:
            for name, data in files.items():
                sandbox.files.write(posixpath.join(WORKDIR, name), data)
            sandbox.files.write(posixpath.join(WORKDIR, SCRIPT), code.encode("utf-8"))
        except Exception as exc:  # noqa: BLE001 - the VM is there but unusable: report, the caller may fall back
            return finish("unavailable", f"could not upload the script to E2B: {type(exc).__name__}: {exc}", "", "")
        try:
            command = sandbox.commands.run(f"python {SCRIPT}", cwd=WORKDIR, timeout=timeout_seconds, envs=dict(SCRIPT_ENV))
        except CommandExitException as exc:
            stderr = exc.stderr or ""
            last = _last_line(stderr)
            kind: SandboxErrorKind = "memory_limit" if last.startswith("MemoryError") or exc.exit_code == 137 else "exit"
            return finish(kind, last or f"the script exited with status {exc.exit_code}", exc.stdout or "", stderr)
        except TimeoutException:
            return finish("timeout", f"the script ran longer than {timeout_seconds:g} s (wall clock) and was stopped", "", "")
        except Exception as exc:  # noqa: BLE001 - transport failures mid-run: the script's fate is unknown
            return finish("unavailable", f"E2B failed while running the script: {type(exc).__name__}: {exc}", "", "")
        return finish(None, None, command.stdout or "", command.stderr or "")

    def _collect(self, sandbox: Any, inputs: set[str]) -> tuple[Any, list[SandboxFile]]:
        import json

        result: Any = None
        outputs: list[SandboxFile] = []
        budget = self.max_files_bytes
        try:
            entries = sandbox.files.list(WORKDIR)
        except Exception:  # noqa: BLE001 - nothing to collect is an honest answer for a failed run
            return None, []
        for entry in sorted(entries, key=lambda e: e.name):
            if getattr(entry.type, "value", entry.type) != "file" or entry.name in inputs or entry.name == SCRIPT:
                continue
            size = int(getattr(entry, "size", 0) or 0)
            if entry.name == RESULT_FILE:
                if size <= self.max_result_bytes:
                    try:
                        result = json.loads(bytes(sandbox.files.read(entry.path, format="bytes")))
                    except Exception:  # noqa: BLE001 - invalid or unreadable JSON means no result, per the port
                        result = None
                continue
            if len(outputs) >= self.max_files or size > budget:
                continue
            try:
                data = bytes(sandbox.files.read(entry.path, format="bytes"))
            except Exception:  # noqa: BLE001 - one unreadable file does not sink the run
                continue
            budget -= len(data)
            outputs.append(SandboxFile(name=entry.name, content_type=content_type_of(entry.name), size=len(data), data=data))
        return result, outputs


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
