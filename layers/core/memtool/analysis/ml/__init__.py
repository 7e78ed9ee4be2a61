"""The ML registry: anomaly, forecast, attribution, clustering, correlation and regression as tools.

Every tool's handler imports its heavy library (scikit-learn, scipy, statsmodels, pandas) when it
runs, so importing this package or ``registry`` costs only pydantic and the numpy-free kernels.
"""
