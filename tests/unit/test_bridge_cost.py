"""What a try on the bridge costs: the trial's resources for its sandbox's life at the provider's
unit prices (the operator's price format), or what the provider reports."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from rollout.api.errors import InvalidInput
from rollout.api.resources import TrialResources
from rollout.bridge.cost import add_costs, parse_provider_prices, trial_requests, try_cost
from rollout.bridge.settings import from_env
from rollout.controller.prices import UnitPrices

START = datetime(2026, 1, 1, tzinfo=UTC)
PROVIDERS = ("docker", "modal")
RESOURCES = TrialResources(cpus="2", memory="4Gi", storage="10Gi", gpus=1)


def test_a_trials_resources_are_requests_in_base_units() -> None:
    assert trial_requests(RESOURCES) == {
        "cpu": Decimal(2),
        "memory": Decimal(4 * 2**30),
        "ephemeral-storage": Decimal(10 * 2**30),
        "nvidia.com/gpu": Decimal(1),
    }
    assert "nvidia.com/gpu" not in trial_requests(RESOURCES.model_copy(update={"gpus": 0}))


def test_a_try_costs_its_resources_for_its_hours_at_the_prices() -> None:
    prices = UnitPrices(per_hour={"cpu": 0.5, "memory": 0.01, "nvidia.com/gpu": 3.0})
    half_hour = START + timedelta(minutes=30)
    # (2 x 0.5 + 4 x 0.01 + 1 x 3.0) per hour, for half an hour; storage is unpriced.
    assert try_cost(RESOURCES, prices, started=START, ended=half_hour) == pytest.approx(2.02)
    assert try_cost(RESOURCES, prices, started=half_hour, ended=START) == 0.0
    assert try_cost(RESOURCES, None, started=START, ended=half_hour) is None
    # What the provider reports wins over the prices.
    assert try_cost(RESOURCES, prices, started=START, ended=half_hour, reported=0.25) == 0.25
    assert try_cost(RESOURCES, None, started=START, ended=half_hour, reported=0.25) == 0.25


def test_tries_add_up_and_unknown_stays_unknown() -> None:
    assert add_costs(None, None) is None
    assert add_costs(0.1, None) == 0.1
    assert add_costs(None, 0.2) == 0.2
    assert add_costs(0.1, 0.2) == 0.3  # decimal, not 0.30000000000000004


def test_prices_are_read_per_provider_in_the_operators_format() -> None:
    prices = parse_provider_prices(
        '{"modal": {"cpu": 0.047, "memory": 0.008}, "docker": {}}', PROVIDERS
    )
    assert prices == {"modal": UnitPrices(per_hour={"cpu": 0.047, "memory": 0.008})}
    with pytest.raises(ValueError, match="is not JSON"):
        parse_provider_prices("{", PROVIDERS)
    with pytest.raises(ValueError, match="must be a JSON object by provider"):
        parse_provider_prices("[1]", PROVIDERS)
    with pytest.raises(ValueError, match=r"^modal: "):
        parse_provider_prices('{"modal": {"cpu": -1}}', PROVIDERS)


def test_the_setting_names_what_is_wrong() -> None:
    settings = from_env(
        {"ROLLOUT_BRIDGE_IDENTITY": "b", "ROLLOUT_BRIDGE_UNIT_PRICES": '{"e2b": {"cpu": 0.05}}'}
    )
    assert settings.unit_prices["e2b"].per_hour == {"cpu": 0.05}
    with pytest.raises(
        InvalidInput, match=r"ROLLOUT_BRIDGE_UNIT_PRICES.*kubernetes: not a provider"
    ):
        from_env(
            {"ROLLOUT_BRIDGE_IDENTITY": "b", "ROLLOUT_BRIDGE_UNIT_PRICES": '{"kubernetes": {}}'}
        )
