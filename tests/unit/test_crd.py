"""The CRDs in crds/: up to date, structural, accepted by Kubernetes' own CRD schema, and in
agreement with the models on sample objects."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from crd_rules import structural_violations, validate_object
from paths import REPO
from rollout.api.crd import HEADER, custom_resource_definition, render_crds, stale_crds
from rollout.api.errors import ErrorType
from rollout.api.layout import check_component
from rollout.api.quantity import QUANTITY_PATTERN, parse_quantity
from rollout.api.resources import (
    AgentSpec,
    ConditionStatus,
    EnvVar,
    JobConditionReason,
    JobConditionType,
    RolloutJob,
    RolloutJobSpec,
    RolloutTrial,
    find_condition,
    set_condition,
)
from rollout.api.rules import DIGEST_PATTERN, NAME_PATTERN
from rollout.api.schema import SchemaError, structural_schema

CRDS = REPO / "crds"
JOB_CRD = CRDS / "rollout.dev_rolloutjobs.yaml"
TRIAL_CRD = CRDS / "rollout.dev_rollouttrials.yaml"
OLDEST_KUBERNETES = (
    "1.25.0"  # the oldest schema kubernetes-validate ships; the project targets 1.24+
)
DIGEST = "0123456789abcdef" * 4


def schema_of(crd_file: Path) -> dict[str, Any]:
    crd = yaml.safe_load(crd_file.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def sample_job() -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "my-eval-run", "namespace": "evals"},
        "spec": {
            "jobName": "my-eval-run",
            "nAttempts": 2,
            "nConcurrentTrials": 8,
            "timeoutMultiplier": 1.5,
            "logLevel": "info",
            "environment": {"type": "kubernetes", "overrideCpus": 2, "overrideMemory": "4Gi"},
            "verifier": {"maxTimeoutSec": 900},
            "metrics": [{"type": "mean"}, {"type": "max"}],
            "agents": [
                {
                    "name": "cpe",
                    "execute": "cpe -n ${ROLLOUT_TASK_INSTRUCTION}",
                    "env": [
                        {"name": "MODEL", "value": "sonnet"},
                        {
                            "name": "ANTHROPIC_API_KEY",
                            "valueFrom": {
                                "secretKeyRef": {
                                    "name": "my-eval-run-agent-env",
                                    "key": "cpe.ANTHROPIC_API_KEY",
                                }
                            },
                        },
                    ],
                },
                {"name": "oracle"},
            ],
            "datasets": [
                {"name": "terminal-bench", "digest": DIGEST, "source": {"path": "/data/tb"}}
            ],
            "storage": {"bucket": "results", "prefix": "team-a", "pathStyle": True},
            "runnerImage": "ghcr.io/example/rollout-runner:0.1.0",
            "pod": {
                "nodeSelector": {"pool": "evals"},
                "tolerations": [
                    {"key": "evals", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}
                ],
                "runtimeClassName": "gvisor",
                "imagePullSecrets": [{"name": "ghcr"}],
            },
            "maxInfraRetries": 3,
            "ttlSecondsAfterFinished": 3600,
        },
        "status": {
            "phase": "Running",
            "observedGeneration": 1,
            "counts": {
                "total": 40,
                "pending": 10,
                "running": 8,
                "finished": 22,
                "completed": 20,
                "failed": 2,
            },
            "passRate": 0.85,
            "meanReward": 0.85,
            "totalCost": 1.234,
            "metrics": [{"type": "mean", "value": 0.85}, {"type": "max", "value": None}],
            "agents": {
                "cpe": {"total": 20, "completed": 9, "failed": 2, "passRate": 0.7},
                "oracle": {"total": 20, "completed": 11, "failed": 0, "meanReward": 1.0},
            },
            "conditions": [
                {
                    "type": "Valid",
                    "status": "True",
                    "reason": "SpecValid",
                    "message": "",
                    "lastTransitionTime": "2025-01-15T10:00:00Z",
                    "observedGeneration": 1,
                }
            ],
            "startedAt": "2025-01-15T10:00:00Z",
            "resultUri": "s3://results/team-a/jobs/my-eval-run/result.json",
        },
    }


def sample_trial() -> dict[str, Any]:
    return {
        "apiVersion": "rollout.dev/v1alpha1",
        "kind": "RolloutTrial",
        "metadata": {"name": "my-eval-run-cpe-tb-hello-1-abc", "namespace": "evals"},
        "spec": {
            "jobName": "my-eval-run",
            "environmentType": "kubernetes",
            "agent": {"name": "cpe", "execute": "cpe", "env": [{"name": "MODEL", "value": "x"}]},
            "datasetName": "terminal-bench",
            "taskName": "hello-world",
            "attempt": 1,
            "taskContentHash": DIGEST,
            "image": "some-org/some-name:some-tag",
            "resources": {"cpus": "1", "memory": "2G", "storage": "10G", "gpus": 0},
            "timeouts": {
                "agentInstallSec": 300.0,
                "agentSec": 600.0,
                "verifierSec": 120.0,
                "buildSec": 600.0,
            },
            "instructionPath": "/tmp/instruction.md",
            "verifierDisabled": False,
            "agentUser": "agent",
            "verifierUser": 0,
            "workdir": "/app",
            "storage": {"bucket": "results"},
            "runnerImage": "ghcr.io/example/rollout-runner:0.1.0",
            "preserveEnv": False,
            "logLevel": "error",
        },
        "status": {
            "phase": "Failed",
            "reward": None,
            "cost": 0.012,
            "error": {
                "type": "agent_execution_timeout",
                "message": "Agent execution exceeded timeout of 600 seconds",
            },
            "durations": {
                "totalSec": 720.0,
                "environmentSetupSec": 115.2,
                "agentSetupSec": 4.8,
                "agentExecutionSec": 600.0,
                "verifierSec": None,
            },
            "timestamps": {
                "startedAt": "2025-01-15T11:00:00Z",
                "agentExecutionStartedAt": "2025-01-15T11:02:00Z",
                "endedAt": "2025-01-15T11:12:00Z",
            },
            "resultUri": "s3://results/jobs/my-eval-run/cpe/terminal-bench/hello-world__1/result.json",
            "podName": "my-eval-run-cpe-tb-hello-1-abc-pod",
            "infraRetries": 1,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "TrialError",
                    "message": "agent_execution_timeout",
                    "lastTransitionTime": "2025-01-15T11:12:00Z",
                }
            ],
        },
    }


# --- crds/ is what the models generate ------------------------------------------------------------


def test_crds_directory_is_up_to_date() -> None:
    stale = stale_crds(CRDS)
    assert stale == [], "crds/ is stale; run: python -m rollout.api.crd --write\n" + "\n".join(
        stale
    )


def test_generation_is_deterministic() -> None:
    assert render_crds() == render_crds()
    assert sorted(render_crds()) == [
        "rollout.dev_rolloutimages.yaml",
        "rollout.dev_rolloutjobs.yaml",
        "rollout.dev_rollouttrials.yaml",
    ]
    for text in render_crds().values():
        assert text.startswith(HEADER)
        assert "python -m rollout.api.crd --write" in text.splitlines()[0]


def test_check_command_fails_on_stale_crds_and_write_fixes_them(tmp_path: Path) -> None:
    for name, text in render_crds().items():
        (tmp_path / name).write_text(text)
    stale = tmp_path / "rollout.dev_rollouttrials.yaml"
    stale.write_text(stale.read_text().replace("Attempt number.", "Attempt no."))
    (tmp_path / "rollout.dev_oldthings.yaml").write_text("kind: CustomResourceDefinition\n")

    def crd_command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rollout.api.crd", *args, "--dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    checked = crd_command("--check")
    assert checked.returncode == 1
    assert f"{stale}: out of date" in checked.stderr
    assert "-      description: Attempt no.\n+      description: Attempt number." in checked.stderr
    assert "rollout.dev_oldthings.yaml: not generated by any model" in checked.stderr
    assert "run: python -m rollout.api.crd --write" in checked.stderr
    assert crd_command("--write").returncode == 0
    (tmp_path / "rollout.dev_oldthings.yaml").unlink()
    rechecked = crd_command("--check")
    assert rechecked.returncode == 0, rechecked.stderr


# --- what an apiserver accepts --------------------------------------------------------------------


# The free-form request parameters of the llm_judgement evaluator (seed 002's
# evaluator_extra_params): the only objects whose keys the models do not know.
OPEN_PATHS = {
    JOB_CRD: frozenset(
        {"<root>.spec.evaluatorExtraParams", "<root>.spec.agents[].model.extraParams"}
    ),
    TRIAL_CRD: frozenset(
        {"<root>.spec.rows.evaluator.extraParams", "<root>.spec.agent.model.extraParams"}
    ),
}


@pytest.mark.parametrize("crd_file", [JOB_CRD, TRIAL_CRD], ids=["RolloutJob", "RolloutTrial"])
def test_schema_is_structural(crd_file: Path) -> None:
    assert structural_violations(schema_of(crd_file), open_paths=OPEN_PATHS[crd_file]) == []


@pytest.mark.parametrize("crd_file", [JOB_CRD, TRIAL_CRD], ids=["RolloutJob", "RolloutTrial"])
def test_crd_is_a_valid_custom_resource_definition(crd_file: Path) -> None:
    crd = yaml.safe_load(crd_file.read_text())
    assert kubernetes_validate.validate(crd, OLDEST_KUBERNETES, strict=True) == "1.25"


def test_plain_pydantic_schema_would_be_refused() -> None:
    # The reason crd.py exists: model_json_schema() is not structural.
    raw = RolloutJobSpec.model_json_schema(by_alias=True)
    found = structural_violations({"type": "object", "properties": {"spec": raw}})
    assert any("'$defs' is not allowed" in f for f in found)
    assert any("'title' is not allowed" in f for f in found)
    assert any("anyOf is only allowed as int-or-string" in f for f in found)


BROKEN: list[tuple[str, dict[str, Any], str]] = [
    ("no type", {"description": "x"}, "no type"),
    ("ref", {"description": "x", "$ref": "#/$defs/A"}, "'$ref' is not allowed"),
    ("title", {"description": "x", "type": "string", "title": "X"}, "'title' is not allowed"),
    (
        "null union",
        {"description": "x", "anyOf": [{"type": "string"}, {"type": "null"}]},
        "anyOf is only allowed",
    ),
    ("null type", {"description": "x", "type": "null"}, "is not one of"),
    (
        "properties with additionalProperties",
        {
            "description": "x",
            "type": "object",
            "properties": {"a": {"type": "string", "description": "a"}},
            "additionalProperties": False,
        },
        "properties and additionalProperties together",
    ),
    ("invalid default", {"description": "x", "type": "integer", "default": "1"}, "default"),
    (
        "numeric exclusiveMinimum",
        {"description": "x", "type": "number", "exclusiveMinimum": 0},
        "exclusiveMinimum must be a boolean",
    ),
    ("array without items", {"description": "x", "type": "array"}, "needs one items schema"),
    ("no description", {"type": "string"}, "no description"),
    (
        "lookahead pattern",
        {"description": "x", "type": "string", "pattern": "^(?!x)"},
        "not RE2",
    ),
    (
        "open object",
        {"description": "x", "type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "preserve-unknown-fields where it was not expected",
    ),
    (
        "list-map key not required",
        {
            "description": "x",
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": {
                "description": "i",
                "type": "object",
                "properties": {"type": {"description": "t", "type": "string"}},
            },
        },
        "must be required or defaulted",
    ),
    ("enum of wrong type", {"description": "x", "type": "string", "enum": [1]}, "enum value 1"),
]


@pytest.mark.parametrize(
    ("node", "rule"), [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN]
)
def test_checker_catches_each_rule(node: dict[str, Any], rule: str) -> None:
    schema = {"type": "object", "properties": {"field": node}}
    found = structural_violations(schema)
    assert any(rule in f for f in found), found


def test_int_or_string_is_allowed_and_only_so() -> None:
    good = {
        "description": "q",
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
    }
    assert structural_violations({"type": "object", "properties": {"q": good}}) == []
    bad = {**good, "anyOf": [{"type": "integer"}, {"type": "number"}]}
    assert structural_violations({"type": "object", "properties": {"q": bad}}) != []


def test_recursive_or_unstructural_models_are_refused() -> None:
    from pydantic import BaseModel

    class Node(BaseModel):
        """A tree."""

        children: list[Node] = []

    class Union(BaseModel):
        """A union."""

        value: int | list[int]

    with pytest.raises(SchemaError, match="refers to itself"):
        structural_schema(Node)
    with pytest.raises(SchemaError, match="not a structural schema"):
        structural_schema(Union)


# --- the CRD's shape ------------------------------------------------------------------------------


def test_names_scope_and_versions() -> None:
    job = yaml.safe_load(JOB_CRD.read_text())
    trial = yaml.safe_load(TRIAL_CRD.read_text())
    assert job["metadata"]["name"] == "rolloutjobs.rollout.dev"
    assert trial["metadata"]["name"] == "rollouttrials.rollout.dev"
    for crd, kind, short in ((job, "RolloutJob", "rj"), (trial, "RolloutTrial", "rt")):
        spec = crd["spec"]
        assert spec["group"] == "rollout.dev"
        assert spec["scope"] == "Namespaced"
        assert spec["names"]["kind"] == kind
        assert spec["names"]["shortNames"] == [short]
        assert spec["names"]["categories"] == ["rollout"]
        (version,) = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}


def column_names(crd_file: Path) -> list[str]:
    version = yaml.safe_load(crd_file.read_text())["spec"]["versions"][0]
    return [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]


def test_printer_columns_show_progress() -> None:
    assert column_names(JOB_CRD) == ["Phase", "Completed", "Failed", "Total", "Pass Rate", "Age"]
    assert column_names(TRIAL_CRD) == [
        "Phase",
        "Agent",
        "Task",
        "Attempt",
        "Reward",
        "Error",
        "Class",
        "Age",
    ]


@pytest.mark.parametrize("crd_file", [JOB_CRD, TRIAL_CRD], ids=["RolloutJob", "RolloutTrial"])
def test_printer_columns_point_at_fields_of_the_right_type(crd_file: Path) -> None:
    version = yaml.safe_load(crd_file.read_text())["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"]
        if path == ".metadata.creationTimestamp":
            continue
        node = schema
        for part in path.removeprefix(".").split("."):
            assert part in node.get("properties", {}), f"{path}: no field {part!r}"
            node = node["properties"][part]
        assert node["type"] == column["type"], path


def test_status_has_no_defaults_and_spec_defaults_match_the_models() -> None:
    schema = schema_of(JOB_CRD)
    assert "default" not in yaml.safe_dump(schema["properties"]["status"])
    spec = schema["properties"]["spec"]["properties"]
    assert spec["nAttempts"]["default"] == 1
    assert spec["nConcurrentTrials"]["default"] == 4
    assert spec["timeoutMultiplier"]["default"] == 1.0
    assert spec["logLevel"]["default"] == "error"
    assert spec["instructionPath"]["default"] == "/tmp/instruction.md"
    assert spec["maxInfraRetries"]["default"] == 2
    assert spec["environment"]["properties"]["type"]["default"] == "kubernetes"


def test_quantities_are_int_or_string() -> None:
    environment = schema_of(JOB_CRD)["properties"]["spec"]["properties"]["environment"]
    for field in ("overrideCpus", "overrideMemory", "overrideStorage"):
        node = environment["properties"][field]
        assert node["x-kubernetes-int-or-string"] is True
        assert "type" not in node
        assert node["nullable"] is True


def test_conditions_are_a_list_map_keyed_by_type() -> None:
    for crd_file in (JOB_CRD, TRIAL_CRD):
        conditions = schema_of(crd_file)["properties"]["status"]["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_every_error_type_is_in_the_trial_schema() -> None:
    status = schema_of(TRIAL_CRD)["properties"]["status"]["properties"]
    assert status["error"]["properties"]["type"]["enum"] == [e.value for e in ErrorType]


# --- samples: the schema and the models agree -----------------------------------------------------


def test_sample_rollout_job_validates() -> None:
    sample = sample_job()
    validate_object(schema_of(JOB_CRD), sample)
    model = RolloutJob.model_validate(sample)
    assert model.job_name == "my-eval-run"
    assert model.spec.environment.override_cpus == 2
    assert model.status is not None
    assert model.status.agents["cpe"].pass_rate == 0.7
    manifest = model.manifest()
    assert manifest["metadata"] == sample["metadata"]
    assert manifest["status"]["metrics"] == [{"type": "mean", "value": 0.85}, {"type": "max"}]
    assert manifest["spec"]["agents"] == [
        *sample["spec"]["agents"][:1],
        {"name": "oracle", "env": []},
    ]
    validate_object(schema_of(JOB_CRD), manifest)
    assert RolloutJob.model_validate(manifest) == model


def test_sample_rollout_trial_validates() -> None:
    sample = sample_trial()
    validate_object(schema_of(TRIAL_CRD), sample)
    model = RolloutTrial.model_validate(sample)
    assert model.status is not None
    assert model.status.error is not None
    assert model.status.error.type is ErrorType.AGENT_EXECUTION_TIMEOUT
    validate_object(schema_of(TRIAL_CRD), model.manifest())


def set_in(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    node: Any = changed
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value
    return changed


WRONG_JOBS: list[tuple[str, Any]] = [
    ("spec.nAttempts", 0),
    ("spec.timeoutMultiplier", 0),
    ("spec.logLevel", "verbose"),
    ("spec.environment.type", "podman"),
    ("spec.environment.overrideCpus", 1.5),
    ("spec.environment.overrideMemory", "lots"),
    ("spec.agents", []),
    ("spec.agents.0.env.0.value", 42),
    ("spec.agents.0.env.0.name", "MY-KEY"),
    ("spec.datasets.0.digest", "sha1:abc"),
    ("spec.datasets.0.name", ".."),
    ("spec.pod.tolerations.0.effect", "Sometimes"),
    ("spec.nAttempt", 2),
    ("status.phase", "Bogus"),
    ("status.passRate", 1.5),
    ("status.counts.total", -1),
    ("status.conditions.0.status", "Yes"),
]


@pytest.mark.parametrize(("path", "value"), WRONG_JOBS, ids=[p for p, _ in WRONG_JOBS])
def test_wrong_rollout_job_is_rejected_by_schema_and_model(path: str, value: Any) -> None:
    wrong = set_in(sample_job(), path, value)
    with pytest.raises(jsonschema.ValidationError):
        validate_object(schema_of(JOB_CRD), wrong)
    with pytest.raises(ValidationError):
        RolloutJob.model_validate(wrong)


WRONG_TRIALS: list[tuple[str, Any]] = [
    ("spec.attempt", 0),
    ("spec.taskContentHash", "abc"),
    ("spec.resources.cpus", "one"),
    ("spec.timeouts.agentSec", 0),
    ("spec.instructionPath", "tmp/instruction.md"),
    ("spec.agentUser", 1.5),
    ("status.error.type", "agent_crashed"),
    ("status.reward", "high"),
    ("status.infraRetries", -1),
]


@pytest.mark.parametrize(("path", "value"), WRONG_TRIALS, ids=[p for p, _ in WRONG_TRIALS])
def test_wrong_rollout_trial_is_rejected_by_schema_and_model(path: str, value: Any) -> None:
    wrong = set_in(sample_trial(), path, value)
    with pytest.raises(jsonschema.ValidationError):
        validate_object(schema_of(TRIAL_CRD), wrong)
    with pytest.raises(ValidationError):
        RolloutTrial.model_validate(wrong)


@pytest.mark.parametrize(
    "name",
    [
        "cpe",
        "Claude Code",
        ".hidden",
        "...",
        "a.b",
        "2025-01-15__10-30-00",
        "",
        ".",
        "..",
        "a/b",
        "a\\b",
        "a\0b",
        "../x",
        "x/..",
        "ünïcode",
        " spaced ",
    ],
)
def test_name_pattern_is_the_layout_rule(name: str) -> None:
    try:
        check_component(name)
        allowed = True
    except ValueError:
        allowed = False
    assert (re.search(NAME_PATTERN, name) is not None) == allowed


@pytest.mark.parametrize(
    "text",
    [
        "1",
        "500m",
        "2G",
        "10Gi",
        "0.5",
        ".5",
        "1e3",
        "1E",
        "2048",
        "1.5Ki",
        "x",
        "1GB",
        "-1",
        "",
        "1 G",
        "1e",
        "Gi",
    ],
)
def test_quantity_pattern_matches_the_quantity_parser(text: str) -> None:
    try:
        parse_quantity(text)
        parses = not text.startswith(("-", "+")) and text == text.strip()
    except ValueError:
        parses = False
    assert (re.search(QUANTITY_PATTERN, text) is not None) == parses


def test_digest_pattern() -> None:
    assert re.search(DIGEST_PATTERN, DIGEST)
    assert not re.search(DIGEST_PATTERN, "sha256:" + DIGEST)
    assert not re.search(DIGEST_PATTERN, DIGEST.upper())


# --- the models' own rules ------------------------------------------------------------------------


def test_agent_rules_are_the_job_yaml_rules() -> None:
    with pytest.raises(ValidationError, match="takes no 'execute' script"):
        AgentSpec(name="oracle", execute="bash /oracle/solve.sh")
    with pytest.raises(ValidationError, match="needs an 'execute' script"):
        AgentSpec(name="my-cpe")
    with pytest.raises(ValidationError, match="duplicate env var 'A'"):
        AgentSpec(name="cpe", execute="x", env=[EnvVar(name="A", value="1"), EnvVar(name="A")])
    with pytest.raises(ValidationError, match="both 'value' and 'valueFrom'"):
        EnvVar.model_validate(
            {"name": "A", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
        )


def test_spec_refuses_duplicate_agents_and_datasets() -> None:
    sample = sample_job()
    sample["spec"]["agents"].append({"name": "cpe", "execute": "again"})
    sample["spec"]["datasets"].append({"name": "terminal-bench", "digest": DIGEST})
    with pytest.raises(ValidationError) as caught:
        RolloutJob.model_validate(sample)
    text = str(caught.value)
    assert "duplicate agent name 'cpe' (also agents[0])" in text
    assert "duplicate dataset name 'terminal-bench' (also datasets[0])" in text


def test_job_name_defaults_to_metadata_name() -> None:
    sample = sample_job()
    del sample["spec"]["jobName"]
    assert RolloutJob.model_validate(sample).job_name == "my-eval-run"


def test_crd_builder_reads_the_model_declarations() -> None:
    crd = custom_resource_definition(RolloutTrial)
    assert crd["spec"]["names"]["plural"] == "rollouttrials"
    assert [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]][-1] == "Age"


# --- conditions -----------------------------------------------------------------------------------


def test_set_condition_keeps_transition_time_unless_status_changes() -> None:
    t0 = datetime(2025, 1, 15, 10, 0, 0, 123456, tzinfo=UTC)
    t1 = datetime(2025, 1, 15, 11, 0, 0, tzinfo=UTC)
    valid, running = JobConditionType.VALID, JobConditionType.RUNNING
    conditions = set_condition(
        [], valid, ConditionStatus.TRUE, JobConditionReason.SPEC_VALID, now=t0
    )
    conditions = set_condition(
        conditions, running, ConditionStatus.TRUE, JobConditionReason.TRIALS_RUNNING, now=t0
    )
    again = set_condition(
        conditions, valid, ConditionStatus.TRUE, JobConditionReason.SPEC_VALID, "ok", now=t1
    )
    assert [c.type for c in again] == ["Valid", "Running"]
    first = find_condition(again, valid)
    assert first is not None
    assert first.message == "ok"
    assert first.last_transition_time == t0.replace(microsecond=0)
    flipped = set_condition(
        again, valid, ConditionStatus.FALSE, JobConditionReason.INVALID_SPEC, "bad", now=t1
    )
    changed = find_condition(flipped, valid)
    assert changed is not None
    assert (changed.status, changed.reason, changed.last_transition_time) == (
        "False",
        "InvalidSpec",
        t1,
    )
    assert find_condition(flipped, "Complete") is None
    assert conditions[0].last_transition_time == t0.replace(microsecond=0)  # input not changed
