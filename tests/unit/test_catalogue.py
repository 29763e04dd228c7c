"""The catalogue of built-in agents: its files, and how an agent of job.yaml or of a RolloutJob
becomes a built-in (`rollout.api.catalogue`, `rollout.api.job_settings.AgentBase`)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from rollout.api import catalogue
from rollout.api.errors import InvalidInput
from rollout.api.job import JobAgent
from rollout.api.resources.common import AgentSpec

ISSUE_AGENTS = (
    "aider",
    "claude-code",
    "cline",
    "codex",
    "cpe",
    "gemini-cli",
    "goose",
    "mini-swe-agent",
    "opencode",
)
"""The agents the catalogue must have, at least."""


def entry(name: str) -> catalogue.BuiltinAgent:
    agent = catalogue.get(name)
    assert agent is not None, f"no built-in {name}"
    return agent


def with_providers() -> catalogue.BuiltinAgent:
    """A built-in whose keys depend on its model's provider."""
    for name in catalogue.names():
        if entry(name).keys.providers:
            return entry(name)
    raise AssertionError("no built-in agent has keys by provider")


# --- the files -------------------------------------------------------------------------------


def test_the_catalogue_has_the_agents_the_issue_names() -> None:
    assert set(ISSUE_AGENTS) <= set(catalogue.names())
    assert catalogue.ORACLE_AGENT not in catalogue.names()


@pytest.mark.parametrize("name", catalogue.names())
def test_each_file_is_complete_and_pinned(name: str) -> None:
    agent = entry(name)
    assert agent.name == name
    assert agent.docs.startswith("https://"), "its flags must be documented somewhere"
    assert agent.version not in ("latest", "stable", "main"), "a default must be a pinned version"
    assert agent.command
    assert " " not in agent.command
    JobAgent.model_validate({"name": name, "version": agent.version})  # a valid version
    for keys in [agent.keys.default, *agent.keys.providers.values()]:
        assert all(k.isupper() for k in keys), keys


@pytest.mark.parametrize("name", catalogue.names())
@pytest.mark.parametrize("which", ["install", "execute"])
def test_each_script_is_bash_with_the_library(name: str, which: str) -> None:
    script = getattr(entry(name), f"{which}_script")
    assert script.startswith(catalogue.SCRIPT_HEADER)
    assert catalogue.library() in script
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("name", catalogue.names())
def test_each_execute_script_reads_the_instruction_and_the_model(name: str) -> None:
    body = entry(name).execute
    assert "ROLLOUT_TASK_INSTRUCTION" in body
    assert catalogue.MODEL_ENV in body
    assert catalogue.FLAGS_ENV in body
    assert "/logs/agent" in body or "$AGENT_LOGS" in body or "${AGENT_LOGS}" in body


def test_an_unknown_or_reserved_name_is_no_builtin() -> None:
    assert catalogue.get("no-such-agent") is None
    assert catalogue.get("oracle") is None
    assert catalogue.get("../lib") is None
    assert catalogue.get("") is None


# --- the library -----------------------------------------------------------------------------


