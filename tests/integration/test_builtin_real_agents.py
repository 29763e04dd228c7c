"""A built-in agent's real CLI, installed by its own install script from the package registry,
run headless by its execute script on a task, against a model server written here (an
OpenAI-compatible chat-completions server on loopback: `chat_kit`): no model provider is called.

Opt-in (`ROLLOUT_TEST_REAL_AGENTS=1`): the install downloads the agent and its dependencies
(mini-swe-agent or aider, with litellm: about 30 s each from PyPI), which the suite's other
tests never do. What
it shows that the stand-ins cannot: that the CLI takes the flags the catalogue gives it, reads
the instruction, acts through the model's tool calls, stops, and leaves the trajectory whose
usage the script turns into the record.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from agents_kit import BuiltinRun, StandIns, requires_fake_container, run_builtin
from chat_kit import API_KEY, ChatServer, chat_server, completion, tool_call, usage

from rollout.storage import ObjectStore

pytestmark = [
    pytest.mark.integration,
    requires_fake_container(),
    pytest.mark.skipif(
        os.environ.get("ROLLOUT_TEST_REAL_AGENTS") != "1",
        reason="installs real agents from the package registry: set ROLLOUT_TEST_REAL_AGENTS=1",
    ),
]


def openai_env(model: ChatServer, **more: str) -> dict[str, str]:
    """The agent's env for litellm against the test's server: its key from the submitter's
    environment, its base URL, and no fetch of litellm's price list (nothing leaves the host)."""
    return {
        "OPENAI_API_KEY": "${OPENAI_API_KEY}",
        "OPENAI_API_BASE": model.base_url,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        **more,
    }


async def run_real(tmp_path: Path, store: ObjectStore, agent: dict[str, Any]) -> BuiltinRun:
    """`agent` installed for real (minutes allowed) and run, with the test server's key."""
    return await run_builtin(
        tmp_path,
        store,
        agent,
        StandIns(),
        environ={"OPENAI_API_KEY": API_KEY},
        install_sec=300.0,
        agent_sec=120.0,
    )


def requests_of(model: ChatServer) -> list[dict[str, Any]]:
    return [r.body if isinstance(r.body, dict) else json.loads(r.body) for r in model.seen]


async def test_mini_swe_agent_solves_the_task_through_the_models_tool_calls(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    with chat_server() as model:
        # mini-swe-agent 2.x acts through a `bash` tool call per step and stops on the command
        # that prints COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT (its mini.yaml).
        model.queue(
            completion(
                "I will write the file.",
                tool_calls=[
                    tool_call("c1", "bash", {"command": "echo 'Hello, world!' > /app/hello.txt"})
                ],
                usage=usage(100, 20),
            ),
            completion(
                "Done.",
                tool_calls=[
                    tool_call(
                        "c2", "bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
                    )
                ],
                usage=usage(150, 10),
            ),
        )
        agent = {
            "name": "mini-swe-agent",
            "model": "openai/test-model",
            # mini fails a model litellm cannot price, unless told to go on.
            "env": openai_env(model, MSWEA_COST_TRACKING="ignore_errors"),
        }
        run = await run_real(tmp_path, fast_retry_store, agent)
        seen, requests = model.seen, requests_of(model)

    result = run.report.result
    assert result.error is None, run.report.error_text
    assert result.reward == 1.0
    assert result.rollout is not None
    assert result.rollout.agent is not None
    assert result.rollout.agent.version == run.agent.version
    assert result.rollout.usage is not None
    assert (result.rollout.usage.input_tokens, result.rollout.usage.output_tokens) == (250, 30)
    trajectory = run.json("logs/agent/mini-swe-agent.traj.json")
    assert "messages" in trajectory
    assert "mini-swe-agent" in run.text("setup/stderr.txt")  # rollout_python_tool said so
    assert {r["model"] for r in requests} == {"test-model"}
    assert "Create the file `/app/hello.txt`" in json.dumps(requests[0]["messages"])
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in seen)
    assert API_KEY not in run.text("command/stdout.txt")


async def test_aider_writes_the_file_the_model_gives_it(
    tmp_path: Path, fast_retry_store: ObjectStore
) -> None:
    with chat_server() as model:
        # aider's "whole" edit format (its default for a model it does not know): the file's
        # path, then its whole content in a fence; --yes-always lets it create the file.
        model.queue(
            completion("hello.txt\n```\nHello, world!\n```\n", usage=usage(120, 15)),
        )
        agent = {
            "name": "aider",
            "model": "openai/test-model",
            # The server here answers whole completions, not streams (an extra flag of aider's).
            "flags": ["--no-stream"],
            "env": openai_env(model),
        }
        run = await run_real(tmp_path, fast_retry_store, agent)
        requests = requests_of(model)

    result = run.report.result
    assert result.error is None, run.report.error_text
    assert result.reward == 1.0, run.text("command/stdout.txt")
    assert result.rollout is not None
    assert result.rollout.usage is not None
    assert (result.rollout.usage.input_tokens, result.rollout.usage.output_tokens) == (120, 15)
    assert "aider.chat.history.md" in " ".join(run.objects)
    assert {r["model"] for r in requests} == {"test-model"}
    assert "Create the file `/app/hello.txt`" in json.dumps(requests[0]["messages"])
