"""Route classification and planners (rule-based over the semantic layer, Bedrock)."""