def run_library(snippet: str, tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    """`snippet` after the library, with PATH holding only `path` (and HOME in tmp_path)."""
    script = f"{catalogue.SCRIPT_HEADER}{catalogue.library()}\n{snippet}"
    env = {"PATH": path, "HOME": str(tmp_path)}
    return subprocess.run(
        ["/bin/bash", "-c", script.replace("/logs/agent", str(tmp_path / "logs"))],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def tools(tmp_path: Path, *names: str) -> str:
    """A directory holding links to just these host programs."""
    directory = tmp_path / "tools"
    directory.mkdir(exist_ok=True)
    for name in names:
        found = subprocess.run(["which", name], capture_output=True, text=True).stdout.strip()
        (directory / name).symlink_to(found)
    return str(directory)


def test_an_image_without_apt_or_apk_fails_naming_the_bases_it_needs(tmp_path: Path) -> None:
    path = tools(tmp_path, "mkdir", "date", "id", "sed", "cat")
    ran = run_library("rollout_packages curl git", tmp_path, path)
    assert ran.returncode == 1
    assert "needs a Debian/Ubuntu (apt-get) or Alpine (apk) based image" in ran.stderr
    assert "curl git" in ran.stderr


def test_node_missing_without_a_package_manager_fails_saying_so(tmp_path: Path) -> None:
    path = tools(tmp_path, "mkdir", "date", "id", "sed", "cat")
    ran = run_library("rollout_node 20", tmp_path, path)
    assert ran.returncode == 1
    assert "needs node >= 20 and npm" in ran.stderr


def test_usage_is_written_as_the_runner_reads_it(tmp_path: Path) -> None:
    path = tools(tmp_path, "mkdir", "date", "cat")
    ran = run_library("rollout_usage 1200 34 0.0123", tmp_path, path)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "logs" / "usage.json").read_text() == (
        '{"input_tokens": 1200, "output_tokens": 34, "cost_usd": 0.0123}\n'
    )
    for wrong in ("12 x", "12", "", "'' 5"):
        ran = run_library(f"rollout_usage {wrong}; echo went-on", tmp_path, path)
        assert ran.returncode == 0, ran.stderr
        assert "not counts" in ran.stderr
        assert ran.stdout == "went-on\n"  # set -u ended nothing
    ran = run_library("rollout_usage 1 2 1e-3", tmp_path, path)
    assert "is not a number" in ran.stderr
    assert (tmp_path / "logs" / "usage.json").read_text() == (
        '{"input_tokens": 1, "output_tokens": 2}\n'
    )


# --- becoming a built-in -----------------------------------------------------------------------


def test_naming_a_builtin_is_enough() -> None:
    agent = JobAgent.model_validate({"name": "claude-code"})
    built = entry("claude-code")
    assert agent.builtin == "claude-code"
    assert agent.version == built.version
    assert agent.install is None
    assert agent.execute is None
    assert agent.install_script == built.install_script
    assert agent.execute_script == built.execute_script
    assert agent.env == {k: f"${{{k}}}" for k in built.keys_for(None)}
    assert agent.parameter_env() == {
        "ROLLOUT_AGENT_VERSION": built.version,
        "ROLLOUT_AGENT_MODEL": built.model or "",
        "ROLLOUT_AGENT_FLAGS": "",
    }


def test_parameters_reach_the_scripts_as_env() -> None:
    agent = JobAgent.model_validate(
        {
            "name": "claude-code",
            "model": "claude-opus-4-1",
            "version": "9.9.9",
            "flags": ["--max-turns", "3", "two words"],
        }
    )
    assert agent.model_name == "claude-opus-4-1"
    env = agent.parameter_env()
    assert env["ROLLOUT_AGENT_VERSION"] == "9.9.9"
    assert env["ROLLOUT_AGENT_MODEL"] == "claude-opus-4-1"
    assert shlex.split(env["ROLLOUT_AGENT_FLAGS"]) == ["--max-turns", "3", "two words"]


def test_keys_follow_the_models_provider() -> None:
    built = with_providers()
    provider, keys = next(iter(built.keys.providers.items()))
    agent = JobAgent.model_validate({"name": built.name, "model": f"{provider}/some-model"})
    assert agent.env == {k: f"${{{k}}}" for k in keys}


def test_fields_given_win_over_the_builtins() -> None:
    built = entry("codex")
    agent = JobAgent.model_validate(
        {
            "name": "codex",
            "builtin": "codex",
            "description": "mine",
            "install": "echo my own install",
            "env": {"OPENAI_API_KEY": "${MY_OPENAI_KEY}", "EXTRA": "1"},
        }
    )
    assert agent.builtin == "codex"
    assert agent.description == "mine"
    assert agent.install_script == "echo my own install"
    assert agent.execute_script == built.execute_script
    assert agent.env["OPENAI_API_KEY"] == "${MY_OPENAI_KEY}"
    assert agent.env["EXTRA"] == "1"


def test_builtin_names_the_builtin_of_an_agent_of_another_name() -> None:
    agent = JobAgent.model_validate({"name": "codex-mini", "builtin": "codex", "model": "o4-mini"})
    assert agent.builtin == "codex"
    assert agent.model_name == "o4-mini"
    assert agent.execute_script == entry("codex").execute_script


@pytest.mark.parametrize("scripts", [{"install": "true", "execute": "my-codex"}, {"execute": "x"}])
def test_an_agent_with_a_script_of_its_own_is_the_users(scripts: dict[str, str]) -> None:
    """A job written before the built-in existed keeps its meaning."""
    agent = JobAgent.model_validate({"name": "codex", **scripts})
    assert agent.builtin is None
    assert agent.env == {}
    assert agent.parameter_env() == {}


def test_an_install_alone_is_refused_saying_how_to_keep_the_builtins_execute() -> None:
    with pytest.raises(ValueError, match="needs an 'execute' script") as raised:
        JobAgent.model_validate({"name": "codex", "install": "true"})
    assert "add `builtin: codex` to run its execute with your install" in str(raised.value)


@pytest.mark.parametrize(
    ("fields", "where", "words"),
    [
        ({"name": "mine", "execute": "x", "version": "1.0"}, "version", "none"),
        ({"name": "mine", "execute": "x", "model": "gpt-5"}, "model_name", "mapping"),
        ({"name": "mine", "execute": "x", "flags": ["-v"]}, "flags", "built-in"),
        (
            {"name": "codex", "execute": "b", "version": "1"},
            "version",
            "add `builtin: codex`",
        ),
        ({"name": "x", "builtin": "no-such"}, "builtin", "there is no built-in agent"),
        ({"name": "oracle", "builtin": "oracle"}, "builtin", "reserved"),
        ({"name": "codex", "version": "1 2"}, "version", "is not a version"),
        ({"name": "codex", "model": "a b"}, "model_name", "is not a model name"),
        ({"name": "codex", "flags": "--x --y"}, "flags", "list of arguments"),
        ({"name": "codex", "model": "o3", "model_name": "o4"}, "model", "not both"),
        ({"name": "codex", "endpoint": "http://x", "version": "1"}, "version", "built-in"),
    ],
)
def test_what_is_refused_names_the_field(fields: dict[str, object], where: str, words: str) -> None:
    with pytest.raises(ValueError, match=where) as raised:
        JobAgent.model_validate(fields)
    assert words in str(raised.value)


def test_the_oracle_stays_reserved() -> None:
    agent = JobAgent.model_validate({"name": "oracle"})
    assert agent.builtin is None
    assert agent.is_oracle


def test_endpoint_and_model_agents_of_a_builtins_name_are_not_builtins() -> None:
    endpoint = JobAgent.model_validate({"name": "codex", "endpoint": "http://agent:8000/run"})
    assert endpoint.builtin is None
    model = JobAgent.model_validate({"name": "codex", "model": {"name": "gpt-5"}})
    assert model.builtin is None
    assert model.model is not None


def test_a_missing_key_names_the_variable_and_the_builtin() -> None:
    from rollout.api.envrefs import resolve_agent_env
    from rollout.api.job import JobConfig

    job = JobConfig.model_validate(
        {"name": "j", "agents": [{"name": "claude-code"}], "datasets": [{"path": "/tmp"}]}
    )
    keys = entry("claude-code").keys_for(None)
    with pytest.raises(InvalidInput) as raised:
        resolve_agent_env(job, {}, file="job.yaml")
    text = str(raised.value)
    for key in keys:
        assert f"agents[0].env.{key}: environment variable {key} is not set" in text
        assert "the built-in agent 'claude-code' needs it" in text


# --- a RolloutJob's agent ---------------------------------------------------------------------


def test_a_resource_agent_needs_its_keys_from_a_secret() -> None:
    keys = entry("claude-code").keys_for(None)
    with pytest.raises(ValueError, match="needs") as raised:
        AgentSpec.model_validate({"name": "claude-code"})
    for key in keys:
        assert f"needs {key}: add it to env, from a Secret" in str(raised.value)
    env = [
        {"name": key, "valueFrom": {"secretKeyRef": {"name": "keys", "key": key}}} for key in keys
    ]
    agent = AgentSpec.model_validate({"name": "claude-code", "env": env, "modelName": "m"})
    assert agent.builtin == "claude-code"
    assert agent.version == entry("claude-code").version
    assert agent.model_name == "m"
    assert agent.execute_script == entry("claude-code").execute_script


def test_a_resource_agent_round_trips_unchanged() -> None:
    """The operator reads back what the CLI wrote: the same agent, nothing added twice."""
    job_agent = JobAgent.model_validate({"name": "gemini-cli", "flags": ["--debug"]})
    env = [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": "s", "key": k}}} for k in job_agent.env
    ]
    spec = AgentSpec(**job_agent.scripts(), env=env)
    again = AgentSpec.model_validate(spec.model_dump())
    assert again == spec
    assert spec.model_dump()["builtin"] == "gemini-cli"
    assert "install" not in {k for k, v in spec.model_dump().items() if v is not None}
