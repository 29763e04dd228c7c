"""Suite-wide settings: tests marked `e2e` run only against a reachable cluster."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Test helper modules (tests/kube.py, tests/s3server.py, tests/fakecontainer.py) import as
# top-level modules from every test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _cluster_reason() -> str | None:
    """Why e2e tests cannot run here, or None when KUBECONFIG names a reachable cluster."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        return "KUBECONFIG is not set: e2e tests need a cluster"
    if not all(Path(p).is_file() for p in kubeconfig.split(os.pathsep) if p):
        return f"KUBECONFIG names no readable file: {kubeconfig}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _cluster_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)
