"""The console on AWS (docs/deploying.md, "The console"): what template.yaml deploys with
CognitoDomain, and `memtool aws console`, the step that publishes the files.

- The step runs through the CLI's own entry point against moto's S3 and CloudFormation (a stack
  with the console's outputs) and a botocore Stubber of CloudFront (moto makes its own distribution
  ids, which the policy proof below must know): the files land with their types and cache rules,
  config.json says how to sign in, an older build's files go, and the distribution is invalidated.
- The IAM proof: every call the step makes, mapped to its IAM request as AWS authorizes it
  (tests/contract/iam_support.py), is allowed by the stack's ConsoleDeployPolicy as the SAM
  translator and the resolver of memtool.deploy.iam deploy it; removing any statement denies a
  call; no statement goes unused.
- The bucket policy lets the distribution, and only it, read the files.
- The page function, run in Node.js as CloudFront runs it (cloudfront-js-2.0 is ES5.1+), sends a
  console route to the page and leaves files alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from memtool.cli import main
from memtool.deploy import console as console_deploy
from memtool.deploy.iam import Deployment, Statement, _statement, cloudfront_id, evaluate, resolve_template
from memtool.runtime.console import CONSOLE_DIR
from tests.contract.iam_support import ACCOUNT, REGION, IamRequest, iam_requests

STACK = "memtool"
DOMAIN = "https://memtool-prod.auth.us-east-1.amazoncognito.com"
PARAMETERS = {"CognitoUserPoolArn": f"arn:aws:cognito-idp:{REGION}:{ACCOUNT}:userpool/{REGION}_EXAMPLE", "CognitoDomain": DOMAIN}


@pytest.fixture(scope="module")
def deployment() -> Deployment:
    return resolve_template(PARAMETERS, region=REGION, account=ACCOUNT, stack_name=STACK)


def deploy_policy(deployment: Deployment) -> list[Statement]:
    document = deployment.resources["ConsoleDeployPolicy"]["Properties"]["PolicyDocument"]
    return [_statement("ConsoleDeployPolicy", "ConsoleDeployPolicy", i, s) for i, s in enumerate(document["Statement"])]


def outputs_stack(deployment: Deployment) -> dict[str, str]:
    """The console's outputs as the deployed stack gives them: the resolver's names for its resources."""
    bucket = deployment.physical_name("ConsoleBucket").lower()
    distribution = cloudfront_id(deployment.physical_name("ConsoleDistribution"))
    return {
        "ConsoleUrl": f"https://{distribution.lower()}.cloudfront.net/console/",
        "ConsoleBucketName": bucket,
        "ConsoleDistributionId": distribution,
        "ConsoleClientId": "4example0client0id0abcdefgh",
        "ConsoleSignInDomain": DOMAIN,
    }


def make_stack(outputs: dict[str, str], tenant_claim: str = "custom:org") -> None:
    """A stack on moto with the console's outputs and TenantClaim (one harmless resource)."""
    template = {
        "Parameters": {"TenantClaim": {"Type": "String"}},
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=STACK, TemplateBody=json.dumps(template), Parameters=[{"ParameterKey": "TenantClaim", "ParameterValue": tenant_claim}]
    )


class Recorder:
    """Every AWS call the step makes, as the IAM requests AWS authorizes it as."""

    def __init__(self) -> None:
        self.requests: list[IamRequest] = []

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.requests += iam_requests(model.service_model.service_name, model.name, params)


