"""Whether a semantic model may be put in force: its problems, each at its place in the document.

Two checks, in order. ``structural_problems`` parses the document (pydantic) and checks that every
reference names something (``model_problems``), without a warehouse. ``warehouse_problems``
compiles every metric, alone and by each of its dimensions, and runs each query on the warehouse
as ``SELECT * FROM (<sql>) AS q LIMIT 0``: no rows are read, but every table, column and join is
resolved by the database itself. Every problem has a ``path`` (``metrics[2].expression``) that
``line_of`` turns into the line of a YAML file, so the CLI can print ``model.yaml:41: …``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError, model_validator

from memtool.errors import ValidationFailed
from memtool.semantic.catalog import Catalog, model_problems

if TYPE_CHECKING:
    from memtool.sql.warehouse import Warehouse

# Stored in two DynamoDB items per version (the head and the version's snapshot), each at most
# 400 KB with its other attributes: a model's stored JSON stays well under that (the demo's ~33 KB).
MODEL_MAX_BYTES = 300_000
# Nested mappings and lists, the document itself counted: a real model is about 5 deep
# (tables[].columns[].values[]); well under the recursion of PyYAML's composer, pydantic and json,
# and under the API's body depth (40), so a model that validates here can also be PUT.
MODEL_MAX_DEPTH = 32
# Values (mappings, lists and scalars) in one document, YAML aliases counted each time they are
# used: the demo model has about 2,000; a few aliases nested in each other would otherwise make
# billions for the checks to walk.
MODEL_MAX_VALUES = 200_000
# The warehouse check's own budget: under API Gateway's 29 s, with room for the store's writes.
WAREHOUSE_CHECK_SECONDS = 20.0
WAREHOUSE_QUERY_SECONDS = 10.0


@dataclass(frozen=True)
class ModelProblem:
    """One reason a model is refused: where (``metrics[3].expression``; "" for the whole model),
    what, and (from a YAML file) the line."""

    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ModelRejected(ValidationFailed):
    """The model was not stored (the version in force stays): every problem found, each at its place."""

    code = "model_invalid"

    def __init__(self, problems: Sequence[ModelProblem], message: str | None = None) -> None:
        self.problems = list(problems)
        first = str(self.problems[0]) if self.problems else "the model is not valid"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(message or f"the model was refused: {first}{more}", field="model")

    def to_body(self) -> dict[str, object]:
        body = super().to_body()
        body["problems"] = [{"path": p.path, "message": p.message} for p in self.problems]
        return body


# ---- structure ------------------------------------------------------------------------------


class _Unchecked(Catalog):
    """A Catalog without its cross-reference validator, so that every dangling reference can be
    listed on its own (``Catalog`` raises them as one joined message with no place), and so that
    the warehouse check can still try the metrics whose own references resolve."""

    @model_validator(mode="after")
    def _consistent(self) -> _Unchecked:
        self._metric_by_name = {m.name: m for m in self.metrics}
        self._dimension_by_name = {d.name: d for d in self.dimensions}
        self._table_by_name = {t.name: t for t in self.tables}
        self._source_by_name = {s.name: s for s in self.sources}
        return self


def parse_for_checks(document: Any) -> tuple[Catalog | None, list[ModelProblem]]:
    """The document as a model the warehouse check can use, and its structural problems.

    The model is None when a field does not parse (nothing can be checked further); when only
    references dangle (a metric naming an unknown dimension) it is returned with those problems,
    so one refusal lists them together with what the warehouse finds.
    """
    if not isinstance(document, Mapping):
        return None, [ModelProblem("", f"a semantic model is a mapping, not {type(document).__name__}")]
    too_big = shape_problem(document)
    if too_big is not None:
        return None, [too_big]
    try:
        unchecked = _Unchecked.model_validate(dict(document))
    except ValidationError as exc:
        return None, [ModelProblem(path_of(error["loc"]), _message(error)) for error in exc.errors()]
    problems = [problem_of(text) for text in model_problems(unchecked)]
    if problems:
        return unchecked, problems
    try:
        return Catalog.model_validate(dict(document)), []
    except ValidationError as exc:  # a rule of Catalog's this module does not know yet
        return None, [ModelProblem(path_of(error["loc"]), _message(error)) for error in exc.errors()]


def shape_problem(document: Any) -> ModelProblem | None:
    """A document nested deeper than ``MODEL_MAX_DEPTH`` or holding more than ``MODEL_MAX_VALUES``
    values, as one problem at its place; None when it is within both.

    Walked with a stack, not recursion: the point is that a hostile document (a YAML alias cycle,
    ten thousand brackets) is refused in one line before pydantic, ``json`` or PyYAML recurse
    into it and end in a RecursionError (a traceback in the CLI, a 500 from PUT /model).
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(document, ())]
    values = 0
    while stack:
        node, path = stack.pop()
        values += 1
        if values > MODEL_MAX_VALUES:
            return ModelProblem("", f"the model holds more than {MODEL_MAX_VALUES:,} values (YAML aliases counted each time they are used)")
        if isinstance(node, Mapping):
            children: Iterable[tuple[str | int, Any]] = ((str(key), value) for key, value in node.items())
        elif isinstance(node, list | tuple):
            children = enumerate(node)
        else:
            continue
        if len(path) + 1 > MODEL_MAX_DEPTH:
            return ModelProblem(path_of(path), f"is nested deeper than {MODEL_MAX_DEPTH} levels; a semantic model is a few levels deep")
        stack.extend((value, (*path, key)) for key, value in children)
    return None


