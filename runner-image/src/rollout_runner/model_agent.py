"""A model agent (seed 002): a model behind an OpenAI-compatible chat-completions API answers one
question, turn by turn, and its conversation is recorded as seed 002's trajectory.

The conversation starts with the system prompt (`ModelSettings.system_prompt`, else
`DEFAULT_SYSTEM_PROMPT`) and the user's message (the instruction when there is one, else the
question). Each turn is one completion, `POST {base_url}/chat/completions` with `{"model",
"messages", "temperature", **extra_params}` (`rollout_runner.chat_http`: the key in
`Authorization: Bearer <key>`, a W3C `traceparent` header when given, connection errors, 429 and
5xx retried `max_retries` times after the first try, with backoff or the server's Retry-After).

- A reply with `tool_calls`: each call is recorded (the trajectory's `tool_calls`: turn, id,
  name, arguments as the model wrote them), and the assistant message is followed by one `tool`
  message per call saying that no tools are available in this run (tools through seed 002's
  sandbox server are not supported); the next turn follows.
- A reply without: its text is the final answer; the text inside `<answer>...</answer>` when it
  holds such tags (the last pair), stripped of surrounding whitespace. A reply without text and
  with the model's `refusal` is no answer, the refusal being the error.
- No final answer after `max_turns` turns, an HTTP status other than 2xx, 429 and 5xx, the
  retries exhausted, an answer that is not a chat completion: no answer, and `error` says which
  (with the status and at most 300 characters of the body, scrubbed of the key).
- The `deadline` (a `time.monotonic()` value) bounds the whole attempt: no request is sent and no
  backoff slept past it, a request's timeouts are cut to it, and running out of time is no
  answer with `timed_out` set.

Token usage is summed over the turns from each reply's `usage` (`prompt_tokens`,
`completion_tokens`, `total_tokens` are `input_tokens`, `output_tokens`, `total_tokens`).

The API key is in the request header only: never in a repr, a log line, an error, the answer or
the trajectory (all scrubbed of it, in case the server echoes it back).

Synchronous, with no dependency on the trial machinery: callers in async code run it in a
thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rollout.api.results import format_timestamp
from rollout.api.tracecontext import TRACEPARENT_HEADER
from rollout_runner.chat_http import (
    BACKOFF_INITIAL_SEC,
    CallFailed,
    ChatHttp,
    Reply,
    Scrub,
    chat_completions_url,
    check_chat_settings,
    completion_message,
    not_a_completion,
    scrub_value,
    shown,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Seed 002's API when none is named."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer the user's question directly and concisely. "
    "No tools are available. Give your final answer inside <answer></answer> tags."
)

NO_TOOLS_REPLY = (
    "No tools are available in this run: this tool was not called. Answer the question "
    "directly, without calling a tool."
)
"""The `tool` message answering each tool call."""

_ANSWER_TAGS = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)

USAGE_KEYS = {
    "prompt_tokens": "input_tokens",
    "completion_tokens": "output_tokens",
    "total_tokens": "total_tokens",
}
"""A completion's `usage` fields and the names the trajectory and result files give them."""


@dataclass(frozen=True)
class ModelSettings:
    """A model agent's settings (job.yaml's `model:`, seed 002's model configuration)."""

    model: str
    base_url: str
    api_key: str | None = field(default=None, repr=False)
    temperature: float = 0.0
    max_turns: int = 10
    max_retries: int = 3
    """Retries of each completion after its first try."""
    system_prompt: str | None = None
    """None or empty: `DEFAULT_SYSTEM_PROMPT`."""
    extra_params: dict[str, Any] = field(default_factory=dict)
    """More fields of each request body (`max_tokens`, ...); not model, messages, temperature."""
    request_timeout_sec: float = 60.0
    """For each request: to connect, and between bytes of the answer."""

    def __post_init__(self) -> None:
        check_chat_settings(
            "the model agent",
            model=self.model,
            base_url=self.base_url,
            temperature=self.temperature,
            max_retries=self.max_retries,
            timeout_sec=self.request_timeout_sec,
            extra_params=self.extra_params,
        )
        if self.max_turns < 1:
            raise ValueError(f"the model agent's max_turns {self.max_turns} is not at least 1")

    @property
    def url(self) -> str:
        return chat_completions_url(self.base_url)


@dataclass
class ModelAnswer:
    answer: str | None
    """The final answer; None when there is none."""
    trajectory: dict[str, Any]
    """Seed 002's trajectory (see `answer_question`)."""
    usage: dict[str, int]
    """input_tokens, output_tokens, total_tokens, summed over the turns."""
    error: str | None
    """Why there is no answer (scrubbed of the key), else None."""
    timed_out: bool
    """The deadline passed."""


