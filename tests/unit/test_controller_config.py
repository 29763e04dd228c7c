"""The operator's settings from the chart's environment variables and from flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from pydantic import ValidationError

from rollout.api.errors import InvalidInput, Problem
from rollout.api.job_settings import LogLevel
from rollout.api.resources import LocalObjectReference, PodOverrides
from rollout.controller.config import (
    COMMAND_LINE,
    ENVIRONMENT,
    SETTINGS,
    OperatorConfig,
    add_arguments,
    from_args,
)
from rollout.controller.prices import UnitPrices

MINIMAL = {"ROLLOUT_RUNNER_IMAGE": "registry.example.com/rollout-runner:0.1.0"}


def chart_environment(credentials_dir: Path) -> dict[str, str]:
    """What charts/rollout-operator sets on the Deployment, including its empty values."""
    return {
        "ROLLOUT_NAMESPACES": "evals,rl",
        "ROLLOUT_CLUSTERWIDE_PEERING": "false",
        "ROLLOUT_PEERING": "rollout-operator",
        "ROLLOUT_RUNNER_IMAGE": "registry.example.com/rollout-runner:0.1.0",
        "ROLLOUT_RUNNER_IMAGE_PULL_POLICY": "Always",
        "ROLLOUT_STORAGE_BUCKET": "rollout",
        "ROLLOUT_STORAGE_PREFIX": "",
        "ROLLOUT_STORAGE_ENDPOINT": "http://minio.rollout-system:9000",
        "ROLLOUT_STORAGE_REGION": "",
        "ROLLOUT_STORAGE_PATH_STYLE": "true",
        "ROLLOUT_STORAGE_CREDENTIALS_DIR": str(credentials_dir),
        "ROLLOUT_STORAGE_CREDENTIALS_SECRET": "rollout-storage",
        "ROLLOUT_TRIAL_SERVICE_ACCOUNT": "rollout-operator-trial",
        "ROLLOUT_DEFAULT_POD_OVERRIDES": (
            '{"nodeSelector":{"pool":"evals"},"tolerations":[{"key":"evals","operator":"Exists",'
            '"effect":"NoSchedule"}],"imagePullSecrets":[{"name":"regcred"}]}'
        ),
        "ROLLOUT_METRICS_PORT": "9191",
        "ROLLOUT_HEALTH_PORT": "8181",
        "ROLLOUT_WORKER_LIMIT": "20",
        "ROLLOUT_LOG_LEVEL": "debug",
        "ROLLOUT_UNIT_PRICES": '{"cpu":0.031,"memory":0.004,"nvidia.com/gpu":2.5}',
    }


@pytest.fixture
def credentials_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "storage"
    directory.mkdir()
    (directory / "AWS_ACCESS_KEY_ID").write_text("AKIAOPERATOR\n")
    (directory / "AWS_SECRET_ACCESS_KEY").write_text("operator-secret-value\n")
    return directory


def problems_of(environ: dict[str, str]) -> list[Problem]:
    with pytest.raises(InvalidInput) as caught:
        OperatorConfig.from_env(environ)
    return caught.value.problems


def test_only_the_runner_image_is_required_and_the_rest_has_the_documented_defaults() -> None:
    config = OperatorConfig.from_env(MINIMAL)
    assert config.namespaces == []
    assert config.clusterwide
    assert config.runner_image == "registry.example.com/rollout-runner:0.1.0"
    assert config.runner_image_pull_policy == "IfNotPresent"
    assert config.storage is None
    assert config.storage_credentials_secret is None
    assert config.trial_service_account is None
    assert config.peering_name == "rollout-operator"
    assert config.clusterwide_peering is True
    assert (config.metrics_port, config.health_port, config.worker_limit) == (9090, 8080, 200)
    assert config.log_level == LogLevel.INFO
    assert config.default_pod_overrides is None
    assert config.unschedulable_grace_sec == 600
    assert config.image_pull_grace_sec == 120
    assert config.status_interval_sec == 2
    assert config.pod_termination_grace_sec == 10
    assert config.unit_prices is None


def test_what_the_chart_sets_is_read_including_its_empty_values(credentials_dir: Path) -> None:
    config = OperatorConfig.from_env(chart_environment(credentials_dir))
    assert config.namespaces == ["evals", "rl"]
    assert not config.clusterwide
    assert config.clusterwide_peering is False
    assert config.runner_image_pull_policy == "Always"
    assert config.storage is not None
    assert config.storage.bucket == "rollout"
    assert config.storage.prefix == ""
    assert config.storage.endpoint == "http://minio.rollout-system:9000"
    assert config.storage.path_style is True
    assert config.storage.region == "us-east-1"  # empty: the storage module's default
    assert config.storage_credentials is not None
    assert config.storage_credentials.access_key_id.get_secret_value() == "AKIAOPERATOR"
    assert config.storage_credentials_secret == "rollout-storage"
    assert config.trial_service_account == "rollout-operator-trial"
    assert config.default_pod_overrides == PodOverrides.model_validate(
        {
            "nodeSelector": {"pool": "evals"},
            "tolerations": [{"key": "evals", "operator": "Exists", "effect": "NoSchedule"}],
            "imagePullSecrets": [{"name": "regcred"}],
        }
    )
    assert (config.metrics_port, config.health_port, config.worker_limit) == (9191, 8181, 20)
    assert config.log_level == LogLevel.DEBUG
    assert config.unit_prices == UnitPrices(
        per_hour={"cpu": 0.031, "memory": 0.004, "nvidia.com/gpu": 2.5}
    )
    assert "operator-secret-value" not in repr(config)


def test_an_empty_peering_name_means_standalone_and_an_unset_one_the_default() -> None:
    assert OperatorConfig.from_env({**MINIMAL, "ROLLOUT_PEERING": ""}).peering_name is None
    assert OperatorConfig.from_env({**MINIMAL, "ROLLOUT_PEERING": "mine"}).peering_name == "mine"
    assert OperatorConfig.from_env(MINIMAL).peering_name == "rollout-operator"


def test_clusterwide_peering_follows_the_namespaces_unless_it_is_set() -> None:
    namespaced = OperatorConfig.from_env({**MINIMAL, "ROLLOUT_NAMESPACES": " a , ,b "})
    assert namespaced.namespaces == ["a", "b"]
    assert namespaced.clusterwide_peering is False
    forced = {**MINIMAL, "ROLLOUT_NAMESPACES": "a", "ROLLOUT_CLUSTERWIDE_PEERING": "true"}
    assert OperatorConfig.from_env(forced).clusterwide_peering is True
    built = OperatorConfig(runner_image="r", namespaces=["x"])
    assert built.clusterwide_peering is False
    assert OperatorConfig(runner_image="r").clusterwide_peering is True


def test_timing_knobs_are_read() -> None:
    config = OperatorConfig.from_env(
        {
            **MINIMAL,
            "ROLLOUT_UNSCHEDULABLE_GRACE_SEC": "30",
            "ROLLOUT_IMAGE_PULL_GRACE_SEC": "7.5",
            "ROLLOUT_STATUS_INTERVAL_SEC": "0",
            "ROLLOUT_POD_TERMINATION_GRACE_SEC": "3",
            "ROLLOUT_RUNNING_STATUS_AFTER_SEC": "0",
        }
    )
    assert config.running_status_after_sec == 0
    assert OperatorConfig.from_env(MINIMAL).running_status_after_sec == 10
    assert config.unschedulable_grace_sec == 30
    assert config.image_pull_grace_sec == 7.5
    assert config.status_interval_sec == 0
    assert config.pod_termination_grace_sec == 3


def test_empty_pod_overrides_are_none() -> None:
    config = OperatorConfig.from_env({**MINIMAL, "ROLLOUT_DEFAULT_POD_OVERRIDES": "{}"})
    assert config.default_pod_overrides is None
    pull = OperatorConfig.from_env(
        {**MINIMAL, "ROLLOUT_DEFAULT_POD_OVERRIDES": '{"imagePullSecrets":[{"name":"r"}]}'}
    )
    assert pull.default_pod_overrides is not None
    assert pull.default_pod_overrides.image_pull_secrets == [LocalObjectReference(name="r")]


def test_empty_unit_prices_are_none() -> None:
    # The chart renders `unitPrices: {}` as "{}": no prices, so trials have no cost.
    assert OperatorConfig.from_env({**MINIMAL, "ROLLOUT_UNIT_PRICES": "{}"}).unit_prices is None
    assert OperatorConfig.from_env({**MINIMAL, "ROLLOUT_UNIT_PRICES": ""}).unit_prices is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("cpu=0.03", "is not JSON"),
        ('{"cpu": NaN}', "is not JSON: NaN is not a number JSON allows"),
        ("[0.03]", "must be a JSON object of resource name to price per unit-hour"),
        ('{"cpu": -0.5}', "the price of 'cpu' (core-hour) is -0.5: it must be a finite number"),
        ('{"cpu": "0.03"}', "the price of 'cpu' (core-hour) is \"0.03\": it must be a number"),
        ('{"memory": true}', "the price of 'memory' (GiB-hour) is true: it must be a number"),
        ('{"cpu": 1e999}', "the price of 'cpu' (core-hour) is inf: it must be a finite number"),
        ('{"cpus": 0.03}', "'cpus' is not a Kubernetes resource name (a container requests cpu"),
        ('{"NVIDIA.com/gpu": 2}', "'NVIDIA.com/gpu' is not a Kubernetes resource name"),
    ],
)
def test_bad_unit_prices_are_named_by_their_variable(text: str, words: str) -> None:
    (problem,) = problems_of({**MINIMAL, "ROLLOUT_UNIT_PRICES": text})
    assert (problem.file, problem.field) == (ENVIRONMENT, "ROLLOUT_UNIT_PRICES")
    assert words in problem.message


def test_every_bad_unit_price_is_reported_at_once() -> None:
    (problem,) = problems_of(
        {**MINIMAL, "ROLLOUT_UNIT_PRICES": '{"cpu": -1, "gpu": 2, "memory": 0.004}'}
    )
    assert problem.message == (
        "the price of 'cpu' (core-hour) is -1: it must be a finite number, 0 or more; "
        "'gpu' is not a Kubernetes resource name (a container requests cpu, memory, "
        "ephemeral-storage, hugepages-<size>, or a resource with a domain such as nvidia.com/gpu)"
    )


def test_a_missing_runner_image_is_named() -> None:
    assert problems_of({}) == [
        Problem(ENVIRONMENT, "ROLLOUT_RUNNER_IMAGE", "is required: the runner image of trial Pods")
    ]


def test_every_bad_value_is_reported_with_its_variable() -> None:
    problems = problems_of(
        {
            **MINIMAL,
            "ROLLOUT_RUNNER_IMAGE_PULL_POLICY": "Sometimes",
            "ROLLOUT_CLUSTERWIDE_PEERING": "maybe",
            "ROLLOUT_METRICS_PORT": "ninety",
            "ROLLOUT_WORKER_LIMIT": "many",
            "ROLLOUT_LOG_LEVEL": "loud",
            "ROLLOUT_DEFAULT_POD_OVERRIDES": "{nodeSelector: x}",
            "ROLLOUT_IMAGE_PULL_GRACE_SEC": "-1",
            "ROLLOUT_UNSCHEDULABLE_GRACE_SEC": "inf",
            "ROLLOUT_POD_TERMINATION_GRACE_SEC": "1.5",
            "ROLLOUT_STORAGE_BUCKET": "results",
            "ROLLOUT_STORAGE_PATH_STYLE": "perhaps",
        }
    )
    by_variable = {p.field: p.message for p in problems}
    assert all(p.file == ENVIRONMENT for p in problems)
    assert set(by_variable) == {
        "ROLLOUT_RUNNER_IMAGE_PULL_POLICY",
        "ROLLOUT_CLUSTERWIDE_PEERING",
        "ROLLOUT_METRICS_PORT",
        "ROLLOUT_WORKER_LIMIT",
        "ROLLOUT_LOG_LEVEL",
        "ROLLOUT_DEFAULT_POD_OVERRIDES",
        "ROLLOUT_IMAGE_PULL_GRACE_SEC",
        "ROLLOUT_UNSCHEDULABLE_GRACE_SEC",
        "ROLLOUT_POD_TERMINATION_GRACE_SEC",
        "ROLLOUT_STORAGE_PATH_STYLE",
    }
    assert "Always, IfNotPresent, Never" in by_variable["ROLLOUT_RUNNER_IMAGE_PULL_POLICY"]
    assert "'loud' is not one of debug, info" in by_variable["ROLLOUT_LOG_LEVEL"]
    assert by_variable["ROLLOUT_DEFAULT_POD_OVERRIDES"].startswith("is not JSON")
    assert "'perhaps' is not true or false" in by_variable["ROLLOUT_STORAGE_PATH_STYLE"]


def test_values_out_of_range_are_named_by_their_variable() -> None:
    problems = problems_of(
        {**MINIMAL, "ROLLOUT_METRICS_PORT": "70000", "ROLLOUT_WORKER_LIMIT": "0"}
    )
    assert {p.field for p in problems} == {"ROLLOUT_METRICS_PORT", "ROLLOUT_WORKER_LIMIT"}


def test_namespaces_are_names_not_patterns() -> None:
    """The operator's own watches ask for /namespaces/<name>/...: a kopf-style pattern would
    watch nothing, so it is refused at start, by its variable."""
    assert OperatorConfig.from_env({**MINIMAL, "ROLLOUT_NAMESPACES": "a,team-b"}).namespaces == [
        "a",
        "team-b",
    ]
    for wrong in ("team-*", "Team", "a_b"):
        (problem,) = problems_of({**MINIMAL, "ROLLOUT_NAMESPACES": f"ok,{wrong}"})
        assert problem.field == "ROLLOUT_NAMESPACES"
        assert f"{wrong!r} is not a namespace name" in problem.message
        assert "patterns are not supported" in problem.message


def test_pod_overrides_with_an_unknown_field_say_which() -> None:
    (problem,) = problems_of(
        {**MINIMAL, "ROLLOUT_DEFAULT_POD_OVERRIDES": '{"nodeSelektor": {"a": "b"}}'}
    )
    assert problem.field == "ROLLOUT_DEFAULT_POD_OVERRIDES"
    assert "nodeSelektor" in problem.message
    (problem,) = problems_of({**MINIMAL, "ROLLOUT_DEFAULT_POD_OVERRIDES": "[]"})
    assert "JSON object" in problem.message


def test_storage_settings_without_a_bucket_are_refused() -> None:
    (problem,) = problems_of({**MINIMAL, "ROLLOUT_STORAGE_ENDPOINT": "http://minio:9000"})
    assert problem == Problem(
        ENVIRONMENT,
        "ROLLOUT_STORAGE_BUCKET",
        "is required when ROLLOUT_STORAGE_ENDPOINT is set: the default bucket",
    )


def test_a_missing_credentials_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "AWS_ACCESS_KEY_ID").write_text("AKIA")
    (problem,) = problems_of(
        {
            **MINIMAL,
            "ROLLOUT_STORAGE_BUCKET": "b",
            "ROLLOUT_STORAGE_CREDENTIALS_DIR": str(tmp_path),
        }
    )
    assert problem.file == str(tmp_path / "AWS_SECRET_ACCESS_KEY")
    assert problem.message == "is missing or empty"


def test_the_settings_are_frozen() -> None:
    config = OperatorConfig.from_env(MINIMAL)
    with pytest.raises(ValidationError):
        config.worker_limit = 1  # type: ignore[misc]


# --- flags ----------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rollout-operator")
    add_arguments(parser)
    return parser.parse_args(argv)


def test_flags_win_over_variables_and_unset_flags_leave_them() -> None:
    args = parse(
        [
            "--namespace",
            "a",
            "--namespace",
            "b,c",
            "--worker-limit",
            "5",
            "--peering",
            "",
            "--storage-bucket",
            "flag-bucket",
            "--image-pull-grace-sec",
            "1",
            "--unit-prices",
            '{"cpu": 0.05}',
        ]
    )
    environ = {
        **MINIMAL,
        "ROLLOUT_WORKER_LIMIT": "99",
        "ROLLOUT_METRICS_PORT": "9999",
        "ROLLOUT_STORAGE_BUCKET": "env-bucket",
        "ROLLOUT_STORAGE_PREFIX": "env-prefix",
    }
    config = from_args(args, environ)
    assert config.namespaces == ["a", "b", "c"]
    assert config.clusterwide_peering is False
    assert config.worker_limit == 5
    assert config.metrics_port == 9999
    assert config.peering_name is None
    assert config.storage is not None
    assert (config.storage.bucket, config.storage.prefix) == ("flag-bucket", "env-prefix")
    assert config.image_pull_grace_sec == 1
    assert config.unit_prices == UnitPrices(per_hour={"cpu": 0.05})
    assert config.runner_image == MINIMAL["ROLLOUT_RUNNER_IMAGE"]


def test_a_bad_flag_is_named_as_a_flag_and_a_bad_variable_as_a_variable() -> None:
    args = parse(
        [
            *("--metrics-port", "x", "--storage-path-style", "sometimes"),
            *("--worker-limit", "0", "--unit-prices", '{"cpu": -1}'),
        ]
    )
    with pytest.raises(InvalidInput) as caught:
        from_args(args, {**MINIMAL, "ROLLOUT_LOG_LEVEL": "loud", "ROLLOUT_STORAGE_BUCKET": "b"})
    where = {(p.file, p.field) for p in caught.value.problems}
    assert where == {
        (COMMAND_LINE, "--metrics-port"),
        (COMMAND_LINE, "--storage-path-style"),
        (COMMAND_LINE, "--worker-limit"),
        (COMMAND_LINE, "--unit-prices"),
        (ENVIRONMENT, "ROLLOUT_LOG_LEVEL"),
    }


def test_the_runner_image_may_come_from_a_flag_alone() -> None:
    config = from_args(parse(["--runner-image", "runner:flag"]), {})
    assert config.runner_image == "runner:flag"


def test_every_variable_has_a_flag_and_the_help_names_the_variable() -> None:
    parser = argparse.ArgumentParser(prog="rollout-operator")
    add_arguments(parser)
    text = parser.format_help()
    variables = [s.variable for s in SETTINGS]
    assert len(variables) == len(set(variables)) == 36
    for variable in variables:
        assert f"${variable}" in text
