"""job.yaml / job.json: the seed's example, its defaults, and malformed files named precisely."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from paths import REPO
from rollout.api.environment import EnvironmentType
from rollout.api.envrefs import agent_env_references, resolve_agent_env, resolve_task_env
from rollout.api.errors import ErrorType, InvalidInput
from rollout.api.job import (
    JobConfig,
    config_json_text,
    default_job_name,
    job_to_config_json,
    load_job,
    parse_job,
    read_job_file,
)
from rollout.api.job_settings import LogLevel
from rollout.api.metrics import MetricType

SEED_JOB = REPO / "tests" / "data" / "seed" / "job.yaml"


def write(tmp_path: Path, data: Any, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def minimal() -> dict[str, Any]:
    return {
        "agents": [{"name": "cpe", "execute": "cpe run"}],
        "datasets": [{"path": "tasks"}],
    }


def only_problem(path: Path) -> tuple[str, str | None, str]:
    with pytest.raises(InvalidInput) as caught:
        load_job(path)
    problems = caught.value.problems
    assert len(problems) == 1, problems
    return problems[0].file, problems[0].field, problems[0].message


# --- the seed's example ---------------------------------------------------------------------------


def test_seed_example_parses_with_every_value() -> None:
    job = load_job(SEED_JOB)
    base = SEED_JOB.parent
    assert job.name == "my-eval-run"
    assert job.jobs_dir == "jobs"
    assert (job.n_attempts, job.n_concurrent_trials, job.timeout_multiplier) == (1, 4, 1.0)
    assert job.log_level is LogLevel.ERROR
    assert job.instruction_path == "/tmp/instruction.md"
    env = job.environment
    assert env.type is EnvironmentType.DOCKER
    assert (env.force_build, env.preserve_env) == (False, False)
    assert (env.override_cpus, env.override_memory, env.override_storage) == (1, "2G", "30G")
    # `override_timeout_sec: 0` and `max_timeout_sec: 0` mean "not set".
    assert job.verifier.override_timeout_sec is None
    assert job.verifier.max_timeout_sec is None
    assert job.verifier.disable is False
    assert [m.type for m in job.metrics] == [MetricType.MEAN]
    some_agent, oracle = job.agents
    assert some_agent.name == "some-agent"
    assert some_agent.description == "description of some-agent"
    assert some_agent.install == "install bash script"
    assert some_agent.execute == "execute bash script"
    assert some_agent.env == {"MY_API_KEY": "${MY_API_KEY}"}
    assert (oracle.name, oracle.install, oracle.execute, oracle.env) == ("oracle", None, None, {})
    assert oracle.is_oracle
    assert not some_agent.is_oracle
    local, registry_path, registry_url = job.datasets
    assert local.path == str(base / "path-to-dataset")
    assert local.registry is None
    assert registry_path.registry is not None
    assert registry_path.registry.path == str(base / "path-to-registry")
    assert (registry_path.name, registry_path.version) == ("dataset-name", "dataset-version")
    assert registry_url.registry is not None
    assert registry_url.registry.url == (
        "https://raw.githubusercontent.com/laude-institute/harbor/refs/heads/main/registry.json"
    )
    assert registry_url.registry.path is None


def test_defaults_are_the_seeds(tmp_path: Path) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    job = load_job(write(tmp_path, minimal()))
    after = datetime.now(UTC)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}__\d{2}-\d{2}-\d{2}", job.name)
    named_at = datetime.strptime(job.name, "%Y-%m-%d__%H-%M-%S").replace(tzinfo=UTC)
    assert before <= named_at <= after
    assert job.jobs_dir == "jobs"
    assert job.n_attempts == 1
    assert job.n_concurrent_trials == 4
    assert job.timeout_multiplier == 1.0
    assert job.log_level == "error"
    assert job.instruction_path == "/tmp/instruction.md"
    assert job.environment.type == "docker"
    assert job.environment.force_build is False
    assert job.environment.preserve_env is False
    assert job.environment.override_cpus is None
    assert job.environment.override_memory is None
    assert job.environment.override_storage is None
    assert job.verifier.override_timeout_sec is None
    assert job.verifier.max_timeout_sec is None
    assert job.verifier.disable is False
    assert job.metrics == []
    assert job.agents[0].env == {}
    assert job.agents[0].install is None


def test_default_name_is_utc() -> None:
    from datetime import timedelta, timezone

    eastern = datetime(2025, 1, 15, 5, 30, 0, tzinfo=timezone(timedelta(hours=-5)))
    assert default_job_name(eastern) == "2025-01-15__10-30-00"
    assert default_job_name(datetime(2025, 1, 15, 10, 30, 0, tzinfo=UTC)) == "2025-01-15__10-30-00"


def test_null_name_gets_the_default(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, {**minimal(), "name": None}))
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}__\d{2}-\d{2}-\d{2}", job.name)


def test_job_json_is_read_like_job_yaml(tmp_path: Path) -> None:
    data = yaml.safe_load(SEED_JOB.read_text())
    (tmp_path / "path-to-dataset").mkdir()
    as_json = write(tmp_path, json.dumps(data), "job.json")
    as_yaml = write(tmp_path, SEED_JOB.read_text(), "job.yml")
    assert load_job(as_json) == load_job(as_yaml)
    assert load_job(as_json).datasets[0].path == str(tmp_path / "path-to-dataset")


# --- decisions: normalisation ---------------------------------------------------------------------


@pytest.mark.parametrize("written", ["k8s", "K8s", "kubernetes", "Kubernetes"])
def test_k8s_and_kubernetes_are_one_type(tmp_path: Path, written: str) -> None:
    job = load_job(write(tmp_path, {**minimal(), "environment": {"type": written}}))
    assert job.environment.type is EnvironmentType.KUBERNETES


def test_preserve_env_keeps_the_seeds_key(tmp_path: Path) -> None:
    camel = load_job(write(tmp_path, {**minimal(), "environment": {"preserveEnv": True}}))
    snake = load_job(write(tmp_path, {**minimal(), "environment": {"preserve_env": True}}))
    assert camel.environment.preserve_env is True
    assert snake.environment.preserve_env is True
    assert job_to_config_json(snake)["environment"]["preserveEnv"] is True
    assert "preserve_env" not in job_to_config_json(snake)["environment"]


def test_overrides_keep_what_was_written(tmp_path: Path) -> None:
    environment = {"override_cpus": 0.5, "override_memory": 2048, "override_storage": "10Gi"}
    job = load_job(write(tmp_path, {**minimal(), "environment": environment}))
    assert job.environment.override_cpus == "0.5"
    assert job.environment.override_memory == 2048
    assert job.environment.override_storage == "10Gi"


def test_verifier_timeouts_keep_real_values(tmp_path: Path) -> None:
    verifier = {"override_timeout_sec": 30, "max_timeout_sec": 0}
    job = load_job(write(tmp_path, {**minimal(), "verifier": verifier}))
    assert job.verifier.override_timeout_sec == 30.0
    assert job.verifier.max_timeout_sec is None


def test_log_level_is_case_insensitive(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, {**minimal(), "log_level": "DEBUG"}))
    assert job.log_level is LogLevel.DEBUG


def test_relative_paths_are_relative_to_the_job_file(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    data = {
        "agents": [{"name": "oracle"}],
        "datasets": [
            {"path": "../suites/tb"},
            {"registry": {"path": "registry.json"}, "name": "x"},
            {"path": "/abs/tasks"},
        ],
    }
    job = load_job(write(tmp_path / "jobs", data))
    assert job.datasets[0].path == str(tmp_path / "suites" / "tb")
    assert job.datasets[1].registry is not None
    assert job.datasets[1].registry.path == str(tmp_path / "jobs" / "registry.json")
    assert job.datasets[2].path == "/abs/tasks"


def test_env_values_may_hold_references_and_literals(tmp_path: Path) -> None:
    env = {"MODEL": "sonnet", "AUTH": "Bearer ${TOKEN}", "KEY": "${API_KEY}", "PRICE": "$5"}
    data = {**minimal(), "agents": [{"name": "cpe", "execute": "x", "env": env}]}
    job = load_job(write(tmp_path, data))
    assert job.agents[0].env == env
    assert agent_env_references(job) == {"cpe": {"AUTH": ["TOKEN"], "KEY": ["API_KEY"]}}
    resolved = resolve_agent_env(job, {"TOKEN": "t0k", "API_KEY": "sk-1"})
    assert resolved == {
        "cpe": {"MODEL": "sonnet", "AUTH": "Bearer t0k", "KEY": "sk-1", "PRICE": "$5"}
    }


def test_unset_variables_are_all_reported(tmp_path: Path) -> None:
    data = {
        "agents": [
            {"name": "a", "execute": "x", "env": {"K1": "${ONE}", "OK": "${SET}"}},
            {"name": "b", "execute": "x", "env": {"K2": "${TWO}"}},
        ],
        "datasets": [{"path": "t"}],
    }
    job = load_job(write(tmp_path, data))
    with pytest.raises(InvalidInput) as caught:
        resolve_agent_env(job, {"SET": "1"}, file="job.yaml")
    problems = caught.value.problems
    assert [(p.file, p.field) for p in problems] == [
        ("job.yaml", "agents[0].env.K1"),
        ("job.yaml", "agents[1].env.K2"),
    ]
    assert "ONE" in problems[0].message
    assert "'a'" in problems[0].message
    assert "TWO" in problems[1].message
    assert "'b'" in problems[1].message


def test_config_json_keeps_references_and_reads_back_equal() -> None:
    job = load_job(SEED_JOB)
    config = job_to_config_json(job)
    text = json.dumps(config)
    assert config["agents"][0]["env"] == {"MY_API_KEY": "${MY_API_KEY}"}
    assert config["name"] == "my-eval-run"
    assert config["environment"]["preserveEnv"] is False
    assert parse_job(config) == job
    assert "null" not in text


def test_a_job_file_is_kept_as_written_beside_the_job(tmp_path: Path) -> None:
    text = (
        "# the job as submitted\n"
        "agents:\n"
        "  - name: cpe\n"
        "    execute: cpe run\n"
        "    env: {KEY: '${API_KEY}', MODEL: sonnet}\n"
        "datasets:\n"
        "  - path: ./tasks\n"
        "  - registry: {path: ../registry.json}\n"
        "    name: x\n"
        "environment:\n"
        "  type: docker\n"
        "  preserve_env: true\n"
    )
    read = read_job_file(write(tmp_path, text))
    assert read.job == load_job(tmp_path / "job.yaml")  # paths absolute, defaults filled in
    assert read.job.datasets[0].path == str(tmp_path / "tasks")
    # The content: the file's keys in its order, nothing filled in, nothing resolved.
    assert read.content == yaml.safe_load(text)
    assert list(read.content) == ["agents", "datasets", "environment"]
    assert read.content["datasets"][0] == {"path": "./tasks"}
    assert read.content["environment"] == {"type": "docker", "preserve_env": True}


def test_config_json_text_is_the_content_as_json_in_its_order() -> None:
    content = {"name": "évaluation", "agents": [{"env": {"K": "${V}"}}], "n_attempts": 2}
    text = config_json_text(content)
    assert json.loads(text) == content
    assert list(json.loads(text)) == ["name", "agents", "n_attempts"]
    assert text.startswith('{\n  "name": "évaluation",\n')  # indented, not escaped
    assert text.endswith("}\n")


def test_a_job_json_file_is_kept_as_written_too(tmp_path: Path) -> None:
    content = {"datasets": [{"path": "t"}], "agents": [{"name": "oracle"}], "n_attempts": 3}
    read = read_job_file(write(tmp_path, json.dumps(content), "job.json"))
    assert read.content == content
    assert json.loads(config_json_text(read.content)) == content


# --- malformed job files --------------------------------------------------------------------------


def agents(*entries: dict[str, Any]) -> dict[str, Any]:
    return {**minimal(), "agents": list(entries)}


def datasets(*entries: dict[str, Any]) -> dict[str, Any]:
    return {**minimal(), "datasets": list(entries)}


MALFORMED: list[tuple[str, dict[str, Any], str | None, str]] = [
    ("n_attempts zero", {**minimal(), "n_attempts": 0}, "n_attempts", "greater than or equal to 1"),
    ("n_attempts bool", {**minimal(), "n_attempts": True}, "n_attempts", "valid integer"),
    ("concurrency zero", {**minimal(), "n_concurrent_trials": 0}, "n_concurrent_trials", "1"),
    ("negative multiplier", {**minimal(), "timeout_multiplier": -1.5}, "timeout_multiplier", "0"),
    (
        "unknown metric type",
        {**minimal(), "metrics": [{"type": "median"}]},
        "metrics[0].type",
        "'sum', 'min', 'max' or 'mean'",
    ),
    (
        "duplicate metric",
        {**minimal(), "metrics": [{"type": "mean"}, {"type": "mean"}]},
        "metrics[1].type",
        "duplicate metric 'mean' (also metrics[0])",
    ),
    (
        "two agents with one name",
        agents({"name": "x", "execute": "a"}, {"name": "x", "execute": "b"}),
        "agents[1].name",
        "duplicate agent name 'x' (also agents[0])",
    ),
    ("agents empty", {**minimal(), "agents": []}, "agents", "at least one agent"),
    ("datasets empty", {**minimal(), "datasets": []}, "datasets", "at least one dataset"),
    ("agents missing", {"datasets": [{"path": "t"}]}, "agents", "Field required"),
    (
        "non-oracle without execute",
        agents({"name": "cpe", "install": "go install"}),
        "agents[0].execute",
        "agent 'cpe' needs an 'execute' script",
    ),
    (
        "non-oracle with blank execute",
        agents({"name": "cpe", "execute": "  \n"}),
        "agents[0].execute",
        "needs an 'execute' script",
    ),
    (
        "oracle with execute",
        agents({"name": "cpe", "execute": "x"}, {"name": "oracle", "execute": "bash solve.sh"}),
        "agents[1].execute",
        "reserved agent 'oracle'",
    ),
    (
        "oracle with install",
        agents({"name": "oracle", "install": "pip install x"}),
        "agents[0].install",
        "takes no 'install' script",
    ),
    ("agent name with slash", agents({"name": "a/b", "execute": "x"}), "agents[0].name", "slash"),
    ("agent name dot-dot", agents({"name": "..", "execute": "x"}), "agents[0].name", "'..'"),
    ("job name with slash", {**minimal(), "name": "../escape"}, "name", "slash"),
    (
        "env value not a string",
        agents({"name": "cpe", "execute": "x", "env": {"MAX_TOKENS": 4096}}),
        "agents[0].env.MAX_TOKENS",
        "env values must be strings",
    ),
    (
        "env value a mapping",
        agents({"name": "cpe", "execute": "x", "env": {"CFG": {"a": 1}}}),
        "agents[0].env.CFG",
        "env values must be strings",
    ),
    (
        "env key not a name",
        agents({"name": "cpe", "execute": "x", "env": {"MY-KEY": "v"}}),
        "agents[0].env.MY-KEY",
        "not a valid environment variable name",
    ),
    (
        "env sets the instruction variable",
        agents({"name": "cpe", "execute": "x", "env": {"ROLLOUT_TASK_INSTRUCTION": "/x"}}),
        "agents[0].env.ROLLOUT_TASK_INSTRUCTION",
        "instruction_path",
    ),
    (
        "env reference with a default",
        agents({"name": "cpe", "execute": "x", "env": {"K": "${K:-fallback}"}}),
        "agents[0].env.K",
        "unsupported reference '${K:-fallback}'",
    ),
    (
        "env reference unclosed",
        agents({"name": "cpe", "execute": "x", "env": {"K": "${K"}}),
        "agents[0].env.K",
        "without a closing",
    ),
    (
        "dataset with neither path nor registry",
        datasets({"name": "tb", "version": "2.0"}),
        "datasets[0]",
        "a dataset needs 'path'",
    ),
    (
        "dataset with path and registry",
        datasets({"path": "t", "registry": {"path": "r.json"}, "name": "x"}),
        "datasets[0]",
        "either 'path' or 'registry', not both",
    ),
    (
        "registry with neither path nor url",
        datasets({"registry": {}, "name": "tb"}),
        "datasets[0].registry",
        "a registry needs 'path'",
    ),
    (
        "registry with both path and url",
        datasets({"registry": {"path": "r.json", "url": "https://x/r.json"}, "name": "tb"}),
        "datasets[0].registry",
        "not both",
    ),
    (
        "registry url not http",
        datasets({"registry": {"url": "ftp://x/registry.json"}, "name": "tb"}),
        "datasets[0].registry.url",
        "http:// or https://",
    ),
    (
        "registry dataset without name",
        datasets({"registry": {"path": "r.json"}, "version": "1"}),
        "datasets[0].name",
        "needs the dataset's 'name'",
    ),
    (
        "dataset version a number",
        datasets({"registry": {"path": "r.json"}, "name": "tb", "version": 2.0}),
        "datasets[0].version",
        'version: "2.0"',
    ),
    (
        "path dataset with a version",
        datasets({"path": "t", "version": "1"}),
        "datasets[0].version",
        "registry datasets only",
    ),
    (
        "same dataset twice",
        datasets({"path": "t"}, {"path": "t"}),
        "datasets[1]",
        "the same dataset as datasets[0]",
    ),
    (
        "unknown top-level key",
        {**minimal(), "n_attempt": 3},
        "n_attempt",
        "unknown key 'n_attempt' (did you mean 'n_attempts'?)",
    ),
    (
        "unknown nested key",
        {**minimal(), "environment": {"force_rebuild": True}},
        "environment.force_rebuild",
        "unknown key 'force_rebuild' (did you mean 'force_build'?)",
    ),
    (
        "unknown agent key",
        agents({"name": "cpe", "execute": "x", "envs": {}}),
        "agents[0].envs",
        "unknown key 'envs'",
    ),
    (
        "relative instruction_path",
        {**minimal(), "instruction_path": "tmp/instruction.md"},
        "instruction_path",
        "must be an absolute path",
    ),
    (
        "unknown environment type",
        {**minimal(), "environment": {"type": "podman"}},
        "environment.type",
        "'docker', 'kubernetes'",
    ),
    (
        "bad memory override",
        {**minimal(), "environment": {"override_memory": "lots"}},
        "environment.override_memory",
        "not a quantity",
    ),
    (
        "negative cpus override",
        {**minimal(), "environment": {"override_cpus": -1}},
        "environment.override_cpus",
        "negative",
    ),
    (
        "negative verifier timeout",
        {**minimal(), "verifier": {"override_timeout_sec": -5}},
        "verifier.override_timeout_sec",
        "greater than or equal to 0",
    ),
    ("log level unknown", {**minimal(), "log_level": "verbose"}, "log_level", "'debug'"),
    (
        "force_build a string",
        {**minimal(), "environment": {"force_build": "yes"}},
        "environment.force_build",
        "valid boolean",
    ),
]


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_job_is_rejected_naming_file_and_field(
    tmp_path: Path, data: dict[str, Any], field: str | None, message: str
) -> None:
    path = write(tmp_path, data)
    file, got_field, got_message = only_problem(path)
    assert file == str(path)
    assert got_field == field
    assert message in got_message
    assert str(InvalidInput.one(file, got_field, got_message)).startswith(f"{path}: {field}: ")


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    text = "name: x\nagents:\n  - name: a\n    execute: [unclosed\ndatasets: []\n"
    _, field, message = only_problem(write(tmp_path, text))
    assert field is None
    assert message.startswith("invalid YAML at line 5")


def test_yaml_tab_indentation_names_the_line(tmp_path: Path) -> None:
    text = "name: x\nagents:\n\t- name: a\n"
    _, field, message = only_problem(write(tmp_path, text))
    assert field is None
    assert "line 3" in message


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    text = yaml.safe_dump(minimal()) + "n_attempts: 2\nn_attempts: 3\n"
    _, field, message = only_problem(write(tmp_path, text))
    assert field is None
    assert "duplicate key 'n_attempts'" in message
    assert "line 7" in message  # the second n_attempts


def test_json_syntax_error_names_the_line(tmp_path: Path) -> None:
    text = '{\n  "agents": [],\n  "datasets": [,]\n}\n'
    _, field, message = only_problem(write(tmp_path, text, "job.json"))
    assert field is None
    assert message.startswith("invalid JSON at line 3")


def test_file_that_is_not_a_mapping(tmp_path: Path) -> None:
    _, field, message = only_problem(write(tmp_path, "- a\n- b\n"))
    assert (field, message) == (None, "must be a mapping of job settings, not a list")
    _, _, message = only_problem(write(tmp_path, ""))
    assert message == "must be a mapping of job settings, not empty"


def test_missing_file_and_wrong_suffix(tmp_path: Path) -> None:
    file, field, message = only_problem(tmp_path / "nope.yaml")
    assert (file, field, message) == (str(tmp_path / "nope.yaml"), None, "no such file")
    _, _, message = only_problem(write(tmp_path, "a = 1", "job.toml"))
    assert ".yaml, .yml or .json" in message


def test_every_problem_of_a_file_is_reported(tmp_path: Path) -> None:
    data = {
        "n_attempts": 0,
        "agents": [{"name": "x", "execute": "a"}, {"name": "x"}],
        "datasets": [{"registry": {}, "name": "d"}],
    }
    with pytest.raises(InvalidInput) as caught:
        load_job(write(tmp_path, data))
    fields = {p.field for p in caught.value.problems}
    assert fields == {"n_attempts", "agents[1].execute", "datasets[0].registry"}


def test_model_validate_without_a_file_still_names_the_field() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_job(agents({"name": "x", "execute": "a"}, {"name": "x", "execute": "b"}))
    (problem,) = caught.value.problems
    assert str(problem) == "job.yaml: agents[1].name: duplicate agent name 'x' (also agents[0])"


def test_job_config_is_the_model_the_loader_returns(tmp_path: Path) -> None:
    job = load_job(write(tmp_path, minimal()))
    assert isinstance(job, JobConfig)
    assert job.agents[0].name == "cpe"
    assert job.datasets[0].path == str(tmp_path / "tasks")


def test_task_env_takes_its_variables_from_the_agents_env() -> None:
    env = {"PLAIN": "x", "URL": "https://${HOST}:${PORT}/v1"}
    resolved = resolve_task_env(env, {"HOST": "h", "PORT": "1"}, task="t", agent="a")
    assert resolved == {"PLAIN": "x", "URL": "https://h:1/v1"}


def test_every_task_env_key_that_cannot_be_given_is_reported_at_once() -> None:
    env = {"bad-name": "x", "DEFAULTED": "${A:-b}", "MISSING": "${NOPE}", "OK": "${A}"}
    with pytest.raises(InvalidInput) as caught:
        resolve_task_env(env, {"A": "1"}, task="t", agent="a")
    assert caught.value.error_type is ErrorType.TASK_INVALID
    assert [(p.file, p.field) for p in caught.value.problems] == [
        ("task 't': task.toml", "environment.env.bad-name"),
        ("task 't': task.toml", "environment.env.DEFAULTED"),
        ("task 't': task.toml", "environment.env.MISSING"),
    ]
    assert "takes ${NOPE}, which agent 'a' does not set" in caught.value.problems[2].message
