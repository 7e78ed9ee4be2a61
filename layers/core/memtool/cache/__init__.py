"""Caches that learn from answers: the few-shot library with review (and, later, the SQL semantic cache)."""
