"""`load_config` and `RolloutConfig.to_job` on seed 002's configuration: each key mapped onto
the job or refused by name, the API keys never in the job, JSON and YAML alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from paths import DATA
from rollout.api.errors import InvalidInput
from rollout.api.job import parse_job
from rollout.python_api.config import (
    EVALUATOR_KEY_VARIABLE,
    MODEL_KEY_VARIABLE,
    TOOL_KEYS,
    RolloutConfig,
    load_config,
)

SEED_CONFIG = DATA / "seed002" / "config.json"
"""Seed 002's "Configuration File Example", as the seed gives it."""
REFUSED_IN_THE_EXAMPLE = {"available_tools", "resource_types", "resource_init_configs"}
"""The example's keys with no meaning here that it sets to something but their default (its
sandbox_server_url, sandbox_auto_start and sandbox_timeout are the defaults)."""
PROMPT = "You answer questions about documents.\n"


def seed_example() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SEED_CONFIG.read_text())
    return data


def without_refused(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in REFUSED_IN_THE_EXAMPLE}


def fields(err: pytest.ExceptionInfo[InvalidInput]) -> set[str | None]:
    return {p.field for p in err.value.problems}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory laid out as the seed's example expects, as the working directory."""
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "rag_system.txt").write_text(PROMPT)
    (tmp_path / "benchmark").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- the seed's example -----------------------------------------------------------------------


def test_the_seeds_example_is_refused_naming_exactly_the_tool_keys_it_sets() -> None:
    with pytest.raises(InvalidInput) as err:
        load_config(SEED_CONFIG)
    assert fields(err) == REFUSED_IN_THE_EXAMPLE
    for problem in err.value.problems:
        assert problem.file == str(SEED_CONFIG)
        assert "sandbox server are not part of this project" in problem.message
    # Each problem names its key once, at its place: `config.json: available_tools: ...`.
    assert str(err.value.problems[0]).startswith(f"{SEED_CONFIG}: ")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("available_tools", ["web:search"]),
        ("resource_types", ["web"]),
        ("resource_init_configs", {"doc": {"seed_path": "/data"}}),
        ("sandbox_server_url", "http://127.0.0.1:9999"),
        ("sandbox_auto_start", True),
        ("sandbox_config_path", "sandbox.yaml"),
        ("sandbox_timeout", 60),
    ],
)
def test_each_tool_key_is_refused_by_name_when_not_at_its_default(key: str, value: Any) -> None:
    with pytest.raises(InvalidInput) as err:
        RolloutConfig.from_mapping({key: value}, file="my.json")
    assert fields(err) == {key}
    assert err.value.problems[0].file == "my.json"
    # At its default the key is harmless, and means nothing.
    default = RolloutConfig.model_fields[key].get_default(call_default_factory=True)
    assert getattr(RolloutConfig.from_mapping({key: default}), key) == default


def test_every_tool_key_set_is_one_problem_each() -> None:
    settings = {
        "available_tools": ["a"],
        "resource_types": ["b"],
        "resource_init_configs": {"c": {}},
        "sandbox_server_url": "http://x",
        "sandbox_auto_start": True,
        "sandbox_config_path": "y",
        "sandbox_timeout": 1,
    }
    assert set(settings) == set(TOOL_KEYS)
    with pytest.raises(InvalidInput) as err:
        RolloutConfig.from_mapping(settings)
    assert [p.field for p in err.value.problems] == list(TOOL_KEYS)


def test_without_the_tool_keys_every_other_key_maps_onto_the_job(project: Path) -> None:
    path = project / "config.json"
    path.write_text(json.dumps(without_refused(seed_example())))
    config = load_config(path)
    assert config.file == str(path)
    assert config.notes() == []

    job, environ = config.to_job(row_count=10)

    assert environ == {
        MODEL_KEY_VARIABLE: "sk-your-api-key",
        EVALUATOR_KEY_VARIABLE: "sk-your-api-key",
    }
    assert "sk-your-api-key" not in json.dumps(job)
    assert job.pop("name") == "rag_benchmark_v1"  # benchmark_name
    assert job.pop("jobs_dir") == str(project / "results" / "rag_eval")  # output_dir
    assert job.pop("n_concurrent_trials") == 4  # max_workers, with parallel true
    assert job.pop("shard_size") == 3  # 10 rows over at least 4 shards
    assert job.pop("evaluation_metric") == "f1_score"
    assert job.pop("evaluator_model_name") == "gpt-4.1-2025-04-14"
    assert job.pop("evaluator_base_url") == "https://api.openai.com/v1"
    assert job.pop("evaluator_api_key") == "${ROLLOUT_EVALUATOR_API_KEY}"
    assert job.pop("evaluator_temperature") == 0.0
    assert job.pop("evaluator_max_retries") == 3
    for key, value in (
        ("save_results", True),
        ("save_trajectories", True),
        ("trajectory_only", False),
        ("save_summary", True),
    ):
        assert job.pop(key) is value, key
    assert job.pop("agents") == [
        {
            "name": "gpt-4.1-2025-04-14",
            "model": {
                "name": "gpt-4.1-2025-04-14",
                "base_url": "https://api.openai.com/v1",
                "api_key": "${ROLLOUT_MODEL_API_KEY}",
                "max_turns": 50,
                "max_retries": 3,
                "system_prompt": PROMPT,  # system_prompt "" and system_prompt_file
            },
        }
    ]
    assert job.pop("datasets") == [{"path": str(project / "benchmark" / "rag_benchmark.jsonl")}]
    # evaluate_results true, number_of_tasks and task_ids null, sandbox keys at their defaults:
    # nothing more.
    assert job == {}


