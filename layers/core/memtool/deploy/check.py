"""`memtool aws check`: a deploy rehearsal, offline.

moto and cfn-lint know none of the limits that make a first deploy fail or a stack misbehave, so
this reads template.yaml as CloudFormation would deploy it, for one set of parameter values (the
SAM translator and the parameter resolution of :mod:`memtool.deploy.iam`), and checks each function
that would be deployed against Lambda's documented limits:

* unzipped size of a zip function, its code and all its layers together, under 262,144,000 bytes
  (250 MB), measured offline from the installed distributions (:mod:`memtool.deploy.sizes`); an
  image function is built by ``sam build`` and may be 10 GB;
* at most 5 layers; environment variables at most 4 KB; memory 128 to 10,240 MB; timeout 1 to
  900 s;
* the timeout chain (:mod:`memtool.deploy.timeout_chain`): every API-facing function under API
  Gateway's 29 s; a function that runs a state machine synchronously waits connect + read + a
  margin, its client's read timeout is longer than the flow's ``TimeoutSeconds``, which is longer
  than every Task's, and no Task's Lambda outlives its Task;
* the template's ``Rules`` (CloudFormation refuses a stack whose assertions fail) and the
  parameters' allowed values (AllowedValues, AllowedPattern, MinValue and MaxValue);
* fair use: every tenant's request budget on the routes that start work (``POST /ask``,
  ``POST /feedback``: the budget in the function's environment, and the right to spend it), reserved
  concurrency on the ask path (the ``POST /ask`` function and every function its flow runs), and
  access logs on every API stage (a log group of the stack, with a retention). One that is missing
  fails the check; one an override turns off (``TenantRequestsPerMinute=0``,
  ``AskReservedConcurrency=0``, ``ApiAccessLogs=OFF``) is reported as off;
* the console, with ``CognitoDomain`` (:func:`memtool.deploy.console.console_check`): one origin
  for the page and the API stage, the bucket read by this distribution only, the page's
  Content-Security-Policy, and an app client whose only callback is the console's URL.

It prints each function's size, timeout chain and permissions, and the parameters a deploy still
needs, and the command exits 1 when any limit is violated. Deploy tooling: never in a Lambda.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtool.deploy import sizes
from memtool.deploy.timeout_chain import API_GATEWAY_TIMEOUT_SECONDS as API_GATEWAY_TIMEOUT_SECONDS
from memtool.deploy.timeout_chain import ASL_DEFAULT_TIMEOUT_SECONDS as ASL_DEFAULT_TIMEOUT_SECONDS
from memtool.deploy.timeout_chain import CLIENT_MARGIN_SECONDS as CLIENT_MARGIN_SECONDS
from memtool.deploy.timeout_chain import CONNECT_SETTING as CONNECT_SETTING
from memtool.deploy.timeout_chain import READ_SETTING as READ_SETTING
from memtool.deploy.timeout_chain import SYNC_FLOW_VARIABLE as SYNC_FLOW_VARIABLE
from memtool.deploy.timeout_chain import FlowTimeouts as FlowTimeouts
from memtool.deploy.timeout_chain import TaskTimeout as TaskTimeout
from memtool.deploy.timeout_chain import (
    TimeoutChain,
    api_routes,
    describe_chain,
    function_chain,
    read_timeout_chain,
    timeout_chain_problems,
)

MAX_LAYERS = 5
ENV_LIMIT_BYTES = 4 * 1024
MEMORY_RANGE_MB = (128, 10_240)
TIMEOUT_RANGE_SECONDS = (1, 900)
# CloudFormation appends a 13-character unique suffix to a generated physical name; the resolver
# names resources <stack>-<LogicalId>, so the environment's measured size adds it per such value.
PHYSICAL_NAME_SUFFIX = 13

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------- parameters


def parse_overrides(items: Sequence[str]) -> dict[str, str]:
    """``Key=Value`` (as ``sam deploy --parameter-overrides`` takes them), or
    ``ParameterKey=Key,ParameterValue=Value``; one item may hold several separated by spaces."""
    values: dict[str, str] = {}
    for item in (word for text in items for word in _split_words(text)):
        match = re.fullmatch(r"ParameterKey=([^,]+),ParameterValue=(.*)", item)
        if match is None:
            match = re.fullmatch(r"([A-Za-z0-9]+)=(.*)", item)
        if match is None:
            raise ValueError(f"parameter override {item!r} is not Key=Value")
        values[match.group(1)] = match.group(2)
    return values


def _split_words(text: str) -> list[str]:
    import shlex

    return shlex.split(text)


@dataclass(frozen=True)
class ParameterNote:
    name: str
    value: str
    description: str


def parameter_problems(template: Mapping[str, Any], values: Mapping[str, str]) -> list[str]:
    """Values CloudFormation would refuse: outside AllowedValues, not matching AllowedPattern, not a
    number (Type Number), outside MinValue..MaxValue."""
    problems = []
    for name, spec in (template.get("Parameters") or {}).items():
        if name not in values:
            continue
        value = values[name]
        allowed = spec.get("AllowedValues")
        if allowed is not None and value not in [str(v) for v in allowed]:
            problems.append(f"parameter {name}={value!r} is not one of {', '.join(str(v) for v in allowed)}")
        pattern = spec.get("AllowedPattern")
        if pattern and not re.fullmatch(pattern, value):
            problems.append(f"parameter {name}={value!r} does not match {pattern}")
        if spec.get("Type") == "Number":
            try:
                number = float(value)
            except ValueError:
                problems.append(f"parameter {name}={value!r} is not a number")
                continue
            low, high = spec.get("MinValue"), spec.get("MaxValue")
            if (low is not None and number < float(low)) or (high is not None and number > float(high)):
                bounds = f"{'-' if low is None else low}..{'-' if high is None else high}"
                problems.append(f"parameter {name}={value!r} is outside {bounds}")
    return problems


def rule_problems(template: Mapping[str, Any], values: Mapping[str, str]) -> list[str]:
    """The template's Rules assertions that fail for these values (CloudFormation stops there)."""
    problems = []
    for name, rule in (template.get("Rules") or {}).items():
        if "RuleCondition" in rule and not _rule_value(rule["RuleCondition"], values):
            continue
        for assertion in rule.get("Assertions") or []:
            if not _rule_value(assertion["Assert"], values):
                description = " ".join(str(assertion.get("AssertDescription", "")).split())
                problems.append(f"rule {name} fails: {description or assertion['Assert']}")
    return problems


