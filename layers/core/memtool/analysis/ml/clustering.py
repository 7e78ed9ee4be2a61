"""ml_clustering: k-means on standardised features, k chosen by silhouette, with cluster profiles."""

from __future__ import annotations

from pydantic import Field

from memtool.analysis import kernels
from memtool.analysis.ml.common import guarded
from memtool.analysis.ml.models import ClusteringResult, TableArguments
from memtool.tools.base import BadArguments, NeedsClarification, Tool, ToolContext


class ClusteringArguments(TableArguments):
    id_column: str | None = Field(None, description="The column naming each row (e.g. 'city'); rows are numbered without it.")
    feature_columns: list[str] | None = Field(None, description="Numeric columns to cluster on; default every numeric column.")
    max_k: int = Field(8, ge=2, le=20, description="The largest number of clusters tried (k runs from 2 to min(max_k, rows - 1)).")
    seed: int = Field(0, description="Random seed of k-means, for repeatable results.")


def cluster(arguments: ClusteringArguments, context: ToolContext) -> ClusteringResult:
    import numpy as np
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score
    from sklearn.preprocessing import StandardScaler

    if not arguments.columns:
        raise BadArguments("give the data as columns and rows", field="columns")
    members, features, raw = guarded(
        lambda: kernels.clustering_inputs(arguments.columns, arguments.rows, arguments.id_column, arguments.feature_columns)
    )
    matrix = np.asarray(raw, dtype=float)
    if (matrix.std(axis=0) == 0).any():
        constant = [f for f, sd in zip(features, matrix.std(axis=0), strict=True) if sd == 0]
        raise NeedsClarification(f"constant features cannot separate clusters: {constant}", field="feature_columns")
    scaled = StandardScaler().fit_transform(matrix)
    scores, best = [], None
    for k in range(2, min(arguments.max_k, len(members) - 1) + 1):
        labels = KMeans(n_clusters=k, n_init=10, random_state=arguments.seed).fit_predict(scaled)
        if len(set(labels.tolist())) < 2:
            continue
        score = float(silhouette_score(scaled, labels))
        scores.append({"k": k, "silhouette": score})
        if best is None or score > best[0]:
            best = (score, k, labels.tolist())
    if best is None:
        raise NeedsClarification("the rows do not separate into two or more clusters", field="rows")
    return ClusteringResult.model_validate(
        {
            "features": features,
            "k": best[1],
            "silhouette": best[0],
            "silhouette_by_k": scores,
            "clusters": kernels.cluster_profiles(members, features, raw, best[2]),
        }
    )


def clustering_feedback(result: ClusteringResult) -> float:
    # Silhouette is already in [-1, 1]: above 0.5 the clusters are well separated.
    return max(-1.0, min(1.0, 2.0 * result.silhouette))


def clustering_summary(result: ClusteringResult) -> str:
    sizes = ", ".join(str(c.size) for c in result.clusters)
    return f"k={result.k} (silhouette {result.silhouette:.2f}) on {', '.join(result.features)}; sizes {sizes}"


CLUSTERING_TOOL: Tool[ClusteringArguments, ClusteringResult] = Tool(
    name="ml_clustering",
    description=(
        "Group rows (e.g. cities or products described by several numeric columns) with k-means on "
        "standardised features, choosing k by silhouette; returns each cluster's size, feature means "
        "and members."
    ),
    input_model=ClusteringArguments,
    output_model=ClusteringResult,
    handler=cluster,
    feedback=clustering_feedback,
    summarize=clustering_summary,
)
