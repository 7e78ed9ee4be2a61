"""docs/semantic-model.md covers every field of the semantic model (issue 22, item 6).

Every field of every pydantic model in ``memtool.semantic.catalog`` (the format's top level and
its parts) must be named in the reference: as `` `field` ``, inside a `` `{a, b, c}` `` shape, or
as a ``field:`` key of a YAML example. A control shows the check finds a field the text leaves out.
"""

from __future__ import annotations

import inspect
import re

from pydantic import BaseModel

from memtool.semantic import catalog
from tests.support import ROOT

REFERENCE = ROOT / "docs" / "semantic-model.md"


def model_fields() -> list[tuple[str, str]]:
    models = [
        value
        for value in vars(catalog).values()
        if inspect.isclass(value) and issubclass(value, BaseModel) and value.__module__ == catalog.__name__
    ]
    return [(model.__name__, name) for model in models for name in model.model_fields]


def documented(text: str) -> set[str]:
    names = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", text))
    for shape in re.findall(r"`\{([^}`]*)\}`", text):
        names.update(part.strip() for part in shape.split(","))
    names.update(re.findall(r"^\s*-?\s*'?([A-Za-z_][A-Za-z0-9_]*)'?:", text, re.MULTILINE))  # YAML keys
    names.update(re.findall(r"[{,]\s*'?([A-Za-z_][A-Za-z0-9_]*)'?:", text))  # flow-style YAML keys
    return names


def test_every_field_of_the_model_is_in_the_reference() -> None:
    fields = model_fields()
    assert len(fields) > 60  # the whole format, not a part of it
    missing = [f"{model}.{name}" for model, name in fields if name not in documented(REFERENCE.read_text(encoding="utf-8"))]
    assert missing == []


def test_the_check_finds_a_field_the_text_leaves_out() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    assert "as_of" in documented(text)
    without = re.sub(r"as_of", "the end date", text)
    assert "as_of" not in documented(without)