@pytest.fixture
def published(deployment: Deployment, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`memtool aws console --stack memtool` once, on moto, after an older build left a file."""
    from moto import mock_aws

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    outputs = outputs_stack(deployment)
    recorder = Recorder()
    with mock_aws():
        make_stack(outputs)
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=outputs["ConsoleBucketName"])
        s3.put_object(Bucket=outputs["ConsoleBucketName"], Key="console/assets/index-OLD.js", Body=b"old")
        s3.put_object(Bucket=outputs["ConsoleBucketName"], Key="elsewhere.txt", Body=b"not the console's")

        cloudfront = boto3.client("cloudfront", region_name=REGION)
        stubber = Stubber(cloudfront)
        stubber.add_response(
            "create_invalidation",
            {
                "Location": "https://cloudfront.amazonaws.com/x",
                "Invalidation": {
                    "Id": "I2EXAMPLE",
                    "Status": "InProgress",
                    "CreateTime": "2026-12-08T00:00:00Z",
                    "InvalidationBatch": {"Paths": {"Quantity": 2, "Items": ["/console", "/console/*"]}, "CallerReference": "x"},
                },
            },  # fmt: skip
            {
                "DistributionId": outputs["ConsoleDistributionId"],
                "InvalidationBatch": {"Paths": {"Quantity": 2, "Items": ["/console", "/console/*"]}, "CallerReference": ANY},
            },  # fmt: skip
        )
        real_session = boto3.Session

        def session(**kwargs: Any) -> Any:
            made = real_session(**kwargs)
            made_client = made.client

            def client(name: str, **options: Any) -> Any:
                chosen = cloudfront if name == "cloudfront" else made_client(name, **options)
                chosen.meta.events.register("before-parameter-build.*.*", recorder)
                return chosen

            made.client = client  # type: ignore[method-assign]
            return made

        monkeypatch.setattr(boto3, "Session", session)
        with stubber:
            code = main(["aws", "console", "--stack", STACK, "--region", REGION])
            stubber.assert_no_pending_responses()
        objects = {o["Key"]: s3.head_object(Bucket=outputs["ConsoleBucketName"], Key=o["Key"])
                   for o in s3.list_objects_v2(Bucket=outputs["ConsoleBucketName"])["Contents"]}  # fmt: skip
        config = json.loads(s3.get_object(Bucket=outputs["ConsoleBucketName"], Key="console/config.json")["Body"].read())
    captured = capsys.readouterr()
    return {"code": code, "out": captured.out, "err": captured.err, "objects": objects, "config": config,
            "requests": recorder.requests, "outputs": outputs}  # fmt: skip


def test_the_step_publishes_the_build_and_its_config(published: dict[str, Any]) -> None:
    assert published["code"] == 0, published["err"]
    objects, outputs = published["objects"], published["outputs"]
    built = sorted("console/" + p.relative_to(CONSOLE_DIR).as_posix() for p in CONSOLE_DIR.rglob("*") if p.is_file())
    assert sorted(objects) == sorted([*built, "console/config.json", "elsewhere.txt"])  # the old asset is gone, the rest kept
    assert objects["console/index.html"]["ContentType"] == "text/html; charset=utf-8"
    assert objects["console/index.html"]["CacheControl"] == "no-cache"
    script = next(k for k in objects if k.startswith("console/assets/") and k.endswith(".js"))
    assert objects[script]["ContentType"] == "text/javascript; charset=utf-8"
    assert objects[script]["CacheControl"] == "public, max-age=31536000, immutable"
    assert published["config"] == {
        "sign_in": "cognito", "domain": DOMAIN, "client_id": outputs["ConsoleClientId"], "redirect_uri": outputs["ConsoleUrl"],
        "scopes": ["openid", "email", "profile"], "tenant_claim": "custom:org", "roles_claim": "cognito:groups",
    }  # fmt: skip
    assert "deleted: 1 files of an older build" in published["out"]
    assert f"invalidation: I2EXAMPLE on {outputs['ConsoleDistributionId']}" in published["out"]
    assert f"sign in at: {outputs['ConsoleUrl']}" in published["out"]
    assert "uploading" in published["err"]  # progress on stderr


def test_every_call_of_the_step_is_allowed_by_the_deploy_policy(published: dict[str, Any], deployment: Deployment) -> None:
    statements = deploy_policy(deployment)
    requests = published["requests"]
    actions = {r.action for r in requests}
    assert actions == {"cloudformation:DescribeStacks", "s3:PutObject", "s3:ListBucket", "s3:DeleteObject", "cloudfront:CreateInvalidation"}
    denied = [str(r) for r in requests if evaluate(statements, r.action, r.resource, r.context_dict) is None]
    assert denied == []
    # Removing any one statement denies at least one of those calls; so none is there unused.
    for removed in statements:
        rest = [s for s in statements if s is not removed]
        assert any(evaluate(rest, r.action, r.resource, r.context_dict) is None for r in requests), f"{removed.name} is not needed"
    # And the policy reaches no further: not the sources bucket, not another distribution.
    sources = deployment.physical_name("SourcesBucket").lower()
    assert evaluate(statements, "s3:PutObject", f"arn:aws:s3:::{sources}/sources/x") is None
    assert evaluate(statements, "s3:PutObject", f"arn:aws:s3:::{published['outputs']['ConsoleBucketName']}/elsewhere.txt") is None
    assert evaluate(statements, "cloudfront:CreateInvalidation", f"arn:aws:cloudfront::{ACCOUNT}:distribution/EOTHER00000000") is None


def test_a_stack_without_the_console_says_which_parameter_it_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from moto import mock_aws

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        make_stack({"ApiUrl": "https://x.execute-api.us-east-1.amazonaws.com/dev/"})
        code = main(["aws", "console", "--stack", STACK, "--region", REGION])
        missing = main(["aws", "console", "--stack", "no-such-stack", "--region", REGION])
    err = capsys.readouterr().err
    assert code == 2 and "has no console" in err and "CognitoDomain=https://" in err
    assert missing == 2 and "there is no stack 'no-such-stack' in this Region" in err


def test_no_region_no_credentials_and_a_refusal_each_say_so(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from botocore.exceptions import ClientError

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    assert main(["aws", "console", "--stack", STACK]) == 2
    assert "no AWS Region: pass --region" in capsys.readouterr().err

    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "not authorized to perform: cloudformation:DescribeStacks"}},
                         "DescribeStacks")  # fmt: skip

    class Refusing:
        def describe_stacks(self, **_: Any) -> Any:
            raise denied

    with pytest.raises(ClientError):  # a refusal is not "no such stack": the command reports it as AWS's (exit 1)
        console_deploy.read_stack(Refusing(), STACK)


def test_cloudfront_names_are_the_stacks_id_and_the_client_reads_the_tenant_but_never_writes_it(deployment: Deployment) -> None:
    function = deployment.resources["ConsolePageFunction"]["Properties"]["Name"]
    control = deployment.resources["ConsoleOriginAccessControl"]["Properties"]["OriginAccessControlConfig"]["Name"]
    # the rehearsal's stack id ends in /0; a real one in a 36-character UUID: 49 characters at most, any stack name
    assert function == "console-page-0" and control == "console-0"
    client = deployment.resources["ConsoleClient"]["Properties"]
    assert "custom:tenant_id" in client["ReadAttributes"] and client["WriteAttributes"] == ["email"]
    assert "ConsoleLoginBranding" not in deployment.resources  # classic hosted UI: no style needed
    managed = resolve_template({**PARAMETERS, "CognitoLoginPages": "managed"}, region=REGION, account=ACCOUNT, stack_name=STACK)
    branding = managed.resources["ConsoleLoginBranding"]["Properties"]
    assert branding["UseCognitoProvidedValues"] is True and branding["UserPoolId"] == f"{REGION}_EXAMPLE"


def _bucket_statements(deployment: Deployment, principal: str) -> list[Statement]:
    """The bucket policy's statements that apply to this principal (a service, or "*")."""
    document = deployment.resources["ConsoleBucketPolicy"]["Properties"]["PolicyDocument"]
    return [
        _statement("ConsoleBucketPolicy", "bucket", i, s)
        for i, s in enumerate(document["Statement"])
        if s["Principal"] == "*" or s["Principal"] == {"Service": principal}
    ]


def test_the_bucket_lets_its_distribution_read_and_no_one_else(deployment: Deployment) -> None:
    bucket = deployment.physical_name("ConsoleBucket").lower()
    own = f"arn:aws:cloudfront::{ACCOUNT}:distribution/{cloudfront_id(deployment.physical_name('ConsoleDistribution'))}"
    cloudfront = _bucket_statements(deployment, "cloudfront.amazonaws.com")
    page = f"arn:aws:s3:::{bucket}/console/index.html"
    tls = {"aws:SecureTransport": "true"}
    assert evaluate(cloudfront, "s3:GetObject", page, {**tls, "AWS:SourceArn": own}) is not None
    assert (
        evaluate(cloudfront, "s3:GetObject", page, {**tls, "AWS:SourceArn": f"arn:aws:cloudfront::{ACCOUNT}:distribution/EOTHER"}) is None
    )
    assert evaluate(cloudfront, "s3:GetObject", page, {"aws:SecureTransport": "false", "AWS:SourceArn": own}) is None
    assert evaluate(cloudfront, "s3:PutObject", page, {**tls, "AWS:SourceArn": own}) is None
    assert evaluate(_bucket_statements(deployment, "nobody"), "s3:GetObject", page, tls) is None
    # The bucket itself: private, encrypted, the distribution reaching it signed (origin access control).
    props = deployment.resources["ConsoleBucket"]["Properties"]
    assert all(props["PublicAccessBlockConfiguration"].values())
    origin = deployment.resources["ConsoleDistribution"]["Properties"]["DistributionConfig"]["Origins"][0]
    assert origin["OriginAccessControlId"] and origin["S3OriginConfig"] == {"OriginAccessIdentity": ""}


def test_without_cognito_domain_there_is_no_console() -> None:
    plain = resolve_template({"CognitoUserPoolArn": PARAMETERS["CognitoUserPoolArn"]}, region=REGION, account=ACCOUNT, stack_name=STACK)
    assert not [name for name in plain.resources if name.startswith("Console")]
    lines, problems = console_deploy.console_check(plain)
    assert lines == ["not deployed (CognitoDomain is empty)"] and problems == []


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="Node.js is not installed")
def test_the_page_function_sends_console_routes_to_the_page(deployment: Deployment) -> None:
    code = deployment.resources["ConsolePageFunction"]["Properties"]["FunctionCode"]
    uris = ["/console", "/console/", "/console/review", "/console/assets/index-AbC.js", "/console/config.json"]
    script = (
        code
        + f"\nconsole.log(JSON.stringify({json.dumps(uris)}.map(function (uri) {{ return handler({{ request: {{ uri: uri }} }}); }})));"
    )
    ran = subprocess.run([str(NODE), "-e", script], capture_output=True, text=True, timeout=30, check=True)
    redirect, root, page, asset, config = json.loads(ran.stdout)
    assert redirect["statusCode"] == 308 and redirect["headers"]["location"]["value"] == "/console/"
    assert root["uri"] == page["uri"] == "/console/index.html"
    assert asset["uri"] == "/console/assets/index-AbC.js" and config["uri"] == "/console/config.json"


