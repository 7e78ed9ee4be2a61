"""The console on AWS: what `memtool aws check` verifies of it, and `memtool aws console`, the step
that publishes it (docs/deploying.md, "The console").

With ``CognitoDomain`` set, template.yaml deploys a private bucket, a CloudFront distribution that
serves the bucket's ``console/`` at ``/console/`` and the API stage at every other path (one
origin: the page calls ``/ask`` as it does locally), and a Cognito app client whose callback is
the console's URL. The files are not in the stack: :func:`publish` uploads the committed build
(``memtool/runtime/console_files``) with each file's type and cache rule, writes the
``config.json`` that switches the page from the local sign-in form to Cognito's hosted sign-in,
deletes what an older build left, and invalidates the distribution's copy.

The clients are boto3's, passed in; the command makes them from the caller's credentials, which
need the stack's ``ConsoleDeployPolicyArn`` and nothing else. Deploy tooling: never in a Lambda.
"""

from __future__ import annotations

import json
import mimetypes
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtool.deploy.iam import cloudfront_id, rest_api_id
from memtool.runtime.console import CONSOLE_DIR, CONTENT_SECURITY_POLICY, CONTENT_TYPES, cache_control

PREFIX = "console/"
# The outputs template.yaml gives a stack deployed with CognitoDomain (its Outputs section).
OUTPUTS = {
    "url": "ConsoleUrl",
    "bucket": "ConsoleBucketName",
    "distribution_id": "ConsoleDistributionId",
    "client_id": "ConsoleClientId",
    "sign_in_domain": "ConsoleSignInDomain",
}
DEFAULT_ROLES_CLAIM = "cognito:groups"  # Settings.roles_claim; the template sets no other
SCOPES = ("openid", "email", "profile")
Progress = Callable[[str], None]


class ConsoleNotDeployed(ValueError):
    """The stack has no console (deployed without CognitoDomain), or is not there at all."""


@dataclass(frozen=True)
class ConsoleStack:
    """What a deployed stack says about its console (its outputs and TenantClaim)."""

    url: str
    bucket: str
    distribution_id: str
    client_id: str
    sign_in_domain: str
    tenant_claim: str = "custom:tenant_id"


