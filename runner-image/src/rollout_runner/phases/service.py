"""Agents the runner answers for itself: an endpoint (seed 003) or a model behind an
OpenAI-compatible API (seed 002). Both are HTTP clients in the runner, in the agent_execution
phase, with the seed's error types; neither installs anything nor runs in the environment.

What the agent is asked: the attempt's instruction, with a data row's question, input and
metadata (`Question`). What it leaves, as files of the trial's logs/agent/ (`Answered.files`):

- `answer.txt`: its answer (the output of the endpoint's reply, the model's final answer);
- an endpoint: `request.json` (the payload sent; headers are never written) and
  `response.json` (the reply's body as it came);
- a model: `trajectory.json` (seed 002's trajectory: messages, tool calls, turns, usage).

The attempt's deadline is the task's agent timeout (after the job's multiplier); an endpoint's
`timeout_sec` bounds each request. The endpoint's own evaluation goes to the record
(`rollout.evaluation`), a model's token usage too (`rollout.usage`).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from rollout.api.additions import TokenUsage
from rollout.api.endpoint import attempt_id, endpoint_payload
from rollout.api.errors import ErrorType
from rollout.api.service_agents import AgentKind
from rollout_runner.answer import ANSWER_FILE, one_turn_trajectory
from rollout_runner.context import TrialContext
from rollout_runner.endpoint_agent import EndpointCall, call_endpoint
from rollout_runner.model_agent import ModelSettings, answer_question
from rollout_runner.record import Phase

ANSWER_NAME = PurePosixPath(ANSWER_FILE).name
"""The answer's file in logs/agent/, where a script agent may leave its own."""


@dataclass(frozen=True)
class Question:
    """What an attempt asks the agent."""

    task_id: str
    question: str
    """A row's question; a task's instruction."""
    instruction: str
    task_input: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Answered:
    """The agent's answer, its trajectory, and its files for logs/agent/ (by name)."""

    answer: str | None
    trajectory: dict[str, Any] | None
    files: dict[str, bytes]


async def answer(ctx: TrialContext, question: Question) -> Answered:
    """Ask the agent, timed as agent_execution; an answer of None has its error recorded."""
    with ctx.record.phase(Phase.AGENT_EXECUTION):
        if ctx.spec.agent.kind is AgentKind.ENDPOINT:
            return await _ask_endpoint(ctx, question)
        return await _ask_model(ctx, question)


async def _ask_endpoint(ctx: TrialContext, question: Question) -> Answered:
    spec = ctx.spec
    agent = spec.agent
    assert agent.endpoint is not None
    trace = ctx.record.trace
    payload = endpoint_payload(
        dataset=spec.dataset_name,
        job=spec.job_name,
        attempt=attempt_id(agent.name, spec.dataset_name, spec.task_name, spec.attempt),
        trace_id=trace.trace_id,
        instruction=question.instruction,
        task_input=question.task_input,
        metadata=question.metadata,
    )
    call = EndpointCall(
        agent.endpoint, headers=ctx.agent_env.headers, timeout_sec=agent.request_timeout_sec
    )
    started = ctx.clock.now()
    outcome = await asyncio.to_thread(
        call_endpoint, call, payload, traceparent=trace.traceparent, deadline=_deadline(ctx)
    )
    ended = ctx.clock.now()
    files = {"request.json": _json(payload)}
    if outcome.body is not None:
        files["response.json"] = outcome.body
    if outcome.reply is None:
        _fail(ctx, outcome.timed_out, outcome.error or "the endpoint gave no answer")
        return Answered(None, None, files)
    ctx.record.evaluation = outcome.reply.evaluation
    output = outcome.reply.output
    files[ANSWER_NAME] = output.encode()
    trajectory = one_turn_trajectory(
        question.task_id,
        question.question,
        question.instruction,
        output,
        started,
        ended,
        success=True,
    )
    return Answered(output, trajectory, files)


async def _ask_model(ctx: TrialContext, question: Question) -> Answered:
    model = ctx.spec.agent.model
    assert model is not None
    timeout = ctx.spec.timeouts.agent_sec
    settings = ModelSettings(
        model=model.name,
        base_url=model.base_url,
        api_key=ctx.agent_env.model_api_key,
        temperature=model.temperature,
        max_turns=model.max_turns,
        max_retries=model.max_retries,
        system_prompt=model.system_prompt,
        extra_params=dict(model.extra_params),
        # A completion arrives whole, after all its generation: one request may take as long
        # as the attempt may.
        request_timeout_sec=timeout,
    )
    outcome = await asyncio.to_thread(
        answer_question,
        settings,
        question.question,
        task_id=question.task_id,
        instruction=question.instruction,
        deadline=_deadline(ctx),
        traceparent=ctx.record.trace.traceparent,
    )
    ctx.record.usage = TokenUsage(**outcome.usage)
    files = {"trajectory.json": _json(outcome.trajectory)}
    if outcome.answer is None:
        _fail(ctx, outcome.timed_out, outcome.error or "the model gave no answer")
        return Answered(None, outcome.trajectory, files)
    files[ANSWER_NAME] = outcome.answer.encode()
    return Answered(outcome.answer, outcome.trajectory, files)


def _deadline(ctx: TrialContext) -> float:
    return time.monotonic() + ctx.spec.timeouts.agent_sec


def _fail(ctx: TrialContext, timed_out: bool, message: str) -> None:
    if timed_out:
        # The limit hit may be an endpoint's one request (timeout_sec) or the attempt's: the
        # message says which.
        ctx.record.fail(
            ErrorType.AGENT_EXECUTION_TIMEOUT,
            f"Agent execution timed out (the attempt's limit is "
            f"{ctx.spec.timeouts.agent_sec:g} seconds): {message}",
        )
    else:
        ctx.record.fail(ErrorType.AGENT_EXECUTION_FAILED, message)


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()
