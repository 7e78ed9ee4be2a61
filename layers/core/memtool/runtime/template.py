"""Reads template.yaml so the local runtime and the tests share its tables, routes and handlers.

The key schema, the API routes and the state machines live in the template only; nothing
here repeats them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

# Logical ids of the tables the code addresses by setting name.
TABLE_SETTINGS = {"MemoryTable": "memory_table", "IdempotencyTable": "idempotency_table"}

_TABLE_PROPERTIES = (
    "AttributeDefinitions",
    "KeySchema",
    "GlobalSecondaryIndexes",
    "BillingMode",
    "StreamSpecification",
)


@dataclass(frozen=True)
class ApiRoute:
    method: str
    path: str  # as in the template: /memories/{id}
    function: str  # logical id
    code_uri: Path
    handler: str  # module.function

    @property
    def pattern(self) -> re.Pattern[str]:
        regex = re.sub(r"\\\{([A-Za-z_][A-Za-z0-9_]*)(?:\\\+)?\\\}", r"(?P<\1>[^/]+)", re.escape(self.path))
        return re.compile(f"^{regex}$")

    @property
    def specificity(self) -> tuple[int, int]:
        """Literal segments win over parameters (/memories/search before /memories/{id})."""
        return (self.path.count("{"), -len(self.path))


@dataclass(frozen=True)
class TableSpec:
    logical_id: str
    properties: dict[str, Any]
    ttl_attribute: str | None

    def create_table_arguments(self, table_name: str) -> dict[str, Any]:
        args = {k: self.properties[k] for k in _TABLE_PROPERTIES if k in self.properties}
        args["TableName"] = table_name
        if "StreamSpecification" in args:
            args["StreamSpecification"] = {"StreamEnabled": True, **args["StreamSpecification"]}
        return args


class _CfnLoader:
    """A YAML SafeLoader that keeps CloudFormation short tags as {"Fn::X": value} dicts."""

    @staticmethod
    def build():
        import yaml

        # libyaml's parser when PyYAML has it (about 8 times faster on template.yaml), same results
        class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            pass

        def construct(loader, tag_suffix, node):
            name = tag_suffix if tag_suffix in ("Ref", "Condition") else f"Fn::{tag_suffix}"
            if isinstance(node, yaml.ScalarNode):
                value: Any = loader.construct_scalar(node)
                if tag_suffix == "GetAtt" and isinstance(value, str):
                    value = value.split(".", 1)
            elif isinstance(node, yaml.SequenceNode):
                value = loader.construct_sequence(node, deep=True)
            else:
                value = loader.construct_mapping(node, deep=True)
            return {name: value}

        Loader.add_multi_constructor("!", construct)
        return Loader


def project_root() -> Path:
    """The folder holding template.yaml: the working directory or above, else the source checkout."""
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "template.yaml").is_file() and (candidate / "functions").is_dir():
            return candidate
    source = Path(__file__).resolve().parents[4]  # layers/core/memtool/runtime/template.py
    if (source / "template.yaml").is_file():
        return source
    raise FileNotFoundError("template.yaml not found: run memtool from the project folder")


@lru_cache(maxsize=4)
def load_template(path: Path | None = None) -> dict[str, Any]:
    import yaml

    path = path or project_root() / "template.yaml"
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=_CfnLoader.build())  # SafeLoader subclass


def table_specs(template: dict[str, Any]) -> list[TableSpec]:
    specs = []
    for logical_id, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::DynamoDB::Table":
            continue
        props = resource.get("Properties", {})
        ttl = props.get("TimeToLiveSpecification") or {}
        specs.append(TableSpec(logical_id, props, ttl.get("AttributeName") if ttl.get("Enabled") else None))
    return specs


def api_routes(template: dict[str, Any], root: Path) -> list[ApiRoute]:
    routes = []
    for logical_id, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.get("Properties", {})
        for event in (props.get("Events") or {}).values():
            if event.get("Type") != "Api":
                continue
            routes.append(
                ApiRoute(
                    method=event["Properties"]["Method"].upper(),
                    path=event["Properties"]["Path"],
                    function=logical_id,
                    code_uri=root / props["CodeUri"],
                    handler=props["Handler"],
                )
            )
    return sorted(routes, key=lambda r: r.specificity)
