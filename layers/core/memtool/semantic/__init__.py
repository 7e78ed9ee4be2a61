"""The semantic layer: metric/dimension catalog, entity values, time expressions, intent -> SQL."""
