"""Data-shape analysis, chart matching and ECharts options."""
