"""job.yaml -> RolloutJob (+ Secret) -> job.yaml: equal jobs, no secret value in the resource."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from crd_rules import validate_object
from paths import REPO
from rollout.api.errors import InvalidInput
from rollout.api.job import JobConfig, job_to_config_json, load_job, parse_job
from rollout.api.names import AGENT_ENV_ANNOTATION
from rollout.api.resources import DatasetRef, PodOverrides, RolloutJob, StorageSpec, Toleration
from rollout.api.translate import (
    job_to_rollout_job,
    resource_name,
    rollout_job_to_job,
    secret_key,
)

SEED_JOB = REPO / "tests" / "data" / "seed" / "job.yaml"
JOB_CRD = REPO / "crds" / "rollout.dev_rolloutjobs.yaml"
STORAGE = StorageSpec(
    bucket="results", prefix="evals", endpoint="http://minio:9000", path_style=True
)
RUNNER = "ghcr.io/example/rollout-runner:0.1.0"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def digest(n: int) -> str:
    return f"{n:064x}"


def refs(*names: str) -> list[DatasetRef]:
    return [DatasetRef(name=name, digest=digest(i)) for i, name in enumerate(names)]


def crd_schema() -> dict[str, Any]:
    schema: dict[str, Any] = yaml.safe_load(JOB_CRD.read_text())["spec"]["versions"][0]["schema"][
        "openAPIV3Schema"
    ]
    return schema


def translate(job: JobConfig, environ: dict[str, str], *names: str, **kwargs: Any) -> Any:
    return job_to_rollout_job(
        job,
        namespace="evals",
        datasets=refs(*names),
        environ=environ,
        storage=STORAGE,
        runner_image=RUNNER,
        **kwargs,
    )


def two_agent_job() -> JobConfig:
    return parse_job(
        {
            "name": "My Eval",
            "n_attempts": 3,
            "n_concurrent_trials": 16,
            "timeout_multiplier": 2.5,
            "log_level": "debug",
            "instruction_path": "/work/instruction.md",
            "environment": {
                "type": "k8s",
                "force_build": True,
                "preserveEnv": True,
                "override_cpus": "500m",
                "override_memory": 4096,
            },
            "verifier": {"override_timeout_sec": 120, "max_timeout_sec": 600, "disable": False},
            "metrics": [{"type": "mean"}, {"type": "min"}, {"type": "sum"}],
            "isolate_agents": True,
            "agents": [
                {
                    "name": "Claude Code",
                    "description": "Anthropic's CLI",
                    "install": "npm i -g @anthropic-ai/claude-code",
                    "execute": 'claude -p "$(cat $ROLLOUT_TASK_INSTRUCTION)"',
                    "env": {
                        "API_KEY": "${ANTHROPIC_API_KEY}",
                        "MODEL": "sonnet",
                        "AUTH": "Bearer ${TOKEN}",
                    },
                },
                {
                    "name": "codex",
                    "execute": "codex exec",
                    "env": {"API_KEY": "${OPENAI_API_KEY}", "MODEL": "gpt-5"},
                },
            ],
            "datasets": [
                {"path": "/data/hello"},
                {"registry": {"url": "https://example.com/registry.json"}, "name": "tb"},
            ],
        }
    )


ENVIRON = {
    "MY_API_KEY": "sk-seed-secret-value",
    "ANTHROPIC_API_KEY": "sk-ant-secret-1",
    "OPENAI_API_KEY": "sk-oai-secret-2",
    "TOKEN": "tok-secret-3",
}
SECRET_VALUES = ["sk-seed-secret-value", "sk-ant-secret-1", "sk-oai-secret-2", "tok-secret-3"]


def secret_values_in(text: str) -> list[str]:
    encoded = [base64.b64encode(v.encode()).decode() for v in SECRET_VALUES]
    return [v for v in SECRET_VALUES + encoded if v in text]


# --- round trips ----------------------------------------------------------------------------------


def test_seed_job_round_trips() -> None:
    job = load_job(SEED_JOB)
    rollout_job, secret = translate(job, ENVIRON, "path-to-dataset", "reg-a", "reg-b")
    manifest = rollout_job.manifest()
    assert secret_values_in(json.dumps(manifest)) == []
    # Through JSON, as the apiserver would store and return it.
    stored = json.loads(json.dumps(manifest))
    back = rollout_job_to_job(stored)
    assert back == job
    assert job_to_config_json(back) == job_to_config_json(job)
    assert secret is not None
    assert secret["data"] == {
        "some-agent.MY_API_KEY": base64.b64encode(b"sk-seed-secret-value").decode()
    }


def test_two_agent_two_dataset_job_round_trips() -> None:
    job = two_agent_job()
    rollout_job, secret = translate(job, ENVIRON, "hello", "tb")
    stored = json.loads(json.dumps(rollout_job.manifest()))
    assert rollout_job_to_job(stored) == job
    assert rollout_job_to_job(rollout_job) == job
    assert secret is not None
    assert secret_values_in(json.dumps(stored)) == []
    assert secret_values_in(json.dumps(secret)) != []


def test_spec_carries_every_job_setting() -> None:
    rollout_job, _ = translate(two_agent_job(), ENVIRON, "hello", "tb")
    spec = rollout_job.manifest()["spec"]
    assert spec["jobName"] == "My Eval"
    assert (spec["nAttempts"], spec["nConcurrentTrials"], spec["timeoutMultiplier"]) == (3, 16, 2.5)
    assert (spec["logLevel"], spec["instructionPath"]) == ("debug", "/work/instruction.md")
    assert spec["environment"] == {
        "type": "kubernetes",
        "forceBuild": True,
        "preserveEnv": True,
        "overrideCpus": "500m",
        "overrideMemory": 4096,
    }
    assert spec["verifier"] == {
        "overrideTimeoutSec": 120.0,
        "maxTimeoutSec": 600.0,
        "disable": False,
    }
    assert spec["metrics"] == [{"type": "mean"}, {"type": "min"}, {"type": "sum"}]
    assert spec["isolateAgents"] is True
    assert [d["name"] for d in spec["datasets"]] == ["hello", "tb"]
    assert spec["datasets"][0]["source"] == {"path": "/data/hello"}
    assert spec["datasets"][1]["digest"] == digest(1)
    assert spec["storage"] == {
        "bucket": "results",
        "prefix": "evals",
        "endpoint": "http://minio:9000",
        "pathStyle": True,
    }
    assert spec["runnerImage"] == RUNNER
    validate_object(crd_schema(), rollout_job.manifest())


def test_secret_backed_and_literal_env() -> None:
    rollout_job, secret = translate(two_agent_job(), ENVIRON, "hello", "tb")
    manifest = rollout_job.manifest()
    secret_name = manifest["metadata"]["name"] + "-agent-env"
    claude, codex = manifest["spec"]["agents"]
    claude_key = secret_key("Claude Code", "API_KEY")
    assert claude["env"] == [
        {
            "name": "API_KEY",
            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": claude_key}},
        },
        {"name": "MODEL", "value": "sonnet"},
        {
            "name": "AUTH",
            "valueFrom": {
                "secretKeyRef": {"name": secret_name, "key": secret_key("Claude Code", "AUTH")}
            },
        },
    ]
    assert codex["env"][0]["valueFrom"]["secretKeyRef"]["key"] == "codex.API_KEY"
    assert codex["env"][1] == {"name": "MODEL", "value": "gpt-5"}
    assert secret is not None
    assert secret["metadata"] == {
        "name": secret_name,
        "namespace": "evals",
        "labels": {"rollout.dev/job": manifest["metadata"]["name"]},
    }
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {
        claude_key: "sk-ant-secret-1",
        secret_key("Claude Code", "AUTH"): "Bearer tok-secret-3",
        "codex.API_KEY": "sk-oai-secret-2",
    }
    annotation = json.loads(manifest["metadata"]["annotations"][AGENT_ENV_ANNOTATION])
    assert annotation == {
        "Claude Code": {"API_KEY": "${ANTHROPIC_API_KEY}", "AUTH": "Bearer ${TOKEN}"},
        "codex": {"API_KEY": "${OPENAI_API_KEY}"},
    }
    assert kubernetes_validate.validate(secret, "1.25.0", strict=True)


def test_no_references_means_no_secret() -> None:
    job = parse_job(
        {
            "name": "plain",
            "agents": [{"name": "a", "execute": "x", "env": {"MODEL": "m"}}, {"name": "oracle"}],
            "datasets": [{"path": "/d"}],
        }
    )
    rollout_job, secret = translate(job, {}, "d")
    assert secret is None
    assert AGENT_ENV_ANNOTATION not in rollout_job.metadata.annotations
    assert rollout_job_to_job(rollout_job) == job


def test_unset_variable_names_agent_key_and_variable() -> None:
    with pytest.raises(InvalidInput) as caught:
        translate(two_agent_job(), {"ANTHROPIC_API_KEY": "x"}, "hello", "tb", file="job.yaml")
    found = {(p.file, p.field) for p in caught.value.problems}
    assert found == {("job.yaml", "agents[0].env.AUTH"), ("job.yaml", "agents[1].env.API_KEY")}
    messages = " ".join(p.message for p in caught.value.problems)
    assert "TOKEN" in messages
    assert "OPENAI_API_KEY" in messages
    assert "'Claude Code'" in messages
    assert "'codex'" in messages


def test_seed_job_without_its_variable_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"agents\[0\]\.env\.MY_API_KEY: .*MY_API_KEY"):
        translate(load_job(SEED_JOB), {}, "a", "b", "c")


def test_cluster_settings_reach_the_spec() -> None:
    pod = PodOverrides(
        node_selector={"pool": "evals"},
        tolerations=[Toleration(key="gpu", operator="Exists", effect="NoSchedule")],
        runtime_class_name="gvisor",
    )
    rollout_job, _ = translate(
        two_agent_job(),
        ENVIRON,
        "hello",
        "tb",
        pod_overrides=pod,
        max_infra_retries=5,
        suspend=True,
        ttl_seconds_after_finished=600,
        secret_name="my-secret",
        labels={"team": "a"},
    )
    spec = rollout_job.manifest()["spec"]
    assert spec["pod"]["nodeSelector"] == {"pool": "evals"}
    assert spec["pod"]["tolerations"] == [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert (spec["maxInfraRetries"], spec["suspend"], spec["ttlSecondsAfterFinished"]) == (
        5,
        True,
        600,
    )
    assert spec["agents"][1]["env"][0]["valueFrom"]["secretKeyRef"]["name"] == "my-secret"
    assert rollout_job.metadata.labels == {
        "team": "a",
        "rollout.dev/job": rollout_job.metadata.name,
    }
    validate_object(crd_schema(), rollout_job.manifest())


# --- giving job.yaml back -------------------------------------------------------------------------


def test_secret_without_recorded_reference_has_no_job_yaml_form() -> None:
    rollout_job, _ = translate(load_job(SEED_JOB), ENVIRON, "a", "b", "c")
    manifest = json.loads(json.dumps(rollout_job.manifest()))
    del manifest["metadata"]["annotations"]
    with pytest.raises(InvalidInput) as caught:
        rollout_job_to_job(manifest)
    (problem,) = caught.value.problems
    assert problem.file == "RolloutJob evals/my-eval-run"
    assert problem.field == "spec.agents[0].env[0]"
    assert AGENT_ENV_ANNOTATION in problem.message


def test_dataset_without_source_has_no_job_yaml_form() -> None:
    rollout_job, _ = translate(load_job(SEED_JOB), ENVIRON, "a", "b", "c")
    manifest = rollout_job.manifest()
    del manifest["spec"]["datasets"][1]["source"]
    with pytest.raises(InvalidInput) as caught:
        rollout_job_to_job(manifest)
    assert [p.field for p in caught.value.problems] == ["spec.datasets[1].source"]


def test_broken_annotation_is_reported() -> None:
    rollout_job, _ = translate(load_job(SEED_JOB), ENVIRON, "a", "b", "c")
    manifest = rollout_job.manifest()
    manifest["metadata"]["annotations"][AGENT_ENV_ANNOTATION] = "{not json"
    with pytest.raises(InvalidInput, match="not valid JSON"):
        rollout_job_to_job(manifest)


def test_invalid_manifest_is_reported_with_its_field() -> None:
    rollout_job, _ = translate(load_job(SEED_JOB), ENVIRON, "a", "b", "c")
    manifest = rollout_job.manifest()
    manifest["spec"]["nAttempts"] = 0
    with pytest.raises(InvalidInput) as caught:
        rollout_job_to_job(manifest)
    assert [p.field for p in caught.value.problems] == ["spec.nAttempts"]


def test_hand_written_rollout_job_gives_a_job_named_after_it() -> None:
    manifest = {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "nightly", "namespace": "evals"},
        "spec": {
            "agents": [{"name": "oracle"}],
            "datasets": [{"name": "hello", "digest": digest(7), "source": {"path": "/d"}}],
        },
    }
    job = rollout_job_to_job(manifest)
    assert job.name == "nightly"
    assert job.environment.type == "kubernetes"
    assert [a.name for a in job.agents] == ["oracle"]


# --- names ----------------------------------------------------------------------------------------


def test_dataset_refs_must_match_the_job() -> None:
    with pytest.raises(ValueError, match="3 datasets in the job but 2"):
        translate(load_job(SEED_JOB), ENVIRON, "a", "b")


def test_two_datasets_with_one_name_are_refused() -> None:
    with pytest.raises(InvalidInput) as caught:
        translate(load_job(SEED_JOB), ENVIRON, "same", "other", "same", file="job.yaml")
    (problem,) = caught.value.problems
    assert problem.field == "datasets[2].name"
    assert "duplicate dataset name 'same' (also datasets[0])" in problem.message


@pytest.mark.parametrize(
    ("job_name", "expected"),
    [
        ("my-eval-run", "my-eval-run"),
        ("nightly2", "nightly2"),
        ("2025-01-15__10-30-00", None),
        ("My Eval", None),
        ("UPPER", None),
        ("-leading", None),
        ("a" * 64, None),
        ("___", None),
        ("ünïcode", None),
    ],
)
def test_resource_name_is_a_dns_label(job_name: str, expected: str | None) -> None:
    name = resource_name(job_name)
    assert DNS_LABEL.match(name), name
    assert len(name) <= 63
    if expected is not None:
        assert name == expected
    else:
        assert name != job_name
        assert re.search(r"-[0-9a-f]{8}$", name)


def test_resource_names_stay_distinct() -> None:
    names = [
        "My Eval",
        "my eval",
        "my-eval",
        "my_eval",
        "2025-01-15__10-30-00",
        "2025-01-15-10-30-00",
    ]
    assert len({resource_name(n) for n in names}) == len(names)
    assert resource_name("2025-01-15__10-30-00").startswith("2025-01-15-10-30-00-")
    long_a, long_b = "x" * 70 + "a", "x" * 70 + "b"
    assert resource_name(long_a) != resource_name(long_b)


def test_rollout_job_name_comes_from_the_job_name() -> None:
    rollout_job, secret = translate(two_agent_job(), ENVIRON, "hello", "tb")
    assert rollout_job.metadata.name == resource_name("My Eval")
    assert rollout_job.spec.job_name == "My Eval"
    assert rollout_job.job_name == "My Eval"
    assert secret is not None
    assert secret["metadata"]["name"] == f"{rollout_job.metadata.name}-agent-env"


def test_secret_keys_are_valid_and_do_not_clash() -> None:
    keys = {
        secret_key("Claude Code", "API_KEY"),
        secret_key("Claude-Code", "API_KEY"),
        secret_key("claude code", "API_KEY"),
        secret_key("codex", "API_KEY"),
        secret_key("codex", "API_KEY2"),
    }
    assert len(keys) == 5
    assert all(SECRET_KEY.match(k) for k in keys)
    assert secret_key("codex", "API_KEY") == "codex.API_KEY"


def test_manifest_file_written_by_the_cli_is_valid(tmp_path: Path) -> None:
    rollout_job, secret = translate(load_job(SEED_JOB), ENVIRON, "a", "b", "c")
    path = tmp_path / "rolloutjob.yaml"
    path.write_text(yaml.safe_dump_all([rollout_job.manifest(), secret]))
    loaded = list(yaml.safe_load_all(path.read_text()))
    assert RolloutJob.model_validate(loaded[0]) == rollout_job
    assert loaded[1]["kind"] == "Secret"
