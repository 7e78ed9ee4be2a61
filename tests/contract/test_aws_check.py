"""`memtool aws check`: the deploy rehearsal passes on the template as it is, reports every function
within Lambda's limits, and exits non-zero on a copy that breaks each kind of limit.

The command runs in-process through the CLI's own entry point (its stdout and exit code are the
contract); broken copies are made in a temporary project folder: template.yaml and the state
machines copied, the function folders copied (small), the layers linked.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from memtool.cli import main
from memtool.deploy.check import parse_overrides

ROOT = Path(__file__).resolve().parents[2]
COGNITO_ARN = "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_EXAMPLE"
EVERYTHING = [
    f"CognitoUserPoolArn={COGNITO_ARN}",
    "OpenSearchEndpoint=https://abc123.us-east-1.aoss.amazonaws.com",
    "OpenSearchResourceArn=arn:aws:aoss:us-east-1:123456789012:collection/abc123",
    "RedshiftSecretArn=arn:aws:secretsmanager:us-east-1:123456789012:secret:redshift-AbCdEf",
    "TenantRedshiftSecretPrefix=memtool/prod/tenants/",
    """TenantTables='{"*": ["sales.fact_*", "sales.dim_*"]}'""",  # quoted as sam deploy --parameter-overrides takes it
    "E2BApiKeySecretArn=arn:aws:secretsmanager:us-east-1:123456789012:secret:e2b-AbCdEf",
    "AlarmTopicArn=arn:aws:sns:us-east-1:123456789012:memtool-alarms",
    "CognitoDomain=https://memtool-prod.auth.us-east-1.amazoncognito.com",
]
ALWAYS = [
    "AskFunction", "FeedbackFunction", "MemoryWriteFunction", "DiagnoseFunction", "FlowStepsFunction", "AnalyzeFunction",
    "MlToolsFunction", "MaintenanceFunction",
]  # fmt: skip
MB = 1024 * 1024


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["aws", "check", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def function_block(output: str, name: str) -> str:
    match = re.search(rf"^{name}  .*?(?=^\S|\Z)", output, re.MULTILINE | re.DOTALL)
    assert match, f"{name} not in the report"
    return match.group(0)


def test_the_template_as_it_is_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--template", str(ROOT / "template.yaml"))

    assert code == 0, out
    assert "translating template.yaml with the SAM translator" in err  # progress goes to stderr
    # Every function deployed with the defaults, each within the limits, with its size and chain.
    assert "not deployed with these parameters: IndexerFunction" in out and "IndexerFunction, " not in out
    for name in ALWAYS:
        block = function_block(out, name)
        assert block.startswith(f"{name}  OK"), block
        assert "! " not in block
    ask = function_block(out, "AskFunction")
    size = re.search(r"unzipped ([\d.]+) of 250 MB \(code [\d.]+ MB \+ CoreLayer ([\d.]+) MB; 1 of 5 layers\)", ask)
    assert size and 40 < float(size.group(1)) < 250, ask
    assert "timeout 28 s" in ask and "routes      POST /ask" in ask
    assert "chain       Timeout 28 s >= connect 2 + read 25 + margin 1 = 28 s; read 25 s > AskFlow 23 s" in ask
    assert "chain       a step of AskFlow: Task TimeoutSeconds 20 s >= Timeout 20 s" in function_block(out, "MlToolsFunction")
    assert "StartAskFlow: states:StartSyncExecution on arn:aws:states:us-east-1:123456789012:stateMachine:memtool-AskFlow" in ask
    assert "managed AWSLambdaBasicExecutionRole" in ask
    analyze = function_block(out, "AnalyzeFunction")
    assert "image built by `sam build` from functions/analyze/Dockerfile" in analyze and "limit 10 GB" in analyze
    # The chain, the parameters still needed and what the empty ones turn off.
    assert "AskFunction 28 s >= connect 2 + read 25 + margin 1 = 28 s; read 25 s > AskFlow 23 s" in out
    assert re.search(r"a deploy still needs \(no default\):\n  CognitoUserPoolArn: ", out)
    assert "  OpenSearchEndpoint: OpenSearch endpoint" in out and "  RedshiftSecretArn: " in out
    assert "arm64 wheels sam build installs may differ slightly" in out
    assert "timeout 900 s" in function_block(out, "MaintenanceFunction")  # the lifecycle runs without an index too
    assert out.rstrip().endswith("the timeout chain holds (8 functions)")


def test_everything_configured_deploys_and_passes_every_function(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "--parameter-overrides", *EVERYTHING)

    assert code == 0, out
    for name in [*ALWAYS, "IndexerFunction"]:
        assert function_block(out, name).startswith(f"{name}  OK")
    assert "a deploy still needs" not in out and "left empty" not in out
    assert "timeout 900 s" in function_block(out, "MaintenanceFunction")
    assert re.search(r"MaintenanceFlow (\d+ s|unset) \(not synchronous\): .*>= MaintenanceFunction 900 s", out), out
    # The console: served with the API on one origin, signing in through the given domain.
    console = out[out.index("\nconsole:\n") :]
    assert re.search(r"console: https://e[0-9a-f]{13}\.cloudfront\.net/console/ \(the API on the same origin", console), console
    assert "sign-in: https://memtool-prod.auth.us-east-1.amazoncognito.com" in console
    assert "memtool aws console --stack" in console


def test_a_console_whose_page_may_not_reach_the_sign_in_domain_fails(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = project.read_text()
    project.write_text(text.replace("connect-src 'self' ${CognitoDomain};", "connect-src 'self';"))

    code, out, _err = run(capsys, "--template", str(project), "--parameter-overrides", *EVERYTHING)

    assert code == 1
    assert "console: the distribution's Content-Security-Policy is not the local console's with the sign-in domain" in out


# ---------------------------------------------------------------------------------- broken copies


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project to break: template, state machines and function folders copied."""
    shutil.copy(ROOT / "template.yaml", tmp_path / "template.yaml")
    shutil.copytree(ROOT / "statemachines", tmp_path / "statemachines")
    shutil.copytree(ROOT / "functions", tmp_path / "functions", ignore=shutil.ignore_patterns("__pycache__"))
    os.symlink(ROOT / "layers", tmp_path / "layers")
    return tmp_path / "template.yaml"


