"""Guardrails (sqlglot), the warehouse port and its adapters (Redshift, DuckDB), the demo warehouse."""
