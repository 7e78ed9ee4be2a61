"""One Bedrock call helper (memtool.bedrock): the retry policy, and the one home of it.

The planner, the embedder and the diagnoser each call Bedrock through ``BedrockRetry.call``; their
contract tests (tests/contract/test_bedrock_*.py) hold what each makes of a failure. Here: the
policy itself, and that no second copy of it comes back (a call to Bedrock outside the helper, a
retryable set of its own, a default that drifts).
"""

from __future__ import annotations

import ast
from datetime import date
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from memtool import bedrock
from memtool.bedrock import RETRYABLE_ERRORS, BedrockFailure, BedrockRetry
from memtool.constants import BEDROCK_RETRYABLE_ERRORS

LIBRARY = Path(__file__).resolve().parents[2] / "layers" / "core" / "memtool"


def client_error(code: str | None, message: str = "scripted") -> ClientError:
    details = {"Message": message} if code is None else {"Code": code, "Message": message}
    return ClientError({"Error": details}, "Converse")


class Scripted:
    """A request that raises the scripted errors in turn, then answers ``"ok"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


class Unavailable(Exception):
    pass


def policy(max_attempts: int = 3, **kwargs) -> tuple[BedrockRetry, list[float]]:
    slept: list[float] = []
    return BedrockRetry(max_attempts, 0.5, 8.0, sleep=slept.append, jitter=kwargs.pop("jitter", lambda: 0.5), **kwargs), slept


# ---- the policy -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0.5, 8.0), "max_attempts must be at least 1"),
        ((3, -1.0, 8.0), r"need 0 <= base_delay"),
        ((3, 2.0, 1.0), r"need 0 <= base_delay"),
    ],
)
def test_a_policy_that_cannot_run_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        BedrockRetry(*args)


def test_the_waits_double_up_to_the_cap_with_jitter_in_the_upper_half():
    retry = BedrockRetry(8, 1.0, 4.0, jitter=lambda: 0.0)
    assert [retry.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 2.0, 2.0]
    near_one = BedrockRetry(8, 1.0, 4.0, jitter=lambda: 0.999)
    assert 3.99 < near_one.delay(5) <= 4.0


def test_a_retryable_code_is_retried_with_a_note_before_each_wait_then_answers():
    retry, slept = policy()
    request = Scripted(client_error("ThrottlingException"), client_error("ServiceUnavailableException"))
    told: list[tuple[str, int, float]] = []

    assert retry.call(request, on_retry=lambda *args: told.append(args)) == "ok"

    assert request.calls == 3
    assert told == [("ThrottlingException", 1, 0.375), ("ServiceUnavailableException", 2, 0.75)]
    assert slept == [0.375, 0.75]


def test_persistent_throttling_gives_up_after_max_attempts_as_the_callers_exception():
    retry, slept = policy(max_attempts=3)
    request = Scripted(*(client_error("ThrottlingException", "Too many requests") for _ in range(3)))
    failures: list[BedrockFailure] = []

    def unavailable(failure: BedrockFailure) -> Exception:
        failures.append(failure)
        return Unavailable(failure.reason())

    with pytest.raises(Unavailable, match=r"^ThrottlingException after 3 attempts: Too many requests$") as raised:
        retry.call(request, unavailable=unavailable)

    assert request.calls == 3 and len(slept) == 2
    assert isinstance(raised.value.__cause__, ClientError)
    [failure] = failures
    assert (failure.code, failure.attempts, failure.retryable, failure.connection) == ("ThrottlingException", 3, True, False)


@pytest.mark.parametrize("code", ["AccessDeniedException", "ValidationException", "ResourceNotFoundException", None])
def test_any_other_code_is_not_retried(code):
    retry, slept = policy()
    request = Scripted(client_error(code, "not for you"))
    with pytest.raises(Unavailable) as raised:
        retry.call(request, unavailable=lambda failure: Unavailable(failure.reason()))
    assert request.calls == 1 and slept == []
    assert str(raised.value) == f"{code or 'ClientError'}: not for you"


def test_without_a_mapping_the_botocore_error_itself_is_raised():
    retry, slept = policy(max_attempts=2)
    last = client_error("ThrottlingException")
    with pytest.raises(ClientError) as raised:
        retry.call(Scripted(client_error("ThrottlingException"), last))
    assert raised.value is last and len(slept) == 1


def test_a_connection_error_is_not_retried_and_says_so():
    retry, slept = policy()
    timeout = ReadTimeoutError(endpoint_url="https://bedrock-runtime.us-east-1.amazonaws.com")
    failures: list[BedrockFailure] = []
    with pytest.raises(Unavailable):
        retry.call(Scripted(timeout), unavailable=lambda failure: failures.append(failure) or Unavailable(failure.code))
    [failure] = failures
    assert failure.connection and not failure.retryable and failure.code == "ReadTimeoutError" and failure.error is timeout
    assert slept == []
    with pytest.raises(ReadTimeoutError):
        retry.call(Scripted(timeout))


def test_an_exception_that_is_not_botocore_passes_through_untouched():
    retry, slept = policy()
    with pytest.raises(KeyError):
        retry.call(Scripted(KeyError("x")), unavailable=lambda failure: Unavailable(failure.reason()))
    assert slept == []


def test_the_reason_cuts_the_message_and_drops_an_empty_one():
    failure = BedrockFailure("ThrottlingException", "x" * 300, 2, True, False, client_error("ThrottlingException"))
    assert failure.reason(limit=200) == "ThrottlingException after 2 attempts: " + "x" * 200
    assert BedrockFailure("AccessDeniedException", "", 1, False, False, client_error("AccessDeniedException")).reason() == (
        "AccessDeniedException"
    )


# ---- one home ---------------------------------------------------------------------------------


def test_the_retryable_codes_are_the_ground_floors_one_set():
    assert RETRYABLE_ERRORS is BEDROCK_RETRYABLE_ERRORS
    assert {"ThrottlingException", "ServiceUnavailableException", "ModelNotReadyException"} <= RETRYABLE_ERRORS
    assert "ValidationException" not in RETRYABLE_ERRORS and "AccessDeniedException" not in RETRYABLE_ERRORS


def test_the_three_bedrock_callers_share_the_helper_and_keep_their_defaults():
    from memtool.diagnosis.bedrock import BedrockDiagnoser
    from memtool.planning import bedrock_planner
    from memtool.retrieval import embedders
    from memtool.semantic.catalog import load_catalog
    from memtool.semantic.entities import EntityIndex

    assert bedrock_planner.RETRYABLE_ERROR_CODES is RETRYABLE_ERRORS
    assert embedders.RETRYABLE_ERROR_CODES is RETRYABLE_ERRORS

    catalog = load_catalog()
    planner = bedrock_planner.BedrockPlanner(
        object(), model_id="m", catalog=catalog, entities=EntityIndex.static(catalog), today=date(2026, 7, 1)
    )
    embedder = embedders.BedrockTitanEmbedder(object())
    diagnoser = BedrockDiagnoser(object(), model_id="m")
    policies = {"planner": planner._retry, "embedder": embedder._retry, "diagnoser": diagnoser._retry}
    assert all(isinstance(p, BedrockRetry) for p in policies.values())
    assert {name: (p.max_attempts, p.base_delay, p.max_delay) for name, p in policies.items()} == {
        "planner": (4, 0.5, 8.0),
        "embedder": (5, 0.25, 8.0),
        "diagnoser": (3, 0.5, 8.0),
    }


BEDROCK_OPERATIONS = {"converse", "converse_stream", "invoke_model", "invoke_model_with_response_stream"}


def _bedrock_calls_outside_the_helper(source: str) -> list[int]:
    """Lines of Bedrock runtime calls that are not a lambda handed to ``<policy>.call``."""
    tree = ast.parse(source)
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "call":
            for argument in node.args[:1]:
                if isinstance(argument, ast.Lambda):
                    inside.update(id(n) for n in ast.walk(argument.body))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in BEDROCK_OPERATIONS
        and id(node) not in inside
    ]


def test_every_bedrock_call_in_the_library_goes_through_the_helper():
    found: dict[str, list[int]] = {}
    callers: set[str] = set()
    for path in sorted(LIBRARY.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = str(path.relative_to(LIBRARY))
        if any(f".{operation}(" in source for operation in BEDROCK_OPERATIONS):
            callers.add(name)
        lines = _bedrock_calls_outside_the_helper(source)
        if lines:
            found[name] = lines
        if name not in {"bedrock.py", "constants.py"}:
            assert "BEDROCK_RETRYABLE_ERRORS" not in source, f"{name} reads the retryable codes past memtool.bedrock"
            assert "2 ** (attempt" not in source, f"{name} computes a backoff of its own"
    assert found == {}, f"Bedrock calls outside BedrockRetry.call: {found}"
    assert {"planning/bedrock_planner.py", "retrieval/embedders.py", "diagnosis/bedrock.py"} <= callers


def test_the_check_catches_a_bedrock_call_of_its_own():
    copy = "def f(client):\n    for attempt in range(3):\n        return client.converse(modelId='m')\n"
    assert _bedrock_calls_outside_the_helper(copy) == [3]
    shared = "def f(retry, client):\n    return retry.call(lambda: client.converse(modelId='m'))\n"
    assert _bedrock_calls_outside_the_helper(shared) == []


def test_the_helper_is_on_the_ground_floor():
    imported = {
        node.module
        for node in ast.walk(ast.parse(Path(bedrock.__file__).read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memtool")
    }
    assert imported <= {"memtool.constants"}