def _rule_value(node: Any, values: Mapping[str, str]) -> Any:
    if isinstance(node, list):
        return [_rule_value(item, values) for item in node]
    if not isinstance(node, dict) or len(node) != 1:
        return node
    ((key, arg),) = node.items()
    if key == "Ref":
        return values.get(arg, "")
    if key == "Fn::Equals":
        left, right = _rule_value(arg, values)
        return str(left) == str(right)
    if key == "Fn::Not":
        return not _rule_value(arg[0], values)
    if key == "Fn::And":
        return all(_rule_value(arg, values))
    if key == "Fn::Or":
        return any(_rule_value(arg, values))
    if key == "Fn::Contains":
        items, value = _rule_value(arg, values)
        return value in items
    raise ValueError(f"rule function {key} is not supported by memtool aws check")


# ---------------------------------------------------------------------------------- fair use

# The routes that start work spend the tenant's request budget (memtool.runtime.budget).
BUDGETED_ROUTES = ("POST /ask", "POST /feedback")
ASK_ROUTE = "POST /ask"
BUDGET_VARIABLE = "MEMTOOL_TENANT_REQUESTS_PER_MINUTE"
BURST_VARIABLE = "MEMTOOL_TENANT_REQUEST_BURST"
BURST_SETTING = "tenant_request_burst"
MEMORY_TABLE_VARIABLE = "MEMTOOL_MEMORY_TABLE"
# The parameter that turns each protection off, and its value then: off by an override is the
# operator's choice (reported); off by the template as it is, or absent, is a problem.
BUDGET_SWITCH = ("TenantRequestsPerMinute", "0")
RESERVED_SWITCH = ("AskReservedConcurrency", "0")
ACCESS_LOGS_SWITCH = ("ApiAccessLogs", "OFF")
MIN_UNRESERVED = 100  # Lambda keeps this much of an account's concurrency unreserved


@dataclass(frozen=True)
class FairUse:
    lines: list[str]  # what the report prints, one per protection
    problems: list[str]


def _switched_off(given: Mapping[str, str], switch: tuple[str, str]) -> bool:
    name, off = switch
    return name in given and str(given[name]).strip().upper() == off.upper()


