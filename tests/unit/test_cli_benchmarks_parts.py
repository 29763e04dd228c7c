"""The parts of `rollout benchmarks` that need no run: header parsing, the job mapping, which
registry is read, benchmark references, and the arguments handed to `rollout run`."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rollout.api.errors import InvalidInput
from rollout.api.job import parse_job
from rollout.cli.benchmarks import register
from rollout.cli.benchmarks.runjob import (
    Header,
    command_agent,
    endpoint_agent,
    job_mapping,
    parse_header,
    run_arguments,
)
from rollout.cli.benchmarks.workspace import (
    DEFAULT_REGISTRY,
    Workspace,
    choose_registry,
    looks_like_path,
    parse_reference,
)

SECRET = "Bearer tok-never-shown"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["benchmarks", *argv])


def test_a_header_is_a_name_and_a_value_after_colon_space() -> None:
    header = parse_header(f"Authorization: {SECRET}")
    assert (header.name, header.value) == ("Authorization", SECRET)
    assert SECRET not in repr(header)
    assert parse_header("X-Empty: ").value == ""
    assert parse_header("X-Url: http://a:1/b").value == "http://a:1/b"  # the first ': ' splits


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("Authorization=Bearer tok", " ('Authorization')"),
        ("Authorization:Bearer tok", " ('Authorization')"),
        ("dG9rZW4tc2VjcmV0==", ""),  # base64 padding is no separator
        ("0123456789abcdef", ""),
    ],
)
def test_a_header_without_colon_space_is_named_never_shown(text: str, named: str) -> None:
    with pytest.raises(ValueError, match="is not written 'Name: value'") as caught:
        parse_header(text, 3)
    message = str(caught.value)
    assert message.startswith(f"--header #3{named} is not written")
    for part in ("Bearer", "tok", "dG9rZW4", "0123456789"):
        assert part not in message


def test_the_endpoint_agent_refers_to_each_header_value_by_variable() -> None:
    headers = [Header("Authorization", SECRET), Header("X-Team", "evals")]
    agent = endpoint_agent("svc", "https://agent.example.com/eval", headers, None)
    assert agent.entry == {
        "name": "svc",
        "endpoint": "https://agent.example.com/eval",
        "headers": {
            "Authorization": "${ROLLOUT_BENCHMARK_HEADER_1}",
            "X-Team": "${ROLLOUT_BENCHMARK_HEADER_2}",
        },
        "timeout_sec": 60.0,
    }
    assert agent.secrets == {
        "ROLLOUT_BENCHMARK_HEADER_1": SECRET,
        "ROLLOUT_BENCHMARK_HEADER_2": "evals",
    }
    assert SECRET not in repr(agent)
    plain = endpoint_agent("svc", "http://127.0.0.1:8/eval", [], 5.0)
    assert plain.entry == {"name": "svc", "endpoint": "http://127.0.0.1:8/eval", "timeout_sec": 5.0}


def test_the_job_holds_what_the_command_line_says_and_job_yaml_defaults_the_rest(
    tmp_path: Path,
) -> None:
    args = parse(
        "run", "arith", "--agent-command", "echo 4", "--max-tasks", "3", "--attempts", "2",
        "--concurrency", "5", "--environment-type", "local", "--task-id", "a", "--task-id", "b",
    )  # fmt: skip
    agent = endpoint_agent("agent", "http://127.0.0.1:9/eval", [Header("A", SECRET)], None)
    job = job_mapping("j", tmp_path / "arith", agent, args)
    assert job == {
        "name": "j",
        "n_attempts": 2,
        "n_concurrent_trials": 5,
        "environment": {"type": "local"},
        "max_tasks": 3,
        "task_ids": ["a", "b"],
        "agents": [agent.entry],
        "datasets": [{"path": str(tmp_path / "arith")}],
    }
    assert SECRET not in repr(job)
    bare = job_mapping("j", tmp_path, agent, parse("run", "x", "--agent-command", "true"))
    assert set(bare) == {"name", "agents", "datasets"}
    # A command agent's job is a valid job.yaml.
    args = parse("run", "x", "--agent-command", "true", "--max-tasks", "3")
    script = parse_job(job_mapping("j", tmp_path, command_agent("agent", "true"), args))
    assert (script.agents[0].execute, script.max_tasks) == ("true", 3)


def test_run_gets_the_shared_flags_and_its_own_defaults_for_the_rest(tmp_path: Path) -> None:
    args = parse(
        "run", "arith", "--agent-command", "true", "--max-tasks", "3", "--local", "--jobs-dir",
        str(tmp_path), "--kubeconfig", "/k", "--namespace", "evals", "--storage-bucket", "b",
        "--detach", "--strict", "--fail-fast",
    )  # fmt: skip
    job_file = tmp_path / "job.yaml"
    namespace = run_arguments(job_file, args)
    assert namespace.job_file == job_file
    assert (namespace.local, namespace.jobs_dir, namespace.detach, namespace.strict) == (
        True,
        tmp_path,
        True,
        True,
    )
    assert (namespace.kubeconfig, namespace.namespace, namespace.storage_bucket) == (
        "/k",
        "evals",
        "b",
    )
    assert namespace.fail_fast is True
    assert namespace.max_tasks is None  # the job carries it
    assert namespace.resume is False  # `rollout run`'s own default
    assert not hasattr(namespace, "agent_command")


def test_the_registry_is_the_flag_else_the_variable_else_the_config_file_else_the_public_one(
    tmp_path: Path,
) -> None:
    config = tmp_path / "conf" / "config.yaml"
    config.parent.mkdir()
    environ = {"ROLLOUT_CONFIG": str(config), "HOME": str(tmp_path)}
    assert choose_registry(None, environ).location == DEFAULT_REGISTRY
    config.write_text("registry: ./team.json\n")
    assert choose_registry(None, environ).location == tmp_path / "conf" / "team.json"
    config.write_text("registry: https://example.com/registry.json\n")
    assert choose_registry(None, environ).location == "https://example.com/registry.json"
    environ["ROLLOUT_REGISTRY"] = "/from/env.json"
    assert choose_registry(None, environ).location == Path("/from/env.json")
    chosen = choose_registry("http://127.0.0.1:1/r.json", environ)
    assert (chosen.location, chosen.chosen_by) == ("http://127.0.0.1:1/r.json", "--registry")
    config.write_text("registry: [1]\n")
    with pytest.raises(InvalidInput, match="registry: must be the path or http"):
        choose_registry(None, {"ROLLOUT_CONFIG": str(config)})


def test_references_and_paths() -> None:
    assert parse_reference("terminal-bench") == ("terminal-bench", None)
    assert parse_reference("terminal-bench@2.0") == ("terminal-bench", "2.0")
    assert parse_reference("multi version dataset@alpha") == ("multi version dataset", "alpha")
    for bad in ("x@", "@1.0"):
        with pytest.raises(ValueError, match="is not NAME or NAME@VERSION"):
            parse_reference(bad)
    for path in ("./arith", "benchmarks/arith", "/abs/arith", "~/arith", "qa.jsonl", "rows.json"):
        assert looks_like_path(path), path
    for name in ("arith", "terminal-bench", "swebench-verified@1.0"):
        assert not looks_like_path(name), name


def test_the_workspace_is_under_the_cache_directory(tmp_path: Path) -> None:
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path)}
    assert Workspace.of(None, xdg).root == tmp_path / "xdg" / "rollout" / "benchmarks"
    explicit = {**xdg, "ROLLOUT_CACHE_DIR": str(tmp_path / "c")}
    assert Workspace.of(None, explicit).root == tmp_path / "c" / "benchmarks"
    flag = Workspace.of(tmp_path / "flag", explicit)
    assert (flag.root, flag.git_cache) == (
        tmp_path / "flag" / "benchmarks",
        tmp_path / "flag" / "git",
    )
    assert flag.entry_dir("a/b", "1.0").name == "a%2Fb@1.0"  # one path segment, whatever the name