def yaml_depth_problem(yaml_text: str) -> ModelProblem | None:
    """YAML nested deeper than ``MODEL_MAX_DEPTH``, found from the parser's events (which keep
    no recursion) before ``yaml.safe_load`` builds it (which recurses once per level, and ends in
    a RecursionError a few hundred levels down); None when it is not, or when it does not parse
    (loading it then reports the syntax error at its line)."""
    import yaml

    depth = 0
    try:
        for event in yaml.parse(yaml_text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                depth += 1
                if depth > MODEL_MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark is not None else None
                    message = f"the YAML is nested deeper than {MODEL_MAX_DEPTH} levels; a semantic model is a few levels deep"
                    return ModelProblem("", message, line=line)
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return None
    return None


def structural_problems(document: Any) -> list[ModelProblem]:
    """What is wrong with the document as a model, without a warehouse (empty: ``Catalog`` parses it)."""
    return parse_for_checks(document)[1]


def stored_size(document: Mapping[str, Any]) -> int:
    """The document's bytes as the DynamoDB store writes it: JSON with every non-ASCII character
    escaped (PynamoDB's JSONAttribute), so a Chinese character counts 6 bytes, not 3."""
    import json

    return len(json.dumps(document, separators=(",", ":"), default=str))


def size_problems(document: Mapping[str, Any]) -> list[ModelProblem]:
    size = stored_size(document)
    if size > MODEL_MAX_BYTES:
        return [
            ModelProblem(
                "",
                f"the model is {size:,} bytes as stored (JSON, non-ASCII characters escaped); the limit is {MODEL_MAX_BYTES:,} bytes",
            )
        ]
    return []


def path_of(loc: Iterable[Any]) -> str:
    """pydantic's error location as a path: ('metrics', 3, 'expression') -> metrics[3].expression."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(part, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            path += f".{part}" if path else part
        # anything else is a union branch's label (``function-after[...]``, a model name)
    return path


def _message(error: Mapping[str, Any]) -> str:
    if error.get("type") == "value_error":
        return str((error.get("ctx") or {}).get("error") or error.get("msg"))
    if error.get("type") == "extra_forbidden":
        return "unknown field"
    return str(error.get("msg") or "is not valid")


_PLACED = re.compile(
    r"^(?P<field>[a-z_]+)(?P<index>\[\d+\])?(?: \((?P<label>[^)]*)\))?(?P<tail>(?:\.[a-z_]+(?:\[\d+\])?)*)(?::\s*|\s+)(?P<rest>.+)$",
    re.DOTALL,
)
# model_problems' model-wide findings, by the list they are about.
_LIST_OF = {"table": "tables", "metric": "metrics", "dimension": "dimensions", "source": "sources", "aliases": "tables"}


def problem_of(text: str) -> ModelProblem:
    """A ``model_problems`` string as a problem at its place: "metrics[2] (net_revenue).dimensions:
    unknown dimensions ['x']" -> metrics[2].dimensions, "net_revenue: unknown dimensions ['x']"."""
    found = _PLACED.match(text)
    if found is None:
        return ModelProblem("", text)
    field = found["field"]
    if field not in Catalog.model_fields:
        return ModelProblem(_LIST_OF.get(field, ""), text)
    path = field + (found["index"] or "") + (found["tail"] or "")
    label = found["label"]
    return ModelProblem(path, f"{label}: {found['rest']}" if label else found["rest"])


# ---- the warehouse ----------------------------------------------------------------------------


def warehouse_problems(
    model: Catalog,
    warehouse: Warehouse,
    *,
    query_seconds: float = WAREHOUSE_QUERY_SECONDS,
    budget_seconds: float = WAREHOUSE_CHECK_SECONDS,
) -> list[ModelProblem]:
    """Every metric compiles and runs on the warehouse, alone and by each of its dimensions.

    One query per metric with all its dimensions first (the common case: it runs, and that proves
    each of them); only when that fails is each dimension tried on its own, to name the one at
    fault. A dimension that fails the same way with several metrics is reported once, at the
    dimension. Out of time, the check refuses rather than put an unchecked model in force.
    """
    from memtool.semantic.compiler import IntentCompiler
    from memtool.semantic.intent import Intent

    compiler = IntentCompiler(model)
    deadline = time.monotonic() + budget_seconds
    dimension_index = {d.name: i for i, d in enumerate(model.dimensions)}
    problems: list[ModelProblem] = []
    # (dimension, error) -> the metrics it failed with, for the collapse at the end
    by_dimension: dict[tuple[str, str], list[tuple[int, int]]] = {}

    def attempt(intent: Intent) -> str | None:
        if time.monotonic() > deadline:
            raise _OutOfTime
        try:
            sql = compiler.compile(intent).sql.strip().rstrip(";")
        except Exception as exc:  # noqa: BLE001 - any compile failure is the model's problem to report
            return f"does not compile: {exc}"
        try:
            warehouse.run(f"SELECT * FROM ({sql}) AS q LIMIT 0", max_rows=1, timeout_seconds=query_seconds)
        except Exception as exc:  # noqa: BLE001 - the database's own words are the message
            return f"the warehouse refused it: {_first_line(exc)}"
        return None

    # Metrics whose own references dangle are reported by structural_problems, not tried here.
    broken = {int(m[1]) for text in model_problems(model) if (m := re.match(r"metrics\[(\d+)\]", text))}
    try:
        for i, metric in enumerate(model.metrics):
            if i in broken:
                continue
            where = f"metrics[{i}] ({metric.name})"
            alone = attempt(Intent(metric=metric.name))
            if alone is not None:
                problems.append(ModelProblem(f"metrics[{i}].expression", f"{where}: {alone}"))
                continue
            if not metric.dimensions or attempt(Intent(metric=metric.name, dimensions=tuple(metric.dimensions))) is None:
                continue
            for k, name in enumerate(metric.dimensions):
                error = attempt(Intent(metric=metric.name, dimensions=(name,)))
                if error is not None:
                    by_dimension.setdefault((name, error), []).append((i, k))
    except _OutOfTime:
        problems.append(
            ModelProblem(
                "",
                f"the warehouse check ran out of its {budget_seconds:.0f} s before every metric was tried; "
                "the model was not stored (try again when the warehouse is less busy)",
            )
        )
    for (name, error), places in by_dimension.items():
        j = dimension_index.get(name)
        dim_place = f"dimensions[{j}] ({name})"
        if len(places) > 1 and j is not None:
            metrics = ", ".join(model.metrics[i].name for i, _ in places)
            problems.append(ModelProblem(f"dimensions[{j}]", f"{dim_place} with metrics {metrics}: {error}"))
            continue
        for i, k in places:
            problems.append(
                ModelProblem(f"metrics[{i}].dimensions[{k}]", f"metrics[{i}] ({model.metrics[i].name}) × {dim_place}: {error}")
            )
    return problems


class _OutOfTime(Exception):
    pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


# ---- YAML lines ---------------------------------------------------------------------------------

_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def path_segments(path: str) -> list[str | int]:
    """``metrics[2] (net_revenue).dimensions[1]`` -> ['metrics', 2, 'dimensions', 1] (labels dropped)."""
    bare = re.sub(r"\s*\([^)]*\)", "", path).split(" ", 1)[0]
    segments: list[str | int] = []
    for name, index in _SEGMENT.findall(bare):
        segments.append(int(index) if index else name)
    return segments


def line_of(yaml_text: str, path: str) -> int | None:
    """The 1-based line of ``path`` in a YAML (or JSON) text: the line of its key or list item, or
    of the deepest part of it the text has; None when the text does not parse or the path is empty."""
    return _line_in(_compose(yaml_text), path)


def with_lines(problems: Iterable[ModelProblem], yaml_text: str) -> list[ModelProblem]:
    """The problems, each with its line in ``yaml_text`` (a problem of the whole model gets none)."""
    root = _compose(yaml_text)
    return [replace(p, line=_line_in(root, p.path)) for p in problems]


def _compose(yaml_text: str) -> Any:
    import yaml

    if yaml_depth_problem(yaml_text) is not None:  # the composer recurses once per level
        return None
    try:
        return yaml.compose(yaml_text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def _line_in(node: Any, path: str) -> int | None:
    import yaml

    segments = path_segments(path)
    if node is None or not segments:
        return None
    line: int | None = None
    for segment in segments:
        if isinstance(segment, str) and isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == segment), None)
            if pair is None:
                break
            line = pair[0].start_mark.line + 1
            node = pair[1]
        elif isinstance(segment, int) and isinstance(node, yaml.SequenceNode) and segment < len(node.value):
            node = node.value[segment]
            line = node.start_mark.line + 1
        else:
            break
    return line


__all__ = [
    "MODEL_MAX_BYTES",
    "MODEL_MAX_DEPTH",
    "MODEL_MAX_VALUES",
    "ModelProblem",
    "ModelRejected",
    "line_of",
    "parse_for_checks",
    "path_of",
    "problem_of",
    "shape_problem",
    "size_problems",
    "stored_size",
    "structural_problems",
    "warehouse_problems",
    "with_lines",
    "yaml_depth_problem",
]