def _routes_of(source: Mapping[str, Any], deployed: Iterable[str]) -> dict[str, str]:
    """route ("POST /ask") -> the deployed function serving it."""
    return {route: name for name in deployed for route in api_routes(source, name)}


def budget_check(
    deployment: Any, source: Mapping[str, Any], policies: Mapping[str, Any], given: Mapping[str, str]
) -> tuple[str, list[str]]:
    """The request budget on every budgeted route: its numbers, and the right to spend it."""
    from memtool.deploy.iam import evaluate
    from memtool.settings import Settings

    routes = _routes_of(source, deployment.functions())
    served = [(route, routes[route]) for route in BUDGETED_ROUTES if route in routes]
    problems: list[str] = []
    numbers: set[tuple[str, str]] = set()
    off: list[str] = []
    spending: list[str] = []
    for route, name in served:
        env = deployment.environment(name)
        rate = env.get(BUDGET_VARIABLE)
        if rate is None:
            problems.append(
                f"request budget: {name} ({route}) has no {BUDGET_VARIABLE}: one tenant can starve the others (give it {BUDGET_SWITCH[0]})"
            )
            continue
        if str(rate).strip() in ("", "0"):
            off.append(f"{route} ({name})")
            continue
        burst = env.get(BURST_VARIABLE, str(Settings.model_fields[BURST_SETTING].default))
        numbers.add((str(rate), str(burst)))
        spending.append(f"{route} ({name})")
        table = env.get(MEMORY_TABLE_VARIABLE)
        arn = f"arn:{deployment.partition}:dynamodb:{deployment.region}:{deployment.account}:table/{table}"
        if table is None or evaluate(policies.get(name, []), "dynamodb:UpdateItem", arn) is None:
            problems.append(f"request budget: {name} ({route}) may not dynamodb:UpdateItem the memory table, where the budget is kept")
    if off:
        if not _switched_off(given, BUDGET_SWITCH):
            problems.append(f"request budget: off on {', '.join(off)} ({BUDGET_SWITCH[0]}=0 by default): one tenant can starve the others")
        return f"request budget       OFF ({BUDGET_SWITCH[0]}=0): one tenant can starve the others", problems
    if not served:
        problems.append(f"request budget: no function serves {', '.join(BUDGETED_ROUTES)}")
        return "request budget       none", problems
    if not spending:
        return "request budget       MISSING", problems
    spent_by = ", ".join(spending)
    size = "; ".join(f"{rate} requests a minute per tenant, {burst} at once" for rate, burst in sorted(numbers))
    return (
        f"request budget       {size}, spent by {spent_by}; a token bucket per tenant in the memory table "
        "(over it: 429 rate_limited with Retry-After)",
        problems,
    )


def reserved_concurrency_check(
    deployment: Any, source: Mapping[str, Any], chain: TimeoutChain, given: Mapping[str, str]
) -> tuple[str, list[str]]:
    """ReservedConcurrentExecutions on the POST /ask function and every function its flow runs."""
    ask = _routes_of(source, deployment.functions()).get(ASK_ROUTE)
    if ask is None:
        return "reserved concurrency none (no function serves POST /ask)", []
    path = [ask]
    for flow in chain.flows:
        if flow.caller == ask:
            path += [t.function for t in flow.tasks if t.function]
    path = list(dict.fromkeys(path))  # each function once, in the order the flow first runs it
    reserved: dict[str, int | None] = {}
    for name in path:
        value = deployment.resources[name]["Properties"].get("ReservedConcurrentExecutions")
        try:
            reserved[name] = None if value is None else int(value)
        except ValueError:  # a value that is not a number: the parameter check names it
            reserved[name] = None
    problems = [
        f"reserved concurrency: {name} has ReservedConcurrentExecutions 0, which throttles every invocation"
        for name, value in reserved.items()
        if value == 0
    ]
    missing = [name for name, value in reserved.items() if value is None]
    if missing and len(missing) == len(path) and _switched_off(given, RESERVED_SWITCH):
        return f"reserved concurrency OFF ({RESERVED_SWITCH[0]}=0): the ask path shares the account's unreserved pool", problems
    if missing:
        problems.append(
            f"reserved concurrency: {', '.join(missing)} (the ask path) {'has' if len(missing) == 1 else 'have'} no "
            "ReservedConcurrentExecutions: other functions can starve asks, and asks every other function"
        )
    total = sum(v for v in reserved.values() if v)
    each = ", ".join(f"{name} {'none' if value is None else value}" for name, value in reserved.items())
    return (
        f"reserved concurrency {each} ({total} of the account's concurrency; at least {MIN_UNRESERVED} must stay unreserved)",
        problems,
    )


