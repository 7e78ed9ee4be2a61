"""Application services: one per flow (ask, feedback, memory write, diagnose, maintenance)."""