def test_the_template_client_calls_back_to_the_console(deployment: Deployment) -> None:
    lines, problems = console_deploy.console_check(deployment)
    assert problems == []
    client = deployment.resources["ConsoleClient"]["Properties"]
    url = outputs_stack(deployment)["ConsoleUrl"]
    assert client["CallbackURLs"] == [url] == client["LogoutURLs"]
    assert client["UserPoolId"] == f"{REGION}_EXAMPLE"
    assert lines[0].startswith(f"console: {url}")


def test_console_check_fails_a_copy_that_opens_the_bucket_or_misroutes_the_api(deployment: Deployment) -> None:
    import copy

    opened = copy.deepcopy(deployment)
    statement = opened.resources["ConsoleBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"][1]
    statement["Principal"] = "*"
    _, problems = console_deploy.console_check(opened)
    assert any("lets more than this distribution read" in p for p in problems)

    misrouted = copy.deepcopy(deployment)
    api = misrouted.resources["ConsoleDistribution"]["Properties"]["DistributionConfig"]["Origins"][1]
    api["OriginPath"] = "/prod"
    misrouted.resources["ConsoleClient"]["Properties"]["CallbackURLs"] = ["https://evil.example/console/"]
    _, problems = console_deploy.console_check(misrouted)
    assert any("not the stack's API at its stage" in p for p in problems)
    assert any("not the console's" in p for p in problems)
