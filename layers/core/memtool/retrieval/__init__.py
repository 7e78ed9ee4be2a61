"""Embedders, the vector index port and its adapters, hybrid recall that goes back to the source."""
