"""Settings, clocks, AWS clients and the embedded local runtime."""
