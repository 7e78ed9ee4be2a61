"""Loads the real Lambda handlers from functions/<name>/app.py, as Lambda would."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

LambdaHandler = Callable[[dict[str, Any], Any], Any]


@lru_cache(maxsize=None)
def load_handler(code_uri: Path, handler: str) -> LambdaHandler:
    module_name, _, function_name = handler.rpartition(".")
    source = Path(code_uri) / f"{module_name.replace('.', '/')}.py"
    if not source.is_file():
        raise FileNotFoundError(f"handler source {source} not found")
    unique = f"memtool_functions.{Path(code_uri).name}.{module_name}"
    spec = importlib.util.spec_from_file_location(unique, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return getattr(module, function_name)


def function_handler(root: Path, name: str) -> LambdaHandler:
    """functions/<name>/app.py's lambda_handler."""
    return load_handler(root / "functions" / name, "app.lambda_handler")
