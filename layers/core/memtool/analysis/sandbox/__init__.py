"""Sandboxes for untrusted analysis scripts: the port here, the local process and E2B adapters beside it.

Importing this package loads neither e2b nor numpy; the composition root picks an adapter.
"""

from memtool.analysis.sandbox.port import Sandbox, SandboxFile, SandboxRun, SandboxUnavailable

__all__ = ["Sandbox", "SandboxFile", "SandboxRun", "SandboxUnavailable"]