ASK_PROPS = (
    "      Handler: app.lambda_handler\n      Layers: [!Ref CoreLayer]\n"
    "      LoggingConfig:\n        LogGroup: !Ref AskFunctionLogGroup\n"
)


def _add_to_ask(template: Path, lines: str) -> None:
    text = template.read_text(encoding="utf-8")
    assert text.count(ASK_PROPS) == 1
    template.write_text(text.replace(ASK_PROPS, ASK_PROPS + lines), encoding="utf-8")


def test_a_function_over_250_mb_fails(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given the ask function's folder holding 200 MB more (a sparse file: its apparent size counts)
    with open(project.parent / "functions" / "ask" / "model.bin", "wb") as handle:
        handle.truncate(200 * MB)

    code, out, _err = run(capsys, "--template", str(project))

    assert code == 1
    block = function_block(out, "AskFunction")
    assert block.startswith("AskFunction  NOT OK")
    assert re.search(r"! unzipped [\d,.]+ MB, over Lambda's 250 MB \(262,144,000 bytes\)", block), block
    assert function_block(out, "FeedbackFunction").startswith("FeedbackFunction  OK")
    assert "FAILED: 1 problem(s)" in out


@pytest.mark.parametrize(
    ("lines", "reported"),
    [
        (
            "      Layers: [!Ref CoreLayer]\n",  # replaced below by six layers
            "6 layers, over Lambda's 5",
        ),
        ("      MemorySize: 10241\n", "MemorySize 10241 MB outside 128..10240"),
        ("          MEMTOOL_NOTES: " + "x" * 3500 + "\n", "! environment variables 4,"),
        ("      Timeout: 29\n", "AskFunction: Timeout 29 s is not under API Gateway's 29 s"),
    ],
    ids=["layers", "memory", "environment", "timeout-chain"],
)
def test_each_broken_limit_fails(project: Path, capsys: pytest.CaptureFixture[str], lines: str, reported: str) -> None:
    if lines.startswith("      Layers"):
        text = project.read_text(encoding="utf-8")
        extra = ", ".join(f"arn:aws:lambda:us-east-1:123456789012:layer:extra{i}:1" for i in range(5))
        project.write_text(text.replace(ASK_PROPS, ASK_PROPS.replace("[!Ref CoreLayer]", f"[!Ref CoreLayer, {extra}]")), encoding="utf-8")
    elif lines.startswith("          MEMTOOL_NOTES"):
        text = project.read_text(encoding="utf-8")
        variable = "          MEMTOOL_ASK_STATE_MACHINE_ARN: !Ref AskFlow\n"
        assert text.count(variable) == 1
        project.write_text(text.replace(variable, variable + lines), encoding="utf-8")
    else:
        _add_to_ask(project, lines)

    code, out, _err = run(capsys, "--template", str(project))

    assert code == 1, out
    assert reported in out, out
    assert "FAILED" in out


def test_a_timeout_over_900_seconds_fails(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = project.read_text(encoding="utf-8")
    assert text.count("      Timeout: 900\n") == 1
    project.write_text(text.replace("      Timeout: 900\n", "      Timeout: 901\n"), encoding="utf-8")

    code, out, _err = run(capsys, "--template", str(project), "--parameter-overrides", *EVERYTHING)

    assert code == 1
    assert "! Timeout 901 s outside 1..900" in function_block(out, "MaintenanceFunction")


def test_a_broken_rule_fails_before_anything_is_deployed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "--parameter-overrides", "OpenSearchEndpoint=https://abc123.us-east-1.aoss.amazonaws.com")

    assert code == 1
    assert "rule OpenSearchEndpointAndResourceArnTogether fails: OpenSearchEndpoint and OpenSearchResourceArn are set together" in out


def test_a_parameter_cloudformation_would_refuse_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "--parameter-overrides", "Stage=dev-1", "LogRetentionDays=2")

    assert code == 1
    assert "parameter Stage='dev-1' does not match" in out
    assert "parameter LogRetentionDays='2' is not one of" in out


