"""The ML tools as one registry. Importing this module imports no heavy library: each handler
imports scikit-learn, scipy, statsmodels or pandas when it runs."""

from __future__ import annotations

from typing import Any

from memtool.analysis.ml.anomaly import ANOMALY_TOOL
from memtool.analysis.ml.attribution import ATTRIBUTION_TOOL
from memtool.analysis.ml.clustering import CLUSTERING_TOOL
from memtool.analysis.ml.correlation import CORRELATION_TOOL
from memtool.analysis.ml.forecast import FORECAST_TOOL
from memtool.analysis.ml.regression import REGRESSION_TOOL
from memtool.analysis.ml.segments import SEGMENTS_TOOL
from memtool.tools.base import Tool, ToolRegistry


def ml_tools() -> list[Tool[Any, Any]]:
    return [ANOMALY_TOOL, FORECAST_TOOL, ATTRIBUTION_TOOL, CLUSTERING_TOOL, CORRELATION_TOOL, REGRESSION_TOOL, SEGMENTS_TOOL]


def ml_registry() -> ToolRegistry:
    return ToolRegistry(ml_tools())
