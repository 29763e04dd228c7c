"""One model per concept, two spellings: the user's files in snake_case, the resources in camelCase.

tests/data/compat holds a RolloutJob and a RolloutTrial (spec and status) as the version before
the models were merged wrote them; every later version must still read them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout.api.environment import (
    ClusterEnvironmentSettings,
    EnvironmentSettings,
    EnvironmentType,
)
from rollout.api.errors import InvalidInput
from rollout.api.job import JobConfig, job_to_config_json, parse_job
from rollout.api.resources import RolloutJob, RolloutJobSpec, RolloutTrial
from rollout.api.results import AgentSummary, JobResult, TrialDurations, TrialResult

COMPAT = Path(__file__).resolve().parents[1] / "data" / "compat"

JOB: dict[str, Any] = {
    "name": "j",
    "agents": [{"name": "oracle"}],
    "datasets": [{"path": "/d"}],
}


def _messages(err: pytest.ExceptionInfo[InvalidInput]) -> list[str]:
    return [str(p) for p in err.value.problems]


# --- environment.type: one meaning per value ---------------------------------------------------


@pytest.mark.parametrize(
    ("written", "on_cluster", "pods", "bridge"),
    [
        ("docker", "kubernetes", True, False),
        ("kubernetes", "kubernetes", True, False),
        ("k8s", "kubernetes", True, False),
        (" Docker ", "kubernetes", True, False),
        ("modal", "modal", False, True),
        ("daytona", "daytona", False, True),
        ("e2b", "e2b", False, True),
    ],
)
def test_each_environment_type_has_one_meaning_on_a_cluster(
    written: str, on_cluster: str, pods: bool, bridge: bool
) -> None:
    kind = EnvironmentType(EnvironmentType.parse(written))
    assert kind.on_cluster() == on_cluster
    assert kind.runs_as_pods is pods
    assert EnvironmentType(on_cluster).runs_on_bridge is bridge
    assert kind.refusal_on_cluster() is None  # Pods, or the bridge's sandboxes


def test_local_mode_s_host_sandbox_is_refused_on_a_cluster() -> None:
    refusal = EnvironmentType.LOCAL.refusal_on_cluster()
    assert refusal is not None
    assert refusal.startswith("'local': the host sandbox runs trials on the machine")
    assert not EnvironmentType.LOCAL.runs_on_bridge


def test_job_yaml_defaults_to_docker_and_a_rollout_job_to_kubernetes() -> None:
    assert parse_job(JOB).environment.type is EnvironmentType.DOCKER
    spec = RolloutJobSpec.model_validate(
        {"agents": [{"name": "oracle"}], "datasets": [{"name": "d", "digest": "a" * 64}]}
    )
    assert spec.environment.type is EnvironmentType.KUBERNETES
    # One concept: the resource's environment is job.yaml's, with another default type.
    assert isinstance(spec.environment, EnvironmentSettings)
    assert ClusterEnvironmentSettings.model_fields.keys() == EnvironmentSettings.model_fields.keys()


# --- job.yaml: snake_case only, the seed's preserveEnv -------------------------------------------


def test_job_yaml_refuses_the_resource_spelling_and_suggests_its_own() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_job({**JOB, "nAttempts": 2, "environment": {"forceBuild": True}})
    assert sorted(_messages(err)) == [
        "job.yaml: environment.forceBuild: unknown key 'forceBuild' (did you mean 'force_build'?)",
        "job.yaml: nAttempts: unknown key 'nAttempts' (did you mean 'n_attempts'?)",
    ]


def test_job_yaml_keeps_the_seeds_preserve_env_key_both_ways() -> None:
    for key in ("preserveEnv", "preserve_env"):
        job = parse_job({**JOB, "environment": {key: True}})
        assert job.environment.preserve_env is True
        environment = job_to_config_json(job)["environment"]
        assert environment["preserveEnv"] is True
        assert "preserve_env" not in environment
    with pytest.raises(InvalidInput) as err:
        parse_job({**JOB, "environment": {"preserv_env": True}})
    assert "did you mean 'preserveEnv'?" in _messages(err)[0]


def test_a_float_override_is_a_quantity_in_job_yaml_and_refused_in_a_resource() -> None:
    job = parse_job({**JOB, "environment": {"override_cpus": 0.5}})
    assert job.environment.override_cpus == "0.5"
    with pytest.raises(ValueError, match="expected an integer or a quantity string"):
        ClusterEnvironmentSettings.model_validate({"overrideCpus": 0.5})


def test_config_json_begins_with_the_jobs_name_as_job_yaml_does() -> None:
    config = job_to_config_json(parse_job(JOB))
    assert next(iter(config)) == "name"
    assert parse_job(config) == parse_job(JOB)
    assert next(iter(JobConfig.model_fields)) == "name"
    assert next(iter(RolloutJobSpec.model_fields)) == "job_name"


# --- result.json and status share their parts ---------------------------------------------------


def test_an_agents_figures_are_one_model_spelled_per_surface() -> None:
    figures = AgentSummary(total_trials=3, completed_trials=2, failed_trials=1, pass_rate=0.5)
    result = JobResult(job_name="j", total_trials=3, completed_trials=2, failed_trials=1)
    result.agents["a"] = figures
    in_file = json.loads(result.to_json())["agents"]["a"]
    assert in_file == {
        "total_trials": 3,
        "completed_trials": 2,
        "failed_trials": 1,
        "pass_rate": 0.5,
        "mean_reward": None,
        "total_cost": None,
    }
    in_status = figures.model_dump(mode="json", exclude_none=True)
    assert in_status == {"total": 3, "completed": 2, "failed": 1, "passRate": 0.5}
    assert AgentSummary.model_validate(in_status) == figures
    with pytest.raises(ValueError, match="exceed total_trials"):
        AgentSummary.model_validate({"total": 1, "completed": 1, "failed": 1})


def test_a_result_file_stays_snake_case_inside_and_refuses_camel_case() -> None:
    text = TrialResult(
        task_name="t",
        dataset_name="d",
        agent_name="a",
        attempt=1,
        durations=TrialDurations(total_sec=1.5),
    ).to_json()
    assert '"total_sec": 1.5' in text
    assert "totalSec" not in text
    camel = text.replace('"total_sec"', '"totalSec"')
    with pytest.raises(InvalidInput, match=r"durations\.totalSec"):
        TrialResult.from_json(camel)


# --- what the previous version wrote is still read ----------------------------------------------


@pytest.mark.parametrize(
    ("model", "file"), [(RolloutJob, "rolloutjob.json"), (RolloutTrial, "rollouttrial.json")]
)
def test_resources_written_by_the_previous_version_are_read_and_written_back_unchanged(
    model: type[RolloutJob] | type[RolloutTrial], file: str
) -> None:
    written = json.loads((COMPAT / file).read_text(encoding="utf-8"))
    resource = model.model_validate(written)
    assert resource.manifest() == written


def test_the_previous_versions_status_reads_into_the_shared_models() -> None:
    job = RolloutJob.model_validate_json((COMPAT / "rolloutjob.json").read_text(encoding="utf-8"))
    assert job.status is not None
    coder = job.status.agents["coder"]
    assert (coder.total_trials, coder.completed_trials, coder.failed_trials) == (2, 1, 1)
    assert job.spec.environment.preserve_env is True
    trial = RolloutTrial.model_validate_json(
        (COMPAT / "rollouttrial.json").read_text(encoding="utf-8")
    )
    assert trial.status is not None
    assert trial.status.durations is not None
    assert trial.status.durations.agent_execution_sec == 900.0
    assert trial.spec.timeouts.agent_sec == 900.0