def test_the_mapping_is_a_job_the_job_model_accepts(project: Path) -> None:
    config = RolloutConfig.from_mapping(without_refused(seed_example()))
    job, _ = config.to_job(local=True)
    parsed = parse_job(job)
    assert parsed.n_concurrent_trials == 4
    assert parsed.environment.type.value == "local"
    (agent,) = parsed.agents
    assert agent.model is not None
    assert agent.model.api_key == "${ROLLOUT_MODEL_API_KEY}"
    assert agent.model.max_turns == 50
    assert parsed.evaluator_api_key == "${ROLLOUT_EVALUATOR_API_KEY}"


def test_yaml_and_json_read_the_same_config(project: Path) -> None:
    data = without_refused(seed_example())
    (project / "config.json").write_text(json.dumps(data))
    (project / "config.yaml").write_text(yaml.safe_dump(data))
    (project / "config.yml").write_text(yaml.safe_dump(data))
    from_json = load_config(project / "config.json")
    for name in ("config.yaml", "config.yml"):
        from_yaml = load_config(project / name)
        assert from_yaml.model_dump() == from_json.model_dump()
        assert from_yaml.model_fields_set == from_json.model_fields_set
        assert from_yaml.to_job() == from_json.to_job()


def test_the_seeds_example_in_yaml_is_refused_the_same(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(seed_example()))
    with pytest.raises(InvalidInput) as err:
        load_config(path)
    assert fields(err) == REFUSED_IN_THE_EXAMPLE


# --- keys refused, values refused ---------------------------------------------------------------


