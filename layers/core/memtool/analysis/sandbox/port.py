"""The sandbox port: run one untrusted analysis script on a few input files and say what came back.

Script conventions, the same for every adapter:

* The script runs with its working directory as the current directory, and nothing else of the
  host is visible to it (no network, no host files, none of the host's environment variables).
* The input files are in that directory under the names the caller gave (``data.json``, ...).
* The script writes its answer as JSON to ``result.json`` and any charts as ``*.png`` (other files
  it writes there come back too, within the caps); what it prints comes back as stdout/stderr.

``Sandbox.run`` never raises for a failure of the script: an exception, a limit (wall clock, CPU,
memory, output size) or a forbidden operation comes back as ``ok=False`` with a human ``error``
and a machine ``error_kind``. ``SandboxUnavailable`` is raised only when the sandbox itself cannot
be created (no E2B, no Python to start); callers may then fall back to another sandbox.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

SandboxErrorKind = Literal["timeout", "cpu_limit", "memory_limit", "output_limit", "forbidden", "exit", "unavailable"]

RESULT_FILE = "result.json"
STREAM_CAP_BYTES = 64 * 1024  # what is kept of stdout and of stderr each
MAX_RETURNED_FILES = 16
MAX_RETURNED_FILE_BYTES = 16 * 1024 * 1024  # all returned files together
MAX_RESULT_BYTES = 4 * 1024 * 1024


class SandboxUnavailable(Exception):
    """The sandbox itself could not be created or reached; the script never ran."""


class SandboxFile(BaseModel):
    """A file the script wrote in its working directory."""

    name: str  # relative to the working directory, "/"-separated
    content_type: str
    size: int
    data: bytes


class SandboxRun(BaseModel):
    """What one script run produced, successful or not."""

    ok: bool
    result: Any | None = None  # the JSON in result.json; None when absent or not valid JSON
    stdout: str = ""
    stderr: str = ""
    files: list[SandboxFile] = Field(default_factory=list)
    error: str | None = None
    error_kind: SandboxErrorKind | None = None
    duration_ms: float = 0.0
    isolation: str = ""


class Sandbox(Protocol):
    name: str

    def run(self, code: str, *, files: dict[str, bytes], timeout_seconds: float = 30.0, charts: bool = True) -> SandboxRun:
        """``charts=False``: the script draws nothing, so plotting libraries need not be ready."""
        ...


def cap_text(data: bytes, cap: int = STREAM_CAP_BYTES, *, dropped: int = 0) -> str:
    """Decode a stream's head, marking what was cut so nobody mistakes it for the whole output."""
    kept, extra = data[:cap], max(0, len(data) - cap) + dropped
    text = kept.decode("utf-8", errors="replace")
    return f"{text}…[truncated {extra} bytes]" if extra else text


def content_type_of(name: str) -> str:
    import mimetypes

    if name.lower().endswith(".png"):
        return "image/png"
    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def check_input_names(files: dict[str, bytes]) -> None:
    """Input names are plain file names: a path would let a caller write outside the working dir."""
    for name in files:
        if not name or name in {".", ".."} or "/" in name or "\\" in name or "\0" in name:
            raise ValueError(f"sandbox input file name {name!r} must be a plain file name")