def test_an_unknown_parameter_cannot_be_checked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--parameter-overrides", "OpenSearchEndpont=https://x")

    assert (code, out) == (2, "")
    assert "memtool aws check: unknown template parameters: OpenSearchEndpont" in err


def test_overrides_take_the_forms_sam_deploy_takes() -> None:
    assert parse_overrides(["Stage=prod", "ParameterKey=TenantClaim,ParameterValue=custom:org", "A=x=y"]) == {
        "Stage": "prod",
        "TenantClaim": "custom:org",
        "A": "x=y",
    }
    assert parse_overrides(["Stage=prod LogRetentionDays=7"]) == {"Stage": "prod", "LogRetentionDays": "7"}
    with pytest.raises(ValueError, match="not Key=Value"):
        parse_overrides(["Stage"])


def test_a_layer_measured_without_some_of_its_packages_is_not_vouched_for(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment without the `aws` extra would undercount the layer (a reviewer measured 44.7 MB
    for a 78 MB layer): the zip functions then fail the check, naming what to install."""
    from dataclasses import replace

    from memtool.deploy import sizes

    measure = sizes.measure_layer
    monkeypatch.setattr(sizes, "measure_layer", lambda name, content: replace(measure(name, content), missing=("grpcio", "lxml")))

    code, out, _err = run(capsys)

    assert code == 1
    block = function_block(out, "AskFunction")
    assert block.startswith("AskFunction  NOT OK")
    assert "size not fully measured: grpcio, lxml not installed here" in block


def test_a_step_that_outlives_its_task_is_marked_on_its_own_function(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Reviewer: the function's verdict said OK and its chain line '>=' while the chain was broken."""
    text = project.read_text(encoding="utf-8")
    start = text.index("  FlowStepsFunction:")
    at = text.index("      Timeout: 20", start)
    project.write_text(text[:at] + "      Timeout: 60" + text[at + len("      Timeout: 20") :], encoding="utf-8")

    code, out, _err = run(capsys, "--template", str(project))

    assert code == 1
    block = function_block(out, "FlowStepsFunction")
    assert block.startswith("FlowStepsFunction  NOT OK")
    assert "a step of AskFlow: Task TimeoutSeconds 20 s NOT >= Timeout 60 s" in block
    assert "Task 20 s NOT >= FlowStepsFunction 60 s" in out
    assert function_block(out, "AnalyzeFunction").startswith("AnalyzeFunction  OK")


# ---------------------------------------------------------------------------------- fair use


def fair_use_block(output: str) -> str:
    match = re.search(r"^fair use:\n(?:  .*\n)+", output, re.MULTILINE)
    assert match, output
    return match.group(0)


def test_the_fair_use_protections_are_reported(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys)

    assert code == 0, out
    block = fair_use_block(out)
    assert (
        "  request budget       60 requests a minute per tenant, 10 at once, spent by POST /ask (AskFunction), "
        "POST /feedback (FeedbackFunction); a token bucket per tenant in the memory table" in block
    )
    assert (
        "  reserved concurrency AskFunction 50, FlowStepsFunction 50, AnalyzeFunction 50, MlToolsFunction 50 "
        "(200 of the account's concurrency" in block
    )
    assert "  access logs          stage dev -> log group memtool-ApiAccessLogGroup, retention 30 days\n" in block
    # The budget is spent with one permission, shown with the ask function's others.
    assert "TenantRequestBudget: dynamodb:UpdateItem on arn:aws:dynamodb:us-east-1:123456789012:table/memtool-MemoryTable" in (
        function_block(out, "AskFunction")
    )


def test_the_fair_use_parameters_set_what_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    overrides = ["TenantRequestsPerMinute=120", "TenantRequestBurst=30", "AskReservedConcurrency=5", "LogRetentionDays=7"]
    code, out, _err = run(capsys, "--parameter-overrides", *overrides)

    assert code == 0, out
    block = fair_use_block(out)
    assert "120 requests a minute per tenant, 30 at once" in block
    assert "AskFunction 5, FlowStepsFunction 5, AnalyzeFunction 5, MlToolsFunction 5 (20 of" in block
    assert "retention 7 days" in block


def test_an_operator_may_turn_each_off_and_is_told_what_that_means(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "--parameter-overrides", "TenantRequestsPerMinute=0", "AskReservedConcurrency=0", "ApiAccessLogs=OFF")

    assert code == 0, out
    block = fair_use_block(out)
    assert "request budget       OFF (TenantRequestsPerMinute=0): one tenant can starve the others" in block
    assert "reserved concurrency OFF (AskReservedConcurrency=0)" in block
    assert "access logs          stage dev OFF (ApiAccessLogs=OFF)" in block


def _remove(template: Path, *snippets: str) -> None:
    text = template.read_text(encoding="utf-8")
    for snippet in snippets:
        assert snippet in text, snippet
        text = text.replace(snippet, "")
    template.write_text(text, encoding="utf-8")


BUDGET_ENV = (
    "          MEMTOOL_TENANT_REQUESTS_PER_MINUTE: !Ref TenantRequestsPerMinute\n"
    "          MEMTOOL_TENANT_REQUEST_BURST: !Ref TenantRequestBurst\n"
)
RESERVED = "      ReservedConcurrentExecutions: !If [HasAskReservedConcurrency, !Ref AskReservedConcurrency, !Ref AWS::NoValue]\n"


@pytest.mark.parametrize(
    ("broken", "reported", "line"),
    [
        (
            "budget",
            "request budget: AskFunction (POST /ask) has no MEMTOOL_TENANT_REQUESTS_PER_MINUTE: one tenant can starve the others",
            "",  # the report names who still spends it (below)
        ),
        (
            "budget-permission",
            "request budget: AskFunction (POST /ask) may not dynamodb:UpdateItem the memory table",
            "",
        ),
        (
            "reserved",
            "reserved concurrency: FlowStepsFunction (the ask path) has no ReservedConcurrentExecutions",
            "reserved concurrency AskFunction 50, FlowStepsFunction none, AnalyzeFunction 50, MlToolsFunction 50",
        ),
        (
            "access-logs",
            "access logs: stage dev has no AccessLogSetting: no record of who called what (CKV_AWS_76)",
            "access logs          stage dev NONE",
        ),
    ],
)
def test_a_template_without_one_of_them_fails(
    project: Path, capsys: pytest.CaptureFixture[str], broken: str, reported: str, line: str
) -> None:
    text = project.read_text(encoding="utf-8")
    if broken == "budget":  # the ask function's environment without the budget (feedback keeps it)
        ask_env = "          MEMTOOL_ASK_STATE_MACHINE_ARN: !Ref AskFlow\n" + BUDGET_ENV
        assert text.count(ask_env) == 1
        project.write_text(text.replace(ask_env, "          MEMTOOL_ASK_STATE_MACHINE_ARN: !Ref AskFlow\n"), encoding="utf-8")
    elif broken == "budget-permission":
        statement = (
            "            - Sid: TenantRequestBudget  # a conditional UpdateItem of the item B#<tenant>\n"
            "              Effect: Allow\n"
            "              Action: dynamodb:UpdateItem\n"
            "              Resource: !GetAtt MemoryTable.Arn\n"
        )
        _remove(project, statement)
    elif broken == "reserved":  # one function of the ask path without its reservation
        start = text.index("  FlowStepsFunction:")
        at = text.index(RESERVED, start)
        project.write_text(text[:at] + text[at + len(RESERVED) :], encoding="utf-8")
    else:  # the stage without its access log setting (the parameter and its log group stay)
        start = text.index("      AccessLogSetting: !If\n")
        end = text.index("      GatewayResponses:\n", start)
        project.write_text(text[:start] + text[end:], encoding="utf-8")

    code, out, _err = run(capsys, "--template", str(project))

    assert code == 1, out
    assert "FAILED" in out
    assert any(reported in v for v in re.findall(r"^  - (.*)$", out, re.MULTILINE)), out
    block = fair_use_block(out)
    if broken == "budget":
        assert "spent by POST /feedback (FeedbackFunction)" in block and "POST /ask (AskFunction)" not in block
    elif line:
        assert line in block, block


def test_a_reservation_of_zero_fails_because_it_stops_the_function(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = project.read_text(encoding="utf-8")
    start = text.index("  MlToolsFunction:")
    at = text.index(RESERVED, start)
    project.write_text(text[:at] + "      ReservedConcurrentExecutions: 0\n" + text[at + len(RESERVED) :], encoding="utf-8")

    code, out, _err = run(capsys, "--template", str(project))

    assert code == 1
    assert "reserved concurrency: MlToolsFunction has ReservedConcurrentExecutions 0, which throttles every invocation" in out


def test_fair_use_parameters_out_of_range_fail(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "--parameter-overrides", "TenantRequestBurst=0", "AskReservedConcurrency=many")

    assert code == 1
    assert "parameter TenantRequestBurst='0' is outside 1..10000" in out
    assert "parameter AskReservedConcurrency='many' is not a number" in out