def test_an_unknown_key_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_name": "m", "max_turn": 5, "temperature": 0.3}))
    with pytest.raises(InvalidInput) as err:
        load_config(path)
    messages = {p.field: p.message for p in err.value.problems}
    assert messages["max_turn"] == "unknown key 'max_turn' (did you mean 'max_turns'?)"
    assert messages["temperature"].startswith("unknown key 'temperature'")
    assert set(messages) == {"max_turn", "temperature"}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_turns": 0}, "max_turns"),
        ({"max_turns": "50"}, "max_turns"),
        ({"max_workers": True}, "max_workers"),
        ({"evaluation_metric": "bleu"}, "evaluation_metric"),
        ({"evaluator_temperature": 2.5}, "evaluator_temperature"),
        ({"evaluator_temperature": True}, "evaluator_temperature"),
        ({"evaluator_extra_params": {"model": "x"}}, "evaluator_extra_params"),
        ({"number_of_tasks": 0}, "number_of_tasks"),
        ({"parallel": "yes"}, "parallel"),
        ({"system_prompt": "Be brief.", "system_prompt_file": "p.txt"}, "system_prompt_file"),
        ({"api_key": "sk-${X}"}, "api_key"),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(data: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        RolloutConfig.from_mapping(data, file="c.yaml")
    assert fields(err) == {field}


def test_files_that_are_not_a_config(tmp_path: Path) -> None:
    for name, text, says in (
        ("c.toml", "", "ends in .json, .yaml or .yml"),
        ("c.json", "[1, 2]", "must be a mapping of RolloutConfig keys"),
        ("d.json", '{"a": 1,', "invalid JSON"),
        ("e.yaml", "a: [", "invalid YAML"),
        ("f.json", '{"max_turns": 1, "max_turns": 2}', "duplicate key"),
    ):
        (tmp_path / name).write_text(text)
        with pytest.raises(InvalidInput, match=says):
            load_config(tmp_path / name)
    with pytest.raises(InvalidInput, match="no such file"):
        load_config(tmp_path / "absent.json")


# --- what each key becomes ------------------------------------------------------------------


def test_the_defaults_make_a_small_job(project: Path) -> None:
    job, environ = RolloutConfig.from_mapping({"data_path": "b.jsonl"}).to_job()
    assert environ == {}
    assert job == {
        "n_concurrent_trials": 1,
        "agents": [
            {
                "name": "gpt-4.1-2025-04-14",
                "model": {"name": "gpt-4.1-2025-04-14", "max_turns": 100, "max_retries": 3},
            }
        ],
        "datasets": [{"path": str(project / "b.jsonl")}],
    }


def test_without_data_path_there_is_no_job() -> None:
    with pytest.raises(InvalidInput) as err:
        RolloutConfig.from_mapping({}, file="c.json").to_job()
    assert [(p.file, p.field) for p in err.value.problems] == [("c.json", "data_path")]


def test_a_key_that_is_a_reference_stays_one(project: Path) -> None:
    config = RolloutConfig.from_mapping(
        {
            "data_path": "b.jsonl",
            "api_key": "${OPENAI_API_KEY}",
            "evaluator_api_key": "${JUDGE_KEY}",
        }
    )
    job, environ = config.to_job()
    assert environ == {}
    assert job["agents"][0]["model"]["api_key"] == "${OPENAI_API_KEY}"
    assert job["evaluator_api_key"] == "${JUDGE_KEY}"


def test_a_literal_key_never_shows_in_the_config_repr() -> None:
    config = RolloutConfig.from_mapping({"api_key": "sk-secret-1", "evaluator_api_key": "sk-2"})
    assert "sk-secret-1" not in repr(config)
    assert "sk-2" not in repr(config)
    assert "api_key='***'" in repr(config)


def test_evaluate_results_false_disables_the_verifier(project: Path) -> None:
    job, _ = RolloutConfig.from_mapping(
        {"data_path": "b.jsonl", "evaluate_results": False}
    ).to_job()
    assert job["verifier"] == {"disable": True}


def test_number_of_tasks_and_task_ids_pick_rows(project: Path) -> None:
    job, _ = RolloutConfig.from_mapping(
        {"data_path": "b.jsonl", "number_of_tasks": 5, "task_ids": ["q1", "q7"]}
    ).to_job()
    assert (job["max_tasks"], job["task_ids"]) == (5, ["q1", "q7"])


def test_parallel_false_runs_one_at_a_time_and_says_so(project: Path) -> None:
    config = RolloutConfig.from_mapping({"data_path": "b.jsonl", "max_workers": 8}, file="c.json")
    job, _ = config.to_job(row_count=100)
    assert job["n_concurrent_trials"] == 1
    assert "shard_size" not in job
    (note,) = config.notes()
    assert note.startswith("c.json: max_workers 8 is not used because parallel is false")


@pytest.mark.parametrize(
    ("rows", "workers", "shard_size"),
    [(10, 4, 3), (4, 4, 1), (2, 4, 1), (1000, 4, None), (400, 4, None), (399, 4, None)],
)
def test_parallel_rows_spread_over_at_least_max_workers_shards(
    project: Path, rows: int, workers: int, shard_size: int | None
) -> None:
    config = RolloutConfig.from_mapping(
        {"data_path": "b.jsonl", "max_workers": workers, "parallel": True}
    )
    job, _ = config.to_job(row_count=rows)
    assert job["n_concurrent_trials"] == workers
    assert job.get("shard_size") == shard_size  # None: the default 100 already makes enough


def test_the_agent_is_named_after_the_model_as_one_path_segment(project: Path) -> None:
    for model, agent in (
        ("gpt-4.1-2025-04-14", "gpt-4.1-2025-04-14"),
        ("openai/gpt-4o", "openai-gpt-4o"),
        ("Qwen/Qwen2.5 7B", "Qwen-Qwen2.5-7B"),
        ("oracle", "oracle-model"),
    ):
        config = RolloutConfig.from_mapping({"data_path": "b.jsonl", "model_name": model})
        job, _ = config.to_job()
        assert job["agents"][0]["name"] == agent
        assert job["agents"][0]["model"]["name"] == model


def test_a_system_prompt_file_that_is_not_there_names_the_key(project: Path) -> None:
    config = RolloutConfig.from_mapping(
        {"data_path": "b.jsonl", "system_prompt_file": "prompts/none.txt"}, file="c.json"
    )
    with pytest.raises(InvalidInput) as err:
        config.to_job()
    (problem,) = err.value.problems
    assert (problem.file, problem.field) == ("c.json", "system_prompt_file")
    assert str(project / "prompts" / "none.txt") in problem.message


def test_the_metric_replaces_the_datasets_only_when_set(project: Path) -> None:
    plain, _ = RolloutConfig.from_mapping({"data_path": "b.jsonl"}).to_job()
    assert "evaluation_metric" not in plain  # the dataset's (exact_match for a bare file)
    chosen, _ = RolloutConfig.from_mapping(
        {"data_path": "b.jsonl", "evaluation_metric": "exact_match"}
    ).to_job()
    assert chosen["evaluation_metric"] == "exact_match"


def test_updated_puts_arguments_over_the_configs_keys() -> None:
    config = RolloutConfig.from_mapping({"data_path": "a.jsonl", "max_turns": 7}, file="c.json")
    changed = config.updated({"data_path": "b.jsonl", "number_of_tasks": 2})
    assert (changed.data_path, changed.number_of_tasks, changed.max_turns) == ("b.jsonl", 2, 7)
    assert changed.file == "c.json"
    with pytest.raises(InvalidInput) as err:
        config.updated({"number_of_tasks": 0}, where="rollout()")
    assert [(p.file, p.field) for p in err.value.problems] == [("rollout()", "number_of_tasks")]
