"""The daytona provider for real (`cloud_kit`): the oracle solves the offline example task in a
Daytona sandbox. DAYTONA_API_KEY is required (skipped without it or without the `daytona`
package); DAYTONA_API_URL and DAYTONA_TARGET are optional."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cloud_kit import oracle_solves_the_task

from rollout.bridge.providers.daytona import API_KEY, DaytonaProvider

pytestmark = [pytest.mark.e2e, pytest.mark.cloud]


async def test_the_oracle_solves_a_task_in_a_daytona_sandbox(tmp_path: Path) -> None:
    if not os.environ.get(API_KEY):
        pytest.skip(f"{API_KEY} is not set: the Daytona e2e test needs a Daytona API key")
    pytest.importorskip("daytona", reason="the Daytona SDK (`daytona`) is not installed")
    await oracle_solves_the_task(await DaytonaProvider.connect(os.environ), "daytona", tmp_path)
