"""ml_regression: ordinary least squares with coefficient tests and residual checks (normality,
autocorrelation, heteroscedasticity)."""

from __future__ import annotations

from pydantic import Field

from memtool.analysis import kernels
from memtool.analysis.ml.common import guarded
from memtool.analysis.ml.models import RegressionResult, TableArguments
from memtool.tools.base import BadArguments, NeedsClarification, Tool, ToolContext


class RegressionArguments(TableArguments):
    target: str = Field(description="The numeric column to explain.")
    features: list[str] | None = Field(None, description="Numeric explanatory columns; default every other numeric column.")


def regress(arguments: RegressionArguments, context: ToolContext) -> RegressionResult:
    import numpy as np
    import statsmodels.api as sm
    from scipy import stats
    from statsmodels.stats.diagnostic import het_breuschpagan
    from statsmodels.stats.stattools import durbin_watson, jarque_bera

    if not arguments.columns:
        raise BadArguments("give the data as columns and rows", field="columns")
    names, y, x_rows = guarded(lambda: kernels.regression_inputs(arguments.columns, arguments.rows, arguments.target, arguments.features))
    x = sm.add_constant(np.asarray(x_rows, dtype=float), has_constant="add")
    if np.linalg.matrix_rank(x) < x.shape[1]:
        raise NeedsClarification(f"the features {names} are collinear; drop one", field="features")
    fit = sm.OLS(np.asarray(y, dtype=float), x).fit()
    residuals = fit.resid
    coefficients = [
        {
            "name": name,
            "estimate": float(fit.params[i]),
            "std_error": float(fit.bse[i]),
            "t": float(fit.tvalues[i]),
            "p": float(fit.pvalues[i]),
        }
        for i, name in enumerate(["const", *names])
    ]
    return RegressionResult.model_validate(
        {
            "target": arguments.target,
            "features": names,
            "n": int(fit.nobs),
            "coefficients": coefficients,
            "r_squared": float(fit.rsquared),
            "adj_r_squared": float(fit.rsquared_adj),
            "residual_checks": {
                "shapiro_p": float(stats.shapiro(residuals).pvalue),
                "jarque_bera_p": float(jarque_bera(residuals)[1]),
                "durbin_watson": float(durbin_watson(residuals)),
                "breusch_pagan_p": float(het_breuschpagan(residuals, x)[1]),
            },
        }
    )


def regression_feedback(result: RegressionResult) -> float:
    # R² says how much the model explains; a residual check failing at 1% says its p-values lean
    # on assumptions the data breaks, so the answer counts for less.
    checks = result.residual_checks
    failed = sum(
        1 for p in (checks.shapiro_p, checks.jarque_bera_p, checks.breusch_pagan_p) if p is not None and p < 0.01
    ) + (1 if not 1.0 <= checks.durbin_watson <= 3.0 else 0)
    return max(-1.0, min(1.0, result.r_squared - 0.25 * failed))


def regression_summary(result: RegressionResult) -> str:
    terms = ", ".join(f"{c.name}={c.estimate:.4g}" for c in result.coefficients)
    return f"OLS {result.target} ~ {' + '.join(result.features)}: R²={result.r_squared:.3f}; {terms}"


REGRESSION_TOOL: Tool[RegressionArguments, RegressionResult] = Tool(
    name="ml_regression",
    description=(
        "Fit ordinary least squares of a target column on numeric feature columns: coefficients with "
        "standard errors and p-values, R², and residual checks (Shapiro-Wilk and Jarque-Bera "
        "normality, Durbin-Watson, Breusch-Pagan)."
    ),
    input_model=RegressionArguments,
    output_model=RegressionResult,
    handler=regress,
    feedback=regression_feedback,
    summarize=regression_summary,
)