def read_stack(cloudformation: Any, stack_name: str) -> ConsoleStack:
    """The console's outputs of ``stack_name`` (``cloudformation:DescribeStacks``)."""
    from botocore.exceptions import ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:  # "Stack with id X does not exist" is the one answer that means no stack
        if "does not exist" not in str(exc):
            raise  # refused (AccessDenied, throttled): the caller's problem, exit 1
        raise ConsoleNotDeployed(f"there is no stack {stack_name!r} in this Region ({exc})") from exc
    stack = stacks[0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs") or []}
    missing = [key for key in OUTPUTS.values() if not outputs.get(key)]
    if missing:
        raise ConsoleNotDeployed(
            f"stack {stack_name!r} has no console (no output {', '.join(missing)}): deploy it with the parameter "
            'CognitoDomain=https://<your user pool\'s domain> (docs/deploying.md, "The console")'
        )
    parameters = {p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters") or []}
    values = {field_name: outputs[key] for field_name, key in OUTPUTS.items()}
    return ConsoleStack(**values, tenant_claim=parameters.get("TenantClaim") or "custom:tenant_id")


def console_config(stack: ConsoleStack) -> dict[str, Any]:
    """The page's config.json: sign in with Cognito's hosted sign-in, authorization code + PKCE."""
    return {
        "sign_in": "cognito",
        "domain": stack.sign_in_domain.rstrip("/"),
        "client_id": stack.client_id,
        "redirect_uri": stack.url,
        "scopes": list(SCOPES),
        "tenant_claim": stack.tenant_claim,
        "roles_claim": DEFAULT_ROLES_CLAIM,
    }


@dataclass
class PublishReport:
    uploaded: list[str] = field(default_factory=list)
    uploaded_bytes: int = 0
    deleted: list[str] = field(default_factory=list)
    invalidation_id: str | None = None


def build_files(files_dir: Path = CONSOLE_DIR) -> list[Path]:
    """The files of the committed build, index.html first to check it is there."""
    index = files_dir / "index.html"
    if not index.is_file():
        raise ConsoleNotDeployed(f"the console is not built ({index} is missing): run `npm ci && npm run build` in console/")
    return sorted(
        (p for p in files_dir.rglob("*") if p.is_file() and p.name != "config.json"), key=lambda p: p.relative_to(files_dir).as_posix()
    )


def cache_rule(key: str) -> str:
    """The local runtime's Cache-Control for the file under ``console/`` (runtime.console.cache_control)."""
    return cache_control(key.removeprefix(PREFIX))


def publish(
    stack: ConsoleStack,
    s3: Any,
    cloudfront: Any,
    files_dir: Path = CONSOLE_DIR,
    progress: Progress | None = None,
) -> PublishReport:
    """Upload the build and its config.json, delete files no build has any more, invalidate the copy."""
    say = progress or (lambda _line: None)
    report = PublishReport()
    files = build_files(files_dir)
    say(f"uploading {len(files)} console files to s3://{stack.bucket}/{PREFIX} ...")
    # Assets first, the page last: a viewer never gets a page whose assets are not there yet.
    ordered = sorted(files, key=lambda p: p.name == "index.html")
    for path in ordered:
        key = PREFIX + path.relative_to(files_dir).as_posix()
        body = path.read_bytes()
        _put(s3, stack.bucket, key, body)
        report.uploaded.append(key)
        report.uploaded_bytes += len(body)
    config = (json.dumps(console_config(stack), indent=2) + "\n").encode()
    _put(s3, stack.bucket, PREFIX + "config.json", config)
    report.uploaded.append(PREFIX + "config.json")
    report.uploaded_bytes += len(config)

    stale = sorted(set(_listed(s3, stack.bucket)) - set(report.uploaded))
    for start in range(0, len(stale), 1000):  # DeleteObjects takes 1,000 keys a call
        batch = stale[start : start + 1000]
        s3.delete_objects(Bucket=stack.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
    report.deleted = stale
    if stale:
        say(f"deleted {len(stale)} files an older build left")

    say(f"invalidating /console/* on distribution {stack.distribution_id} ...")
    answer = cloudfront.create_invalidation(
        DistributionId=stack.distribution_id,
        InvalidationBatch={"Paths": {"Quantity": 2, "Items": ["/console", "/console/*"]}, "CallerReference": f"memtool-{time.time_ns()}"},
    )
    report.invalidation_id = answer["Invalidation"]["Id"]
    return report


def _put(s3: Any, bucket: str, key: str, body: bytes) -> None:
    kind = CONTENT_TYPES.get(Path(key).suffix) or mimetypes.guess_type(key)[0] or "application/octet-stream"
    s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType=kind, CacheControl=cache_rule(key))


def _listed(s3: Any, bucket: str) -> Iterable[str]:
    token: str | None = None
    while True:
        page = s3.list_objects_v2(Bucket=bucket, Prefix=PREFIX, **({"ContinuationToken": token} if token else {}))
        yield from (item["Key"] for item in page.get("Contents") or [])
        if not page.get("IsTruncated"):
            return
        token = page["NextContinuationToken"]


def render_publish(stack: ConsoleStack, report: PublishReport) -> str:
    lines = [
        f"published the console: {len(report.uploaded)} files, {report.uploaded_bytes:,} bytes, to s3://{stack.bucket}/{PREFIX}",
        f"deleted: {len(report.deleted)} files of an older build" if report.deleted else "deleted: nothing (no older files)",
        f"invalidation: {report.invalidation_id} on {stack.distribution_id} (CloudFront serves the new files in a minute or two)",
        f"sign in at: {stack.url} (Cognito: {stack.sign_in_domain}, app client {stack.client_id})",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- aws check


def console_check(deployment: Any) -> tuple[list[str], list[str]]:
    """The report's console lines and problems for a resolved deployment (``memtool aws check``).

    Checked: one origin for the page and the API (the stack's API at its stage, uncached, every
    viewer header but Host), the page's paths from the bucket through the page function with the
    console's headers, whose connect-src allows the sign-in domain; the bucket read by this
    distribution only; an app client with no secret, the code flow only and the console's URL as
    its only callback."""
    resources: Mapping[str, Any] = deployment.resources
    if "ConsoleDistribution" not in resources:
        return ["not deployed (CognitoDomain is empty)"], []
    props = lambda name: resources[name]["Properties"]  # noqa: E731
    config = props("ConsoleDistribution")["DistributionConfig"]
    domain = deployment.parameters.get("CognitoDomain", "")
    url = f"https://{_distribution_domain(deployment)}/console/"
    problems: list[str] = []
    origins = {o["Id"]: o for o in config.get("Origins") or []}
    default = config.get("DefaultCacheBehavior") or {}
    api = origins.get(default.get("TargetOriginId", ""))
    api_host = f"{rest_api_id('MemtoolApi')}.execute-api.{deployment.region}."
    if (
        api is None
        or not str(api.get("DomainName", "")).startswith(api_host)
        or api.get("OriginPath") != f"/{deployment.parameters.get('Stage')}"
    ):
        problems.append("console: the distribution's default behaviour is not the stack's API at its stage")
    if default.get("CachePolicyId") != "4135ea2d-6df8-44a3-9df3-4b5a84be39ad":
        problems.append("console: the API behind the distribution is cached (its cache policy is not CachingDisabled)")
    if default.get("OriginRequestPolicyId") != "b689b0a8-53d0-40ab-baf2-68738e2966ac":
        problems.append("console: the API origin does not get the viewer's headers but Host (AllViewerExceptHostHeader)")
    behaviours = {b["PathPattern"]: b for b in config.get("CacheBehaviors") or []}
    for pattern in ("/console", "/console/*"):
        behaviour = behaviours.get(pattern)
        if behaviour is None or "S3OriginConfig" not in origins.get(behaviour.get("TargetOriginId", ""), {}):
            problems.append(f"console: {pattern} is not served from the console bucket")
        elif not behaviour.get("FunctionAssociations"):
            problems.append(f"console: {pattern} has no page function (a console route would be a 403)")
    policy = props("ConsoleHeadersPolicy")["ResponseHeadersPolicyConfig"]["SecurityHeadersConfig"]["ContentSecurityPolicy"]
    csp = " ".join(str(policy["ContentSecurityPolicy"]).split())
    if csp != CONTENT_SECURITY_POLICY.replace("connect-src 'self'", f"connect-src 'self' {domain}"):
        problems.append("console: the distribution's Content-Security-Policy is not the local console's with the sign-in domain")
    problems += _bucket_problems(deployment)
    client = props("ConsoleClient")
    if client.get("GenerateSecret") or client.get("AllowedOAuthFlows") != ["code"]:
        problems.append("console: the app client must be public (no secret) with the code flow only")
    if client.get("CallbackURLs") != [url]:
        problems.append(f"console: the app client's callback is {client.get('CallbackURLs')}, not the console's {url}")
    lines = [
        f"console: {url} (the API on the same origin: /ask ... to stage {deployment.parameters.get('Stage')})",
        f"sign-in: {domain}, app client {resources['ConsoleClient']['Properties'].get('ClientName')} (code flow with PKCE, callback {url})",
        "files: publish them after each deploy with `memtool aws console --stack <stack>` (ConsoleDeployPolicyArn has what it needs)",
    ]
    return lines, problems


def _distribution_domain(deployment: Any) -> str:
    return cloudfront_id(deployment.physical_name("ConsoleDistribution")).lower() + ".cloudfront.net"


def _bucket_problems(deployment: Any) -> list[str]:
    """The bucket may be read by this distribution's service principal only, and never written."""
    statements = deployment.resources["ConsoleBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    allows = [s for s in statements if s.get("Effect") == "Allow"]
    own = f"distribution/{cloudfront_id(deployment.physical_name('ConsoleDistribution'))}"
    problems = []
    for statement in allows:
        principal = statement.get("Principal")
        source = ((statement.get("Condition") or {}).get("StringEquals") or {}).get("AWS:SourceArn", "")
        actions = statement.get("Action")
        if (
            principal != {"Service": "cloudfront.amazonaws.com"}
            or not str(source).endswith(own)
            or actions not in ("s3:GetObject", ["s3:GetObject"])
        ):
            problems.append(f"console: the bucket policy's {statement.get('Sid')} lets more than this distribution read the files")
    if not allows:
        problems.append("console: the bucket policy lets no distribution read the files")
    return problems
