"""Shared constants of the ground floor (docs/architecture.md, Layers): no imports from memtool above."""

from __future__ import annotations

# Error codes Bedrock returns for conditions that pass on their own; everything else
# (ValidationException, AccessDeniedException, ResourceNotFoundException, ...) will not.
BEDROCK_RETRYABLE_ERRORS = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelNotReadyException",
        "InternalServerException",
        "ModelTimeoutException",
    }
)
