"""Alarms and the dashboard: every API route, DLQ and flow is watched, and every alarm can notify.

The per-route alarms are generated from the template's own API events: :func:`route_alarms` is the
one definition (p90 latency and 5xx rate, per ApiName, Stage, Resource and Method), and
:func:`function_alarms` gives every function its Errors alarm under the function's own condition.
The template holds their output, and these tests fail when a route or function has no alarm, an
alarm has no route or function, or an alarm differs from its definition. After adding a route, regenerate the block with

    python tests/contract/test_alarms.py > /tmp/generated.yaml

and paste it over the "generated alarms" and "dashboard" blocks of template.yaml. The dashboard's body is checked
as CloudWatch receives it: resolved for a set of parameters (memtool.deploy.iam) and parsed as JSON.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
COGNITO = {"CognitoUserPoolArn": "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_EXAMPLE"}
EVERYTHING = {
    **COGNITO,
    "OpenSearchEndpoint": "https://abc123.us-east-1.aoss.amazonaws.com",
    "OpenSearchResourceArn": "arn:aws:aoss:us-east-1:123456789012:collection/abc123",
    "RedshiftSecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:redshift-AbCdEf",
    "E2BApiKeySecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:e2b-AbCdEf",
    "AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:memtool-alarms",
}
# p90 latency thresholds (ms): the synchronous flow and a diagnosis may take most of the 28 s a
# function has; every other route reads or writes a few records.
SLOW_ROUTES = {("POST", "/ask"): 20_000, ("POST", "/diagnose"): 20_000}
LATENCY_P90_MS = 3_000
ERROR_RATE = 0.05  # 5XXError's Average is the share of requests that got a 5xx
NOTIFY = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}


def load() -> dict[str, Any]:
    from memtool.runtime.template import load_template

    return copy.deepcopy(load_template(TEMPLATE_PATH))


# ---------------------------------------------------------------------------------- the definition


def api_routes(template: dict[str, Any]) -> list[tuple[str, str]]:
    """(METHOD, /path) of every Api event of every function, in template order."""
    routes = []
    for resource in template["Resources"].values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for event in (resource["Properties"].get("Events") or {}).values():
            if event["Type"] == "Api":
                routes.append((event["Properties"]["Method"].upper(), event["Properties"]["Path"]))
    return routes


def route_id(method: str, path: str) -> str:
    """POST /fewshots/{id}/approve -> PostFewshotsIdApprove (a logical id part)."""
    words = [method.title()] + [w.title() for w in re.findall(r"[A-Za-z0-9]+", path)]
    return "".join(words)


def route_alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two alarms of every API route, as template resources."""
    alarms: dict[str, dict[str, Any]] = {}
    for method, path in api_routes(template):
        dimensions = [
            {"Name": "ApiName", "Value": {"Fn::Sub": "${AWS::StackName}-api"}},
            {"Name": "Stage", "Value": {"Ref": "Stage"}},
            {"Name": "Resource", "Value": path},
            {"Name": "Method", "Value": method},
        ]
        common = {
            "Namespace": "AWS/ApiGateway",
            "Dimensions": dimensions,
            "Period": 300,
            "EvaluationPeriods": 3,
            "DatapointsToAlarm": 2,
            "ComparisonOperator": "GreaterThanThreshold",
            "TreatMissingData": "notBreaching",
            "AlarmActions": NOTIFY,
            "OKActions": NOTIFY,
        }
        threshold = SLOW_ROUTES.get((method, path), LATENCY_P90_MS)
        alarms[f"Api{route_id(method, path)}LatencyAlarm"] = {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmDescription": f"{method} {path}: p90 latency over {threshold:,} ms in 2 of 3 periods of 5 minutes.",
                "MetricName": "Latency",
                "ExtendedStatistic": "p90",
                "Threshold": threshold,
                **common,
            },
        }
        alarms[f"Api{route_id(method, path)}5xxAlarm"] = {
            "Type": "AWS::CloudWatch::Alarm",
            "Properties": {
                "AlarmDescription": f"{method} {path}: over {ERROR_RATE:.0%} of requests answered 5xx in 2 of 3 periods of 5 minutes.",
                "MetricName": "5XXError",
                "Statistic": "Average",
                "Threshold": ERROR_RATE,
                **common,
            },
        }
    return alarms


