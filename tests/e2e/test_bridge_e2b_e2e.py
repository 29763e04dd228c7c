"""The e2b provider for real (`cloud_kit`): the oracle solves the offline example task in an E2B
sandbox made from a template of the task's image. E2B_API_KEY is required (skipped without it
or without the `e2b` package); E2B_DOMAIN is optional. A first run builds the template."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cloud_kit import oracle_solves_the_task

from rollout.bridge.providers.e2b import API_KEY_VARIABLE, E2BProvider

pytestmark = [pytest.mark.e2e, pytest.mark.cloud, pytest.mark.timeout(1800)]


async def test_the_oracle_solves_a_task_in_an_e2b_sandbox(tmp_path: Path) -> None:
    if not os.environ.get(API_KEY_VARIABLE):
        pytest.skip(f"{API_KEY_VARIABLE} is not set: the E2B e2e test needs an E2B account")
    pytest.importorskip("e2b", reason="the E2B SDK (`e2b`) is not installed")
    await oracle_solves_the_task(await E2BProvider.connect(os.environ), "e2b", tmp_path)
