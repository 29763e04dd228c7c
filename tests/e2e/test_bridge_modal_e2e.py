"""The modal provider for real (`cloud_kit`): the oracle solves the offline example task in a
Modal sandbox. MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are required (skipped without them or
without the `modal` package); MODAL_ENVIRONMENT is optional."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cloud_kit import oracle_solves_the_task

from rollout.bridge.providers.modal import CREDENTIAL_VARIABLES, ModalProvider

pytestmark = [pytest.mark.e2e, pytest.mark.cloud]


async def test_the_oracle_solves_a_task_in_a_modal_sandbox(tmp_path: Path) -> None:
    missing = [name for name in CREDENTIAL_VARIABLES if not os.environ.get(name)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not set: the Modal e2e test needs a Modal token")
    pytest.importorskip("modal", reason="the Modal SDK is not installed")
    await oracle_solves_the_task(await ModalProvider.connect(os.environ), "modal", tmp_path)