def access_logs_check(deployment: Any, given: Mapping[str, str]) -> tuple[str, list[str]]:
    """Every API stage's access logs: to a log group of the stack, with a retention."""
    groups = {}
    for name, resource in deployment.resources.items():
        if resource["Type"] != "AWS::Logs::LogGroup":
            continue
        group = str(resource["Properties"].get("LogGroupName") or deployment.physical_name(name))
        arn = f"arn:{deployment.partition}:logs:{deployment.region}:{deployment.account}:log-group:{group}"
        groups[arn] = (group, resource["Properties"])
    stages = [r["Properties"] for r in deployment.resources.values() if r["Type"] == "AWS::ApiGateway::Stage"]
    if not stages:
        return "access logs          no API stage", []
    lines, problems = [], []
    for stage in stages:
        label = f"stage {stage.get('StageName', '?')}"
        destination = str((stage.get("AccessLogSetting") or {}).get("DestinationArn") or "")
        if not destination:
            if _switched_off(given, ACCESS_LOGS_SWITCH):
                lines.append(f"{label} OFF ({ACCESS_LOGS_SWITCH[0]}=OFF): no record of who called what")
            else:
                lines.append(f"{label} NONE")
                problems.append(f"access logs: {label} has no AccessLogSetting: no record of who called what (CKV_AWS_76)")
            continue
        found = groups.get(destination.removesuffix(":*"))
        if found is None:
            lines.append(f"{label} -> {destination} (not a log group of this stack)")
            continue
        group, props = found
        retention = props.get("RetentionInDays")
        if retention is None:
            problems.append(f"access logs: log group {group} of {label} has no RetentionInDays: it keeps every line forever")
        kms = ", KMS" if props.get("KmsKeyId") else ""
        lines.append(f"{label} -> log group {group}, retention {retention if retention is not None else 'none'} days{kms}")
    return "access logs          " + "; ".join(lines), problems


def fair_use_check(
    deployment: Any, source: Mapping[str, Any], policies: Mapping[str, Any], chain: TimeoutChain, given: Mapping[str, str]
) -> FairUse:
    lines, problems = [], []
    for line, found in (
        budget_check(deployment, source, policies, given),
        reserved_concurrency_check(deployment, source, chain, given),
        access_logs_check(deployment, given),
    ):
        lines.append(line)
        problems += found
    return FairUse(lines, problems)


# ---------------------------------------------------------------------------------- functions


@dataclass
class FunctionCheck:
    name: str
    package: str  # "zip" or "image"
    size_bytes: int | None  # unzipped code + layers (zip), the payload above the base image (image)
    size_parts: list[str]
    layers: list[str]
    timeout: int
    memory: int
    env_bytes: int
    routes: list[str]
    permissions: list[Any]  # memtool.deploy.iam.Statement
    problems: list[str] = field(default_factory=list)


@dataclass
class CheckReport:
    template: Path
    parameters: dict[str, str]
    needed: list[ParameterNote]
    disabled: list[ParameterNote]
    functions: list[FunctionCheck]
    not_deployed: list[str]
    chain: TimeoutChain | None
    problems: list[str]  # the stack's: rules, parameters, the timeout chain, fair use
    notes: list[str]
    fair_use: list[str] = field(default_factory=list)  # the budget, reserved concurrency, access logs
    console: list[str] = field(default_factory=list)  # where the console is served and signs in

    @property
    def violations(self) -> list[str]:
        return self.problems + [f"{f.name}: {p}" for f in self.functions for p in f.problems]

    @property
    def ok(self) -> bool:
        return not self.violations


def _env_bytes(variables: Mapping[str, Any], stack: str) -> int:
    total = 0
    for key, value in variables.items():
        text = str(value)
        total += len(key.encode()) + len(text.encode())
        total += PHYSICAL_NAME_SUFFIX * text.count(f"{stack}-")
    return total


