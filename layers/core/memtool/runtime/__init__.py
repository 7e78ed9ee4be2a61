"""AWS clients, the composition root (the container) and the embedded local runtime."""
