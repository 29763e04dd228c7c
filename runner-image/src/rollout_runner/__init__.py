"""The trial runner: the sidecar in every trial Pod."""