def _layer_sources(source: Mapping[str, Any], deployment: Any, arns: Sequence[str]) -> list[str]:
    """The template's layer logical ids behind a function's resolved layer ARNs."""
    source_layers = [n for n, r in source["Resources"].items() if r.get("Type") == "AWS::Serverless::LayerVersion"]
    found = []
    for arn in arns:
        translated = next(
            (
                n
                for n, r in deployment.resources.items()
                if r["Type"] == "AWS::Lambda::LayerVersion" and f":layer:{deployment.physical_name(n)}:" in str(arn)
            ),
            None,
        )
        origin = max((s for s in source_layers if translated and translated.startswith(s)), key=len, default=None)
        found.append(origin or str(arn))
    return found


def _function_limits(check: FunctionCheck) -> list[str]:
    problems = []
    if check.size_bytes is not None and check.package == "zip" and check.size_bytes >= sizes.ZIP_LIMIT_BYTES:
        problems.append(f"unzipped {_mb(check.size_bytes)} MB, over Lambda's 250 MB ({sizes.ZIP_LIMIT_BYTES:,} bytes)")
    if check.size_bytes is not None and check.package == "image" and check.size_bytes > sizes.IMAGE_LIMIT_BYTES:
        problems.append(f"image payload {_mb(check.size_bytes)} MB, over Lambda's 10 GB")
    if len(check.layers) > MAX_LAYERS:
        problems.append(f"{len(check.layers)} layers, over Lambda's {MAX_LAYERS}")
    if check.env_bytes > ENV_LIMIT_BYTES:
        problems.append(f"environment variables {check.env_bytes:,} bytes, over Lambda's 4 KB")
    low, high = MEMORY_RANGE_MB
    if not low <= check.memory <= high:
        problems.append(f"MemorySize {check.memory} MB outside {low}..{high}")
    low, high = TIMEOUT_RANGE_SECONDS
    if not low <= check.timeout <= high:
        problems.append(f"Timeout {check.timeout} s outside {low}..{high}")
    return problems


def _mb(size_bytes: int) -> str:
    return f"{size_bytes / sizes.MB:,.1f}"


