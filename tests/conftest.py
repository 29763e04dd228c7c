"""Suite-wide settings: tests marked `e2e` run only against a reachable cluster, except those
marked `cloud` too (a provider's own service, reached with its credentials from the environment:
each such test skips itself without them)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

# Tasks' own tests (tests/data/**/tests/test_*.py) are data: they run inside a task's image.
collect_ignore_glob = ["data/*"]


def _cluster_reason() -> str | None:
    """Why e2e tests cannot run here, or None when KUBECONFIG names a reachable cluster."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        return "KUBECONFIG is not set: e2e tests need a cluster"
    if not all(Path(p).is_file() for p in kubeconfig.split(os.pathsep) if p):
        return f"KUBECONFIG names no readable file: {kubeconfig}"
    return None


E2E_TIMEOUT_ENV = "ROLLOUT_E2E_TIMEOUT"
E2E_TIMEOUT_DEFAULT_SEC = 600.0
E2E_MARGIN_SEC = 300.0
"""Beyond the job's own time: CRDs, the operator's start, the CLI's uploads and downloads, and
the clean-up (jobs deleted and gone before the operator stops)."""


def e2e_time_limit(environ: Mapping[str, str]) -> float:
    """pytest's limit for an e2e test: the time its job may take (ROLLOUT_E2E_TIMEOUT, which the
    tests themselves wait for) and a margin, instead of the suite's 120 s."""
    return float(environ.get(E2E_TIMEOUT_ENV) or E2E_TIMEOUT_DEFAULT_SEC) + E2E_MARGIN_SEC


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _cluster_reason()
    limit = pytest.mark.timeout(e2e_time_limit(os.environ))
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(limit)
            if reason is not None and "cloud" not in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