def answer_question(
    settings: ModelSettings,
    question: str,
    *,
    task_id: str = "",
    instruction: str | None = None,
    deadline: float | None = None,
    traceparent: str | None = None,
    backoff_initial_sec: float = BACKOFF_INITIAL_SEC,
) -> ModelAnswer:
    """Have the model answer `question` (shown `instruction` instead when given); never raises
    for the model's or the server's failures (see the module).

    The trajectory has seed 002's fields: task_id, question, messages (the whole conversation,
    the system prompt and the final assistant message included), tool_calls, final_answer,
    total_turns (completions received), success (a final answer was given), start_time,
    end_time, execution_time_ms; and usage.
    """
    started = datetime.now(UTC)
    clock = time.monotonic()
    conversation = _Conversation(settings, question, instruction)
    headers = {TRACEPARENT_HEADER: traceparent} if traceparent else None
    with ChatHttp(
        settings.url,
        api_key=settings.api_key,
        where=f"model {settings.model} at {settings.url}",
        timeout_sec=settings.request_timeout_sec,
        max_retries=settings.max_retries,
        backoff_initial_sec=backoff_initial_sec,
        logger=log,
    ) as http:
        while conversation.answer is None and conversation.error is None:
            if conversation.turns >= settings.max_turns:
                turns = "1 turn" if settings.max_turns == 1 else f"{settings.max_turns} turns"
                conversation.error = f"no final answer within {turns}"
                break
            try:
                reply = http.post(conversation.request(), deadline=deadline, headers=headers)
            except CallFailed as error:
                conversation.error = error.message
                conversation.timed_out = error.timed_out
                break
            conversation.take(reply, http)
    ended = datetime.now(UTC)
    elapsed_ms = round((time.monotonic() - clock) * 1000)
    return conversation.result(task_id, question, started, ended, elapsed_ms, http.scrub)


class _Conversation:
    """The messages so far and what the replies said."""

    def __init__(self, settings: ModelSettings, question: str, instruction: str | None) -> None:
        self.settings = settings
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": settings.system_prompt or DEFAULT_SYSTEM_PROMPT},
            {"role": "user", "content": question if instruction is None else instruction},
        ]
        self.tool_calls: list[dict[str, Any]] = []
        self.usage = dict.fromkeys(USAGE_KEYS.values(), 0)
        self.turns = 0
        self.answer: str | None = None
        self.error: str | None = None
        self.timed_out = False

    def request(self) -> dict[str, Any]:
        return {
            "model": self.settings.model,
            "messages": self.messages,
            "temperature": self.settings.temperature,
            **self.settings.extra_params,
        }

    def take(self, reply: Reply, http: ChatHttp) -> None:
        """Read one completion: a final answer, tool calls to answer, or an error."""
        completion = _read_completion(reply.data)
        if completion is None:
            self.error = not_a_completion(http.where, reply.data, http.scrub)
            return
        self.turns += 1
        for key, value in completion.usage.items():
            self.usage[key] += value
        assistant: dict[str, Any] = {"role": "assistant", "content": completion.content}
        if completion.tool_calls:
            assistant["tool_calls"] = completion.tool_calls
            self.messages.append(assistant)
            for call in completion.tool_calls:
                function = call.get("function") or {}
                self.tool_calls.append(
                    {
                        "turn": self.turns,
                        "id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": function.get("arguments"),
                    }
                )
                self.messages.append(
                    {"role": "tool", "tool_call_id": call.get("id"), "content": NO_TOOLS_REPLY}
                )
            log.info(
                "%s: turn %d asked for %d tool call(s); no tools are available",
                http.where,
                self.turns,
                len(completion.tool_calls),
            )
            return
        self.messages.append(assistant)
        if not completion.content and completion.refusal:
            refusal = shown(completion.refusal.encode(), http.scrub)
            self.error = f"{http.where} refused to answer: {refusal}"
            return
        self.answer = _final_answer(completion.content or "")

    def result(
        self,
        task_id: str,
        question: str,
        started: datetime,
        ended: datetime,
        elapsed_ms: int,
        scrub: Scrub,
    ) -> ModelAnswer:
        trajectory = {
            "task_id": task_id,
            "question": question,
            "messages": self.messages,
            "tool_calls": self.tool_calls,
            "final_answer": self.answer,
            "total_turns": self.turns,
            "success": self.answer is not None,
            "start_time": format_timestamp(started),
            "end_time": format_timestamp(ended),
            "execution_time_ms": elapsed_ms,
            "usage": dict(self.usage),
        }
        return ModelAnswer(
            answer=None if self.answer is None else scrub(self.answer),
            trajectory=scrub_value(trajectory, scrub),
            usage=dict(self.usage),
            error=None if self.error is None else scrub(self.error),
            timed_out=self.timed_out,
        )


@dataclass(frozen=True)
class _Completion:
    """What one chat completion says."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    refusal: str | None
    usage: dict[str, int]


def _read_completion(data: bytes) -> _Completion | None:
    """The completion in `data`, or None when `data` is not a chat completion.

    Its text is `choices[0].message.content`: a string, null, or a list of content parts
    (`[{"type": "text", "text": ...}]`, their texts joined); its tool calls a list of objects
    with an object `function`."""
    message = completion_message(data)
    if message is None:
        return None
    content = message.get("content")
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        content = "".join(
            part["text"]
            for part in content
            if part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    elif content is not None and not isinstance(content, str):
        return None
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list) or not all(
        isinstance(call, dict) and isinstance(call.get("function") or {}, dict) for call in calls
    ):
        return None
    refusal = message.get("refusal")
    return _Completion(
        content=content,
        tool_calls=calls,
        refusal=refusal if isinstance(refusal, str) and refusal else None,
        usage=_usage(json.loads(data).get("usage")),
    )


def _usage(usage: Any) -> dict[str, int]:
    """A completion's token counts under our names; total_tokens, when missing, the sum."""
    if not isinstance(usage, dict):
        return {}
    counts = {
        ours: value
        for theirs, ours in USAGE_KEYS.items()
        if isinstance(value := usage.get(theirs), int) and not isinstance(value, bool)
    }
    if "total_tokens" not in counts:
        counts["total_tokens"] = counts.get("input_tokens", 0) + counts.get("output_tokens", 0)
    return counts


def _final_answer(text: str) -> str:
    """The text inside the last `<answer>...</answer>`, else the whole text; stripped."""
    tagged = _ANSWER_TAGS.findall(text)
    return (tagged[-1] if tagged else text).strip()