# What a function's errors mean beyond "it failed", where that is not obvious.
ERROR_CONSEQUENCES = {"IndexerFunction": "saved memories may not be searchable yet"}


def function_alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An Errors alarm per function, deployed exactly when the function is (its Condition)."""
    alarms: dict[str, dict[str, Any]] = {}
    for name, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        consequence = ERROR_CONSEQUENCES.get(name)
        alarm: dict[str, Any] = {"Type": "AWS::CloudWatch::Alarm"}
        if resource.get("Condition"):
            alarm["Condition"] = resource["Condition"]
        alarm["Properties"] = {
            "AlarmDescription": f"{name} reported errors" + (f"; {consequence}." if consequence else "."),
            "Namespace": "AWS/Lambda",
            "MetricName": "Errors",
            "Dimensions": [{"Name": "FunctionName", "Value": {"Ref": name}}],
            "Statistic": "Sum",
            "Period": 300,
            "EvaluationPeriods": 1,
            "Threshold": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "TreatMissingData": "notBreaching",
            "AlarmActions": NOTIFY,
            "OKActions": NOTIFY,
        }
        alarms[f"{name}ErrorsAlarm"] = alarm
    return alarms


def generated_alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {**function_alarms(template), **route_alarms(template)}


def render_function_alarms(alarms: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for name, alarm in alarms.items():
        props = alarm["Properties"]
        lines += [f"  {name}:", "    Type: AWS::CloudWatch::Alarm"]
        if "Condition" in alarm:
            lines.append(f"    Condition: {alarm['Condition']}")
        lines += [
            "    Properties:",
            f"      AlarmDescription: \"{props['AlarmDescription']}\"",
            "      Namespace: AWS/Lambda",
            "      MetricName: Errors",
            f"      Dimensions: [{{ Name: FunctionName, Value: !Ref {props['Dimensions'][0]['Value']['Ref']} }}]",
            "      Statistic: Sum",
            "      Threshold: 1",
            "      ComparisonOperator: GreaterThanOrEqualToThreshold",
            "      Period: 300",
            "      EvaluationPeriods: 1",
            "      TreatMissingData: notBreaching",
            "      AlarmActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]",
            "      OKActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]",
            "",
        ]
    return lines


def render_yaml(template: dict[str, Any]) -> str:
    """The block of template.yaml that holds the generated alarms."""
    lines = [
        "  # ---------------------------------------------------------------- generated alarms",
        "  # An Errors alarm per function and a p90-latency and a 5xx-rate alarm per API route, generated",
        "  # from the functions and their API events above by tests/contract/test_alarms.py, which fails",
        "  # when one is missing, stray or edited: regenerate, do not edit by hand.",
        *render_function_alarms(function_alarms(template)),
    ]
    for name, alarm in route_alarms(template).items():
        props = alarm["Properties"]
        dims = props["Dimensions"]
        lines += [
            f"  {name}:",
            "    Type: AWS::CloudWatch::Alarm",
            "    Properties:",
            f"      AlarmDescription: \"{props['AlarmDescription']}\"",
            "      Namespace: AWS/ApiGateway",
            f"      MetricName: {props['MetricName']}",
            "      Dimensions:",
            '        - { Name: ApiName, Value: !Sub "${AWS::StackName}-api" }',
            "        - { Name: Stage, Value: !Ref Stage }",
            f"        - {{ Name: Resource, Value: \"{dims[2]['Value']}\" }}",
            f"        - {{ Name: Method, Value: {dims[3]['Value']} }}",
        ]
        if "ExtendedStatistic" in props:
            lines.append(f"      ExtendedStatistic: {props['ExtendedStatistic']}")
        else:
            lines.append(f"      Statistic: {props['Statistic']}")
        lines += [
            f"      Threshold: {props['Threshold']}",
            "      ComparisonOperator: GreaterThanThreshold",
            "      Period: 300",
            "      EvaluationPeriods: 3",
            "      DatapointsToAlarm: 2",
            "      TreatMissingData: notBreaching",
            "      AlarmActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]",
            "      OKActions: !If [HasAlarmTopic, [!Ref AlarmTopicArn], !Ref AWS::NoValue]",
            "",
        ]
    return "\n".join(lines)


def render_dashboard_yaml(template: dict[str, Any]) -> str:
    """The dashboard resource: per-route latency and 5xx rate, dead letters, flow failures, and every
    alarm's state. The conditional resources join through Fn::If'd variables of the Fn::Sub."""
    routes = api_routes(template)
    alarms = alarms_of(template)
    generated = generated_alarms(template)
    always = [n for n, r in alarms.items() if r.get("Condition") is None and n not in generated]
    always += [n for n, r in generated.items() if r.get("Condition") is None]
    conditional = [n for n, r in {**alarms, **generated}.items() if r.get("Condition") == "HasOpenSearch"]
    stage = '"ApiName", "${AWS::StackName}-api", "Stage", "${Stage}"'

    def route_metrics(metric: str, stat: str) -> list[str]:
        return [
            f'              ["AWS/ApiGateway", "{metric}", {stage}, "Resource", "{path}", "Method", "{method}", '
            f'{{"stat": "{stat}", "label": "{method} {path}"}}]'
            for method, path in routes
        ]

    def metric_widget(x: int, y: int, title: str, lines: list[str], tail: str = "") -> list[str]:
        return [
            f'          {{"type": "metric", "x": {x}, "y": {y}, "width": 12, "height": 8, "properties": {{"title": "{title}", '
            '"region": "${AWS::Region}", "view": "timeSeries", "stacked": false, "period": 300, "metrics": [',
            ",\n".join(lines) + tail,
            "          ]}},",
        ]

    body = [
        '          {"widgets": [',
        '          {"type": "text", "x": 0, "y": 0, "width": 24, "height": 1, "properties": {"markdown": '
        '"## memtool ${Stage}: the API per route, dead letters, flow failures and every alarm"}},',
        *metric_widget(0, 1, "p90 latency per route (ms)", route_metrics("Latency", "p90")),
        *metric_widget(12, 1, "5xx rate per route", route_metrics("5XXError", "Average")),
        *metric_widget(
            0, 9, "Dead-letter queue depth",
            ['              ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${DiagnoseDeadLetterQueue.QueueName}", '
             '{"stat": "Maximum", "label": "diagnose"}]'],
            "${IndexerQueueMetric}",
        ),
        *metric_widget(
            12, 9, "Flow executions failed or timed out",
            ['              ["AWS/States", "ExecutionsFailed", "StateMachineArn", "${AskFlow}", {"stat": "Sum", "label": "AskFlow failed"}]',
             '              ["AWS/States", "ExecutionsTimedOut", "StateMachineArn", "${AskFlow}", {"stat": "Sum", "label": "AskFlow timed out"}]',
             '              ["AWS/States", "ExecutionsFailed", "StateMachineArn", "${MaintenanceFlow}", {"stat": "Sum", "label": "MaintenanceFlow failed"}]'],
        ),
        '          {"type": "alarm", "x": 0, "y": 17, "width": 24, "height": 6, "properties": {"title": "Alarms", "alarms": [',
        ",\n".join(f'              "${{{name}.Arn}}"' for name in always) + "${ConditionalAlarms}",
        "          ]}}",
        "          ]}",
    ]  # fmt: skip
    conditional_arns = ", ".join(f'"${{{name}.Arn}}"' for name in conditional)
    lines = [
        "  # ---------------------------------------------------------------- dashboard",
        "  # Generated by tests/contract/test_alarms.py (render_dashboard_yaml), which parses the body as",
        "  # CloudWatch would: regenerate, do not edit by hand.",
        "  MemtoolDashboard:",
        "    Type: AWS::CloudWatch::Dashboard",
        "    Properties:",
        '      DashboardName: !Sub "${AWS::StackName}-${Stage}"',
        "      DashboardBody: !Sub",
        "        - |-",
        *body,
        "        - IndexerQueueMetric: !If",
        "            - HasOpenSearch",
        """            - !Sub ', ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${IndexerDeadLetterQueue.QueueName}", {"stat": "Maximum", "label": "indexer"}]'""",
        '            - ""',
        "          ConditionalAlarms: !If",
        "            - HasOpenSearch",
        f"            - !Sub ', {conditional_arns}'",
        '            - ""',
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- checks


def route_alarm_problems(template: dict[str, Any]) -> list[str]:
    """Routes or functions without their alarms, alarms without a route or function, alarms that
    differ from their definition."""
    problems = []
    expected = generated_alarms(template)
    present = {
        name: resource
        for name, resource in template["Resources"].items()
        if resource.get("Type") == "AWS::CloudWatch::Alarm"
        and (
            (resource.get("Properties") or {}).get("Namespace") == "AWS/ApiGateway"
            or (resource.get("Properties") or {}).get("MetricName") == "Errors"
        )
    }
    for name, alarm in expected.items():
        if name not in present:
            problems.append(f"{alarm['Properties']['AlarmDescription'].split(':')[0]}: no {name}")
        elif present[name] != alarm:
            problems.append(f"{name} differs from its definition")
    problems += [f"{name} watches no API route or function" for name in present if name not in expected]
    return problems


def alarms_of(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: r for n, r in template["Resources"].items() if r.get("Type") == "AWS::CloudWatch::Alarm"}


def test_every_api_route_has_a_p90_latency_and_a_5xx_alarm() -> None:
    template = load()

    assert len(api_routes(template)) >= 15
    assert route_alarm_problems(template) == []
    alarms = alarms_of(template)
    ask = alarms["ApiPostAskLatencyAlarm"]["Properties"]
    assert (ask["ExtendedStatistic"], ask["Threshold"]) == ("p90", 20_000)
    assert [d["Value"] for d in ask["Dimensions"][2:]] == ["/ask", "POST"]
    forget = alarms["ApiDeleteMemoriesId5xxAlarm"]["Properties"]
    assert (forget["MetricName"], forget["Statistic"], forget["Threshold"]) == ("5XXError", "Average", 0.05)
    assert [d["Value"] for d in forget["Dimensions"][2:]] == ["/memories/{id}", "DELETE"]


def test_a_new_route_without_alarms_or_a_stray_alarm_is_reported() -> None:
    # Given a copy with one more route, one alarm removed and one changed
    template = load()
    template["Resources"]["AskFunction"]["Properties"]["Events"]["Health"] = {
        "Type": "Api",
        "Properties": {"RestApiId": {"Ref": "MemtoolApi"}, "Path": "/health", "Method": "get"},
    }
    del template["Resources"]["ApiGetMemoriesSearch5xxAlarm"]
    template["Resources"]["ApiPostFeedbackLatencyAlarm"]["Properties"]["Threshold"] = 99_999

    # When checked, Then each is reported
    problems = route_alarm_problems(template)
    assert "GET /health: no ApiGetHealthLatencyAlarm" in problems
    assert "GET /health: no ApiGetHealth5xxAlarm" in problems
    assert "GET /memories/search: no ApiGetMemoriesSearch5xxAlarm" in problems
    assert "ApiPostFeedbackLatencyAlarm differs from its definition" in problems

    # And an alarm whose route is gone is reported too
    del template["Resources"]["MemoryWriteFunction"]["Properties"]["Events"]["EndSession"]
    assert "ApiDeleteSessionsId5xxAlarm watches no API route or function" in route_alarm_problems(template)

    # And a function alarm deployed without its function's condition is a difference too
    del template["Resources"]["IndexerFunctionErrorsAlarm"]["Condition"]
    assert "IndexerFunctionErrorsAlarm differs from its definition" in route_alarm_problems(template)


def test_the_template_holds_the_generated_blocks_verbatim() -> None:
    # Hand edits to the generated alarms or dashboard are caught: regenerate instead.
    template, text = load(), TEMPLATE_PATH.read_text(encoding="utf-8")

    assert render_yaml(template) in text
    assert render_dashboard_yaml(template) in text


def test_the_api_publishes_the_per_route_metrics_the_alarms_read() -> None:
    # Resource and Method dimensions exist only with detailed metrics on the stage.
    (settings,) = load()["Resources"]["MemtoolApi"]["Properties"]["MethodSettings"]
    assert (settings["ResourcePath"], settings["HttpMethod"], settings["MetricsEnabled"]) == ("/*", "*", True)


def test_every_alarm_notifies_the_topic_when_one_is_given() -> None:
    alarms = alarms_of(load())

    assert len(alarms) >= 40
    for name, alarm in alarms.items():
        props = alarm["Properties"]
        assert props["AlarmActions"] == NOTIFY, name
        assert props["OKActions"] == NOTIFY, name


def test_the_dead_letter_queues_and_flows_are_alarmed_with_their_resources() -> None:
    alarms = alarms_of(load())

    def watching(namespace: str, metric: str) -> dict[str, str | None]:
        found = {}
        for alarm in alarms.values():
            props = alarm["Properties"]
            stats = [m["MetricStat"]["Metric"] for m in props.get("Metrics", []) if "MetricStat" in m]
            for metric_spec in [props, *stats]:
                if metric_spec.get("Namespace") == namespace and metric_spec.get("MetricName") == metric:
                    value = metric_spec["Dimensions"][0]["Value"]
                    target = value.get("Ref") or value.get("Fn::GetAtt", [None])[0]
                    found[target] = alarm.get("Condition")
        return found

    # Each alarm exists exactly when what it watches does.
    assert watching("AWS/SQS", "ApproximateNumberOfMessagesVisible") == {
        "DiagnoseDeadLetterQueue": None,
        "IndexerDeadLetterQueue": "HasOpenSearch",
    }
    assert watching("AWS/States", "ExecutionsFailed") == {"AskFlow": None, "MaintenanceFlow": None}
    template = load()
    assert template["Resources"]["IndexerDeadLetterQueue"]["Condition"] == "HasOpenSearch"
    assert "Condition" not in template["Resources"]["MaintenanceFlow"]  # the lifecycle runs in every deployment


# ---------------------------------------------------------------------------------- the dashboard


def dashboard_body(parameters: dict[str, str], template_path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    from memtool.deploy.iam import resolve_template

    deployment = resolve_template(parameters, template_path=template_path)
    (dashboard,) = [r for r in deployment.resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    body = dashboard["Properties"]["DashboardBody"]
    assert isinstance(body, str)
    return json.loads(body)  # CloudWatch refuses a body that is not JSON


def dashboard_metrics(body: dict[str, Any]) -> list[list[Any]]:
    return [m for w in body["widgets"] if w["type"] == "metric" for m in w["properties"]["metrics"]]


@pytest.mark.parametrize("parameters", [COGNITO, EVERYTHING], ids=["defaults", "everything-configured"])
def test_the_dashboard_body_is_json_and_shows_every_route_and_alarm(parameters: dict[str, str]) -> None:
    body = dashboard_body(parameters)
    template = load()

    metrics = dashboard_metrics(body)
    for method, path in api_routes(template):
        for metric, stat in (("Latency", "p90"), ("5XXError", "Average")):
            plotted = [m for m in metrics if m[:2] == ["AWS/ApiGateway", metric] and m[7:10] == [path, "Method", method]]
            assert [m[-1]["stat"] for m in plotted] == [stat], (method, path, metric)
    (alarm_widget,) = [w for w in body["widgets"] if w["type"] == "alarm"]
    shown = alarm_widget["properties"]["alarms"]
    vector_index = "OpenSearchEndpoint" in parameters
    expected = {n for n, r in alarms_of(template).items() if vector_index or r.get("Condition") != "HasOpenSearch"}
    assert len(shown) == len(expected)
    assert all(arn.startswith("arn:aws:") for arn in shown)
    queues = {m[3] for m in metrics if m[:2] == ["AWS/SQS", "ApproximateNumberOfMessagesVisible"]}
    flows = {m[3].rsplit(":", 1)[-1] for m in metrics if m[:2] == ["AWS/States", "ExecutionsFailed"]}
    if vector_index:
        assert queues == {"memtool-DiagnoseDeadLetterQueue", "memtool-IndexerDeadLetterQueue"}
        assert flows == {"memtool-AskFlow", "memtool-MaintenanceFlow"}
    else:
        assert queues == {"memtool-DiagnoseDeadLetterQueue"}
        assert flows == {"memtool-AskFlow", "memtool-MaintenanceFlow"}  # the lifecycle runs without an index too


def test_a_dashboard_body_broken_in_one_configuration_is_caught(tmp_path: Path) -> None:
    # Given a copy whose conditional alarms join without their comma (valid with the defaults only)
    text = TEMPLATE_PATH.read_text(encoding="utf-8")
    joined = re.compile(r"(ConditionalAlarms: !If\n\s+- HasOpenSearch\n\s+- !Sub '), ")
    assert len(joined.findall(text)) == 1
    broken = tmp_path / "template.yaml"
    broken.write_text(joined.sub(r"\1 ", text), encoding="utf-8")

    # When its body is resolved, Then the defaults parse and the configured stack's does not
    assert dashboard_body(COGNITO, broken)["widgets"]
    with pytest.raises(json.JSONDecodeError):
        dashboard_body(EVERYTHING, broken)


if __name__ == "__main__":
    sys.stdout.write(render_yaml(load()) + "\n" + render_dashboard_yaml(load()))
