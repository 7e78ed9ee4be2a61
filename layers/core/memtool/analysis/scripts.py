"""Templated code-interpreter scripts: the kernels' source plus a small driver per analysis kind.

A script reads ``data.json`` from its working directory (``{"columns", "rows", "params"}``, the
params named as the matching ML tool's input fields), runs the kernel, writes ``result.json`` in
the JSON shape of that tool's output model (``memtool.analysis.ml.models``) and, when matplotlib
is importable, draws ``chart.png``. It imports numpy and matplotlib only, so it runs in a bare
sandbox; the kernels' source travels inside the script rather than as an installed package.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from memtool.analysis.kinds import TaskKind

# The kernels as they ship into the sandbox, each after what it imports (memtool.analysis.kernels).
KERNEL_FILES = ("kernels_tables.py", "kernels_distributions.py", "kernels_attribution.py", "kernels.py")
_SIBLING_KERNELS = "memtool.analysis.kernels"

_PRELUDE = '''

# ---- driver ---------------------------------------------------------------------------------
import json as _json

with open("data.json", encoding="utf-8") as _f:
    _DATA = _json.load(_f)
COLUMNS = _DATA.get("columns") or []
ROWS = _DATA.get("rows") or []
PARAMS = {**TEMPLATE_PARAMS, **(_DATA.get("params") or {})}


def _write(result):
    with open("result.json", "w", encoding="utf-8") as f:
        _json.dump(result, f, ensure_ascii=False, allow_nan=False)


def _pyplot():
    if PARAMS.get("chart") is False:  # no chart asked for: matplotlib is not even imported
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    plt.rcParams["axes.unicode_minus"] = False
    return plt


def _series():
    if PARAMS.get("series") is not None:
        return [str(x) for x in PARAMS["labels"]], [float(v) for v in PARAMS["series"]]
    return series_from_table(COLUMNS, ROWS, PARAMS.get("label_column", "period"), PARAMS.get("value_column", "value"))
'''

_DRIVERS: dict[TaskKind, str] = {
    "segments": '''
result = segment_report(
    COLUMNS, ROWS, dimension_column=PARAMS.get("dimension_column", "dimension"), member_column=PARAMS.get("member_column", "member"),
    label_column=PARAMS.get("label_column", "period"), value_column=PARAMS.get("value_column", "value"),
    focus=PARAMS.get("focus"), period=PARAMS.get("period", 12), threshold=PARAMS.get("threshold", 3.5),
)
_write(result)
''',
    "anomaly": '''
labels, values = _series()
result = anomaly_report(
    values, labels, series_name=PARAMS.get("series_name", "value"), period=PARAMS.get("period", 12),
    threshold=PARAMS.get("threshold", 3.5), transform=PARAMS.get("transform", "auto"),
)
_write(result)
plt = _pyplot()
if plt is not None:
    import math

    points = result["points"]
    x = list(range(len(points)))
    fig, ax = plt.subplots(figsize=(9, 4))
    band = result["threshold"] * result["scale"]
    if result["transform"] == "log":
        low = [p["expected"] * math.exp(-band) for p in points]
        high = [p["expected"] * math.exp(band) for p in points]
    else:
        low = [p["expected"] - band for p in points]
        high = [p["expected"] + band for p in points]
    ax.fill_between(x, low, high, alpha=0.2, label="expected band")
    ax.plot(x, [p["expected"] for p in points], linestyle="--", label="expected")
    ax.plot(x, [p["value"] for p in points], marker="o", label=result["series_name"])
    flagged = [i for i, p in enumerate(points) if p["flagged_by"]]
    ax.scatter(flagged, [points[i]["value"] for i in flagged], color="red", s=80, zorder=3, label="anomaly")
    ax.set_xticks(x, [p["label"] for p in points], rotation=60, fontsize=7)
    ax.legend()
    fig.tight_layout()
    fig.savefig("chart.png", dpi=100)
''',
    "forecast": '''
if PARAMS.get("series") is not None:
    labels, values = _series()
    _one = seasonal_forecast(
        values, labels, PARAMS.get("horizon", 3), PARAMS.get("period", 12), backtest_origins=PARAMS.get("backtest_origins", 6)
    )
    result = {"horizon": PARAMS.get("horizon", 3), "period": PARAMS.get("period", 12), "series": [{"group": None, **_one}]}
    histories = {None: (labels, values)}
else:
    result = forecast_report(
        COLUMNS, ROWS, period_column=PARAMS.get("period_column", "period"), value_column=PARAMS.get("value_column", "value"),
        group_column=PARAMS.get("group_column"), horizon=PARAMS.get("horizon", 3), period=PARAMS.get("period", 12),
        backtest_origins=PARAMS.get("backtest_origins", 6),
    )
    histories = grouped_series(
        COLUMNS, ROWS, PARAMS.get("period_column", "period"), PARAMS.get("value_column", "value"), PARAMS.get("group_column")
    )
_write(result)
plt = _pyplot()
if plt is not None:
    fig, ax = plt.subplots(figsize=(9, 4))
    for one in result["series"]:
        labels, values = histories[one["group"]]
        n = len(values)
        future = list(range(n, n + len(one["forecast"])))
        line = ax.plot(range(n), values, marker="o", label=one["group"] or "history")[0]
        ax.plot(future, [f["point"] for f in one["forecast"]], linestyle="--", color=line.get_color())
        for level, alpha in (("95", 0.15), ("80", 0.3)):
            lower = [f["lower_" + level] for f in one["forecast"]]
            upper = [f["upper_" + level] for f in one["forecast"]]
            ax.fill_between(future, lower, upper, alpha=alpha, color=line.get_color())
    ax.legend()
    fig.tight_layout()
    fig.savefig("chart.png", dpi=100)
''',
    "attribution": '''
if PARAMS.get("method") == "rate_mix":  # a ratio: each segment's own rate and the mix of segments
    result = rate_attribution_report(
        COLUMNS, ROWS, period_column=PARAMS.get("period_column", "period"), dimension_column=PARAMS.get("dimension_column", "dimension"),
        member_column=PARAMS.get("member_column", "member"), numerator_column=PARAMS["numerator_column"],
        denominator_column=PARAMS["denominator_column"], totals=PARAMS["totals"], before_period=PARAMS["before_period"],
        after_period=PARAMS["after_period"], shared_denominator=PARAMS.get("shared_denominator") or [],
        rounding=PARAMS.get("rounding", 0.0),
    )
else:
    result = attribution_report(
        COLUMNS, ROWS, period_column=PARAMS.get("period_column", "period"), value_column=PARAMS.get("value_column", "value"),
        dimensions=PARAMS.get("dimensions") or [], before_period=PARAMS.get("before_period"), after_period=PARAMS.get("after_period"),
    )
_write(result)
plt = _pyplot()
if plt is not None:
    dims = result["dimensions"]
    rates = result.get("method") == "rate_mix"
    fig, axes = plt.subplots(len(dims), 1, figsize=(8, 2 + 2.5 * len(dims)), squeeze=False)
    for ax, dim in zip(axes[:, 0], dims):
        parts = list(reversed(dim["contributions"][:10]))
        names = [str(c["member"]) for c in parts]
        if rates:  # each member's rate effect and mix effect, side by side
            y = list(range(len(parts)))
            ax.barh([i + 0.2 for i in y], [c["rate_effect"] for c in parts], height=0.4, color="tab:blue", label="rate")
            ax.barh([i - 0.2 for i in y], [c["mix_effect"] for c in parts], height=0.4, color="tab:orange", label="mix")
            ax.set_yticks(y, names)
            ax.legend(fontsize=7)
        else:
            colors = ["tab:green" if c["delta"] >= 0 else "tab:red" for c in parts]
            ax.barh(names, [c["delta"] for c in parts], color=colors)
        ax.axvline(0, color="black", linewidth=0.8)
        change = f"{result['total_change']:+.4g}" if rates else f"{result['total_change']:+,.2f}"
        ax.set_title(f"{dim['dimension']}: {result['before_period']} -> {result['after_period']} ({change})")
    fig.tight_layout()
    fig.savefig("chart.png", dpi=100)
''',
    "clustering": '''
result = clustering_report(
    COLUMNS, ROWS, id_column=PARAMS.get("id_column"), feature_columns=PARAMS.get("feature_columns"),
    max_k=PARAMS.get("max_k", 8), seed=PARAMS.get("seed", 0),
)
_write(result)
plt = _pyplot()
if plt is not None:
    members, features, raw = clustering_inputs(COLUMNS, ROWS, PARAMS.get("id_column"), PARAMS.get("feature_columns"))
    where = {m: c["cluster"] for c in result["clusters"] for m in c["members"]}
    fx = [r[0] for r in raw]
    fy = [r[1] if len(r) > 1 else 0.0 for r in raw]
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.scatter(fx, fy, c=[where[m] for m in members], cmap="tab10")
    ax.set_xlabel(features[0])
    ax.set_ylabel(features[1] if len(features) > 1 else "")
    ax.set_title(f"k = {result['k']} (silhouette {result['silhouette']:.2f})")
    fig.tight_layout()
    fig.savefig("chart.png", dpi=100)
''',
    "correlation": '''
result = correlation_report(COLUMNS, ROWS, numeric=PARAMS.get("numeric_columns"))
_write(result)
plt = _pyplot()
if plt is not None:
    names = result["columns"]
    r = {(p["x"], p["y"]): p["pearson_r"] for p in result["pairs"]}
    grid = [[1.0 if a == b else r.get((a, b), r.get((b, a), 0.0)) for b in names] for a in names]
    fig, ax = plt.subplots(figsize=(5 + 0.4 * len(names), 4 + 0.4 * len(names)))
    image = ax.imshow(grid, vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    fig.colorbar(image, ax=ax, label="Pearson r")
    fig.tight_layout()
    fig.savefig("chart.png", dpi=100)
''',
    "regression": '''
result = regression_report(COLUMNS, ROWS, target=PARAMS["target"], features=PARAMS.get("features"))
_write(result)
plt = _pyplot()
if plt is not None:
    names, y, x_rows = regression_inputs(COLUMNS, ROWS, PARAMS["target"], PARAMS.get("features"))
    beta = [c["estimate"] for c in result["coefficients"]]
    fitted = [beta[0] + sum(b * v for b, v in zip(beta[1:], row)) for row in x_rows]
    fig, ax = plt.subplots(figsize=(5, 5))
    ax.scatter(fitted, y, s=12)
    low, high = min(fitted + y), max(fitted + y)
    ax.plot([low, high], [low, high], color="black", linewidth=0.8)
    ax.set_xlabel("fitted")
    ax.set_ylabel(result["target"])
    ax.set_title(f"R² = {result['r_squared']:.3f}")
    fig.tight_layout()
    fig.savefig("chart.png", dpi=100)
''',
}


def kernels_source() -> str:
    """The kernels as one script head: their files in dependency order, each without its
    ``__future__`` import and its imports of a sibling kernel (the sandbox has no memtool: the
    names are defined above), under one ``from __future__ import annotations``."""
    parts = ["from __future__ import annotations\n"]
    for name in KERNEL_FILES:
        text = Path(__file__).with_name(name).read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        for node in reversed(ast.parse(text).body):
            if isinstance(node, ast.ImportFrom) and (node.module == "__future__" or (node.module or "").startswith(_SIBLING_KERNELS)):
                del lines[node.lineno - 1 : node.end_lineno]
        parts.append(f"\n# ---- {name} " + "-" * (88 - len(name)) + "\n" + "".join(lines))
    return "".join(parts)


def templated_script(kind: TaskKind, params: dict[str, Any]) -> str:
    """The script for one analysis kind; ``params`` are its defaults (``data.json``'s params win)."""
    if kind not in _DRIVERS:
        raise ValueError(f"no templated script for {kind!r}; the kinds are {sorted(_DRIVERS)}")
    # The params travel as a JSON string literal so no value can break out into code.
    embedded = f"\nTEMPLATE_PARAMS = __import__('json').loads({json.dumps(json.dumps(params, ensure_ascii=False))})\n"
    return kernels_source() + embedded + _PRELUDE + _DRIVERS[kind]
