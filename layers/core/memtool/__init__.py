"""memtool: the memory-and-tool layer for data agents."""

__version__ = "0.1.0"