def run_check(
    template_path: Path,
    overrides: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> CheckReport:
    from memtool.deploy.console import console_check
    from memtool.deploy.iam import policies_of_functions, resolve_template
    from memtool.runtime.template import load_template

    say = progress or (lambda _line: None)
    # The translator logs "unpublished metrics" of its own telemetry, which it never publishes offline.
    logging.getLogger("samtranslator").setLevel(logging.ERROR)
    template_path = template_path.resolve()
    root = template_path.parent
    source = load_template(template_path)
    given = dict(overrides or {})
    values, needed, disabled = _parameter_values(source.get("Parameters") or {}, given)
    problems = parameter_problems(source, {k: v for k, v in values.items() if k not in {n.name for n in needed}})
    problems += rule_problems(source, values)

    say(f"translating {template_path.name} with the SAM translator and resolving it for {len(values)} parameters ...")
    deployment = resolve_template(values, template_path=template_path)
    policies = policies_of_functions(deployment)  # the one translation serves both
    source_functions = [n for n, r in source["Resources"].items() if r.get("Type") == "AWS::Serverless::Function"]
    deployed = set(deployment.functions())
    not_deployed = [n for n in source_functions if n not in deployed]

    chain = read_timeout_chain(deployment, source, root)
    problems += timeout_chain_problems(chain)
    fair_use = fair_use_check(deployment, source, policies, chain, given)
    problems += fair_use.problems
    console, console_problems = console_check(deployment)
    problems += console_problems

    say("measuring the layers and functions from the installed distributions ...")
    rehearsal = _Rehearsal(root, source, deployment, policies, chain, notes=[f"Sizes: {sizes.WHEELS_MAY_DIFFER}."])
    checks = [_function_check(rehearsal, name) for name in source_functions if name in deployed]
    return CheckReport(
        template_path, values, needed, disabled, checks, not_deployed, chain, problems, rehearsal.notes, fair_use.lines, console
    )


def _parameter_values(
    declared: Mapping[str, Any], given: Mapping[str, str]
) -> tuple[dict[str, str], list[ParameterNote], list[ParameterNote]]:
    """The value of every parameter (given, else its default, else a placeholder), the parameters a
    deploy still needs (no default, none given) and those left empty (what that turns off)."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ValueError(f"unknown template parameters: {', '.join(unknown)}")
    # Parameters without a default: a placeholder lets the rehearsal go on; the report lists them.
    needed = [
        ParameterNote(n, "", " ".join(str(s.get("Description", "")).split()))
        for n, s in declared.items()
        if "Default" not in s and n not in given
    ]
    values = {n: str(given[n]) if n in given else str(s["Default"]) for n, s in declared.items() if n in given or "Default" in s}
    for note in needed:
        values[note.name] = _placeholder(declared[note.name], note.name)
    disabled = [
        ParameterNote(n, "", " ".join(str(s.get("Description", "")).split()))
        for n, s in declared.items()
        if s.get("Default") == "" and values.get(n, "") == ""
    ]
    return values, needed, disabled


@dataclass
class _Rehearsal:
    """What every function's check reads: the template as written and as deployed, the policies and
    the timeout chain; the layers measured so far (each once) and the report's notes, which grow."""

    root: Path
    source: Mapping[str, Any]
    deployment: Any
    policies: Mapping[str, Any]
    chain: TimeoutChain | None
    layer_sizes: dict[str, sizes.LayerSize] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _function_check(rehearsal: _Rehearsal, name: str) -> FunctionCheck:
    """One deployed function: its size as measured, its limits, routes, place in the chain and permissions."""
    source, deployment, chain = rehearsal.source, rehearsal.deployment, rehearsal.chain
    props = deployment.resources[name]["Properties"]
    source_props = source["Resources"][name].get("Properties") or {}
    is_image = source_props.get("PackageType") == "Image"
    layers = [] if is_image else _layer_sources(source, deployment, props.get("Layers") or [])
    parts: list[str] = []
    if is_image:
        size = _image_size(rehearsal, name, parts)
    else:
        size = _zip_size(rehearsal, name, source_props, layers, parts)
    variables = (props.get("Environment") or {}).get("Variables") or {}
    check = FunctionCheck(
        name=name,
        package="image" if is_image else "zip",
        size_bytes=size,
        size_parts=parts,
        layers=layers,
        timeout=int(props.get("Timeout", 3)),
        memory=int(props.get("MemorySize", 128)),
        env_bytes=_env_bytes(variables, deployment.stack_name),
        routes=api_routes(source, name),
        permissions=list(rehearsal.policies.get(name, [])),
    )
    check.problems = _function_limits(check)
    if chain is not None and any(" NOT " in line for line in function_chain(chain, name)):
        check.problems.append("the timeout chain is broken here (its chain lines say where)")
    if not is_image:  # a zip function's 250 MB cannot be vouched for with packages left uncounted
        layer_sizes = rehearsal.layer_sizes
        uncounted = sorted({name for layer in layers if layer in layer_sizes for name in layer_sizes[layer].missing})
        if uncounted:
            check.problems.append(
                f"size not fully measured: {', '.join(uncounted)} not installed here "
                "(pip install -e '.[deploy]' installs what the layer ships)"
            )
    return check


def _image_size(rehearsal: _Rehearsal, name: str, parts: list[str]) -> int:
    """An image function's payload above the base image: its requirements, the core package and its handler."""
    root = rehearsal.root
    metadata = rehearsal.source["Resources"][name].get("Metadata") or {}
    dockerfile = root / metadata.get("DockerContext", ".") / metadata.get("Dockerfile", "Dockerfile")
    requirements = dockerfile.parent / "requirements.txt"
    closure = sizes.requirement_closure(requirements) if requirements.is_file() else sizes.Closure()
    package = sizes.layer_package_bytes(root / "layers" / "core") if (root / "layers" / "core").is_dir() else 0
    size = closure.bytes + package + sizes.tree_bytes(dockerfile.parent / "app.py")
    parts.append(f"image built by `sam build` from {dockerfile.relative_to(root)}; payload above the base image, limit 10 GB")
    if closure.missing:
        rehearsal.notes.append(f"{name}: not installed here, not counted: {', '.join(closure.missing)}")
    return size


def _zip_size(rehearsal: _Rehearsal, name: str, source_props: Mapping[str, Any], layers: list[str], parts: list[str]) -> int:
    """A zip function's unzipped size: its code and every layer of this template it uses."""
    resources, layer_sizes, notes = rehearsal.source["Resources"], rehearsal.layer_sizes, rehearsal.notes
    code = sizes.tree_bytes(rehearsal.root / str(source_props.get("CodeUri", "")))
    size = code
    parts.append(f"code {_mb(code)} MB")
    for layer in layers:
        if layer not in resources:  # a layer from outside this template
            parts.append(f"{layer} not measured")
            notes.append(f"{name}: {layer} is not a layer of this template: its size is not counted")
            continue
        if layer not in layer_sizes:
            content = rehearsal.root / str(resources[layer]["Properties"]["ContentUri"])
            layer_sizes[layer] = sizes.measure_layer(layer, content)
            if layer_sizes[layer].missing:
                notes.append(f"{layer}: not installed here, not counted: {', '.join(layer_sizes[layer].missing)}")
        size += layer_sizes[layer].bytes
        parts.append(f"{layer} {_mb(layer_sizes[layer].bytes)} MB")
    return size


def _placeholder(spec: Mapping[str, Any], name: str) -> str:
    if "cognito" in str(spec.get("AllowedPattern", "")):
        return "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_EXAMPLE"
    return f"<{name}>"


# ---------------------------------------------------------------------------------- output


def render(report: CheckReport) -> str:
    lines = [f"memtool aws check: {report.template}"]
    given = ", ".join(f"{k}={v}" for k, v in report.parameters.items() if v and k not in {n.name for n in report.needed})
    lines.append(f"parameters: {given}")
    if report.needed:
        lines.append("a deploy still needs (no default):")
        lines += [f"  {n.name}: {n.description}" for n in report.needed]
    if report.disabled:
        lines.append("left empty (what that turns off):")
        lines += [f"  {n.name}: {n.description}" for n in report.disabled]
    lines.append("")
    deployed = len(report.functions)
    skipped = f"; not deployed with these parameters: {', '.join(report.not_deployed)}" if report.not_deployed else ""
    lines.append(f"functions ({deployed} deployed{skipped}):")
    for check in report.functions:
        lines += _render_function(check, report.chain)
    if report.chain is not None:
        lines.append("")
        lines.append("timeout chain:")
        lines += [f"  {line}" for line in describe_chain(report.chain)]
    if report.fair_use:
        lines.append("")
        lines.append("fair use:")
        lines += [f"  {line}" for line in report.fair_use]
    if report.console:
        lines.append("")
        lines.append("console:")
        lines += [f"  {line}" for line in report.console]
    lines.append("")
    lines += [f"note: {n}" for n in report.notes]
    violations = report.violations
    if violations:
        lines.append(f"FAILED: {len(violations)} problem(s)")
        lines += [f"  - {v}" for v in violations]
    else:
        lines.append(f"OK: every deployed function is within Lambda's limits and the timeout chain holds ({deployed} functions)")
    return "\n".join(lines) + "\n"


def _render_function(check: FunctionCheck, chain: TimeoutChain | None) -> list[str]:
    """One function's block of the report: verdict, size, limits, routes, chain, permissions, problems."""
    lines = []
    verdict = "OK" if not check.problems else "NOT OK"
    if check.package == "zip":
        parts = " + ".join(check.size_parts)
        size = f"unzipped {_mb(check.size_bytes or 0)} of 250 MB ({parts}; {len(check.layers)} of {MAX_LAYERS} layers)"
    else:
        size = f"image ~{_mb(check.size_bytes or 0)} MB ({check.size_parts[0]})"
    lines.append(f"{check.name}  {verdict}")
    lines.append(f"  size        {size}")
    lines.append(
        f"  limits      timeout {check.timeout} s (max 900), memory {check.memory} MB (128..10240), "
        f"environment {check.env_bytes:,} of 4,096 bytes"
    )
    if check.routes:
        lines.append(f"  routes      {', '.join(check.routes)}")
    if chain is not None:
        lines += [f"  chain       {line}" for line in function_chain(chain, check.name)]
    lines.append("  permissions")
    for statement in check.permissions:
        if statement.managed:
            lines.append(f"    managed {statement.managed}: {', '.join(statement.actions)}")
        else:
            effect = "" if statement.effect == "Allow" else f"{statement.effect} "
            lines.append(f"    {statement.name}: {effect}{', '.join(statement.actions)} on {', '.join(statement.resources)}")
    lines += [f"  ! {p}" for p in check.problems]
    return lines
