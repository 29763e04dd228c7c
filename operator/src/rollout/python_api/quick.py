"""Seed 002's `quick_rollout`: one question answered in this process by a model behind an
OpenAI-compatible chat-completions API, with no cluster, no job and no files
(`rollout_runner.model_agent`, the model agent a job runs).

Tools through seed 002's sandbox server are not supported: `tools` or `sandbox_url` given is a
ValueError saying so (the model is told, should it call a tool anyway, that none is available).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout.python_api.config import DEFAULT_MODEL
from rollout_runner.model_agent import DEFAULT_BASE_URL, ModelSettings, answer_question

QUICK_TASK_ID = "quick_rollout"
"""The trajectory's task_id."""

TOOLS_NOT_SUPPORTED = (
    "tools through seed 002's sandbox server are not supported: quick_rollout answers with the "
    "model alone (leave tools and sandbox_url unset)"
)


def quick_rollout(
    question: str,
    *,
    model_name: str = DEFAULT_MODEL,
    api_key: str = "",
    base_url: str = "",
    max_turns: int = 10,
    tools: Sequence[str] | None = None,
    sandbox_url: str | None = None,
    temperature: float = 0.0,
    system_prompt: str | None = None,
) -> dict[str, Any]:
    """Answer `question` with `model_name` at `base_url` (default the OpenAI API).

    Returns seed 002's dict: `question`, `answer` (None when there is none), `success` (an
    answer was given), `error` (why not, else None) and `trajectory` (messages, tool_calls,
    final_answer, total_turns, success, start_time, end_time, execution_time_ms, usage).
    The model's and the server's failures are in `error`, never raised; ValueError for settings
    no request can be made with (an empty question, a temperature outside 0.0-2.0, max_turns
    below 1, a base URL that is not http(s)) and for `tools` or `sandbox_url`.

    Blocking: from async code, run it in a thread (`asyncio.to_thread`). The API key is sent in
    the Authorization header only and shows nowhere in the result.
    """
    refused = [
        name
        for name, given in (("tools", bool(tools)), ("sandbox_url", sandbox_url is not None))
        if given
    ]
    if refused:
        raise ValueError(f"quick_rollout: {' and '.join(refused)} given, but {TOOLS_NOT_SUPPORTED}")
    if not question.strip():
        raise ValueError("quick_rollout: the question is empty")
    try:
        settings = ModelSettings(
            model=model_name,
            base_url=base_url.strip() or DEFAULT_BASE_URL,
            api_key=api_key or None,
            temperature=temperature,
            max_turns=max_turns,
            system_prompt=system_prompt or None,
        )
    except ValueError as err:
        raise ValueError(f"quick_rollout: {err}") from None
    answer = answer_question(settings, question, task_id=QUICK_TASK_ID)
    return {
        "question": question,
        "answer": answer.answer,
        "success": answer.answer is not None,
        "error": answer.error,
        "trajectory": answer.trajectory,
    }
