"""The operator bound by exactly the chart's RBAC, as installed cluster-wide and with
`watchNamespaces`: it starts without an error and serves a job at once.

On a real cluster, the chart installed with `watchNamespaces` did not let the operator list
namespaces, which kopf does for namespaced operators: 16 `ERROR ... GET /api/v1/namespaces ->
APIForbiddenError` lines over about 55 s, and no job served until kopf gave up asking.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from operator_kit import (
    job_manifest,
    job_phase,
    make_dataset,
    operator_config,
    operator_memo,
    play_kubelet,
    publish,
)
from s3_kit import S3Settings

from kubeharness.identity import Identity
from kubeharness.kube import Kube
from kubeharness.resources import ROLLOUT_JOBS

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("install", ["cluster-wide", "namespaced"])
async def test_the_charts_rbac_lets_the_operator_start_cleanly_and_run_a_job(
    kube: Kube,
    s3_settings: S3Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    install: str,
) -> None:
    watched = [kube.namespace] if install == "namespaced" else []
    identity = await kube.apply_chart_rbac(watched)
    assert identity is (Identity.NAMESPACED_OPERATOR if watched else Identity.OPERATOR)
    # No-internet tasks: the job's NetworkPolicy is made under the chart's RBAC too.
    tasks = make_dataset(tmp_path / "set", ["a", "b"], toml="allow_internet = false\n")
    dataset = publish(s3_settings.store(), tasks)
    memo = operator_memo(kube, operator_config(s3_settings), identity)
    caplog.set_level(logging.WARNING)
    async with kube.operator(memo=memo, identity=identity, clusterwide=not watched):
        await kube.create(ROLLOUT_JOBS, job_manifest("rbac", [dataset]))
        await play_kubelet(kube, lambda: job_phase(kube, "rbac", "Completed"))
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
