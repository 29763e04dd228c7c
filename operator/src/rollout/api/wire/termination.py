"""The runner's termination message: the trial's outcome in at most 4096 bytes of JSON.

Kubernetes copies a container's termination-log file (default /dev/termination-log) into the Pod
status, which is how the operator learns the outcome without reading object storage. It keeps at
most 4096 bytes, so the message is compact JSON, and the free-text fields (the error message and
the upload error) are shortened, ending in `...[truncated]`, until it fits. The runner renders it
(`render`) and writes it (`rollout_runner.termination`); the operator reads it into
`TerminationMessage` (`rollout.controller.podstatus`).

Fields (the names of the trial's result.json, snake_case; every one may be null):

    reward        the trial's reward, as in result.json
    error         {"type": <error type>, "message": <text>}, as in result.json
    durations     result.json's durations
    timestamps    result.json's timestamps
    result_uri    s3://bucket/key of the trial's result.json
    upload_error  why the trial's files are not (all) in storage; null when they are
    rows          a shard of data rows only: {total, recorded, kept, scored, failed}, the rows'
                  counts (each row's own outcome is its result.json)
    runner        when the runner's process started, when its start-up was done (the trial
                  began), when its environment became ready (the shim's ready file's time) and
                  when it ended (this message written, the uploads done), on the node's clock:
                  what the runner's own overhead is measured by (benchmarks/), not part of the
                  outcome; the first to go should the message not fit

Example: {"reward":1.0,"error":null,"durations":{...},"timestamps":{...},
"result_uri":"s3://b/jobs/j/oracle/d/t__1/result.json","upload_error":null}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from rollout.api.base import ApiModel, FileModel
from rollout.api.results import Timestamp, TrialDurations, TrialError, TrialResult, TrialTimestamps

MAX_BYTES = 4096
DEFAULT_PATH = Path("/dev/termination-log")
TRUNCATED = "...[truncated]"


class RunnerTimes(ApiModel):
    """When the runner did what its overhead is measured between (each null when unknown)."""

    model_config = ConfigDict(extra="ignore")  # what a newer runner adds (see below)

    started_at: Timestamp | None = Field(None, description="The runner's process started.")
    trial_started_at: Timestamp | None = Field(
        None, description="Its start-up (Python, imports, storage client) done: the trial began."
    )
    environment_ready_at: Timestamp | None = Field(
        None,
        description="Its environment's shim wrote its ready file (about when the container "
        "started).",
    )
    ended_at: Timestamp | None = Field(
        None, description="It wrote the termination message, after its uploads."
    )


class TerminationMessage(FileModel):
    """The termination message's schema, for whoever reads it (the operator).

    Keys it does not know are ignored, not refused: a runner may be newer than the operator
    reading its message (a job's own runnerImage), and an unreadable message fails the trial.
    """

    model_config = ConfigDict(extra="ignore")

    reward: float | None = None
    error: TrialError | None = None
    durations: TrialDurations | None = None
    timestamps: TrialTimestamps | None = None
    result_uri: str | None = Field(None, description="s3:// URI of the trial's result.json.")
    upload_error: str | None = Field(None, description="Why uploads failed, if they did.")
    rows: dict[str, int] | None = Field(
        None,
        description="A shard's rows: total, recorded, kept (by an earlier try), scored, failed.",
    )
    runner: RunnerTimes | None = Field(None, description="When the runner did what (overhead).")


def from_result(
    result: TrialResult | None,
    *,
    result_uri: str | None,
    upload_error: str | None,
    runner: RunnerTimes | None = None,
) -> dict[str, Any]:
    """The message's fields for a trial result (or only an error, without one)."""
    dumped = result.model_dump(mode="json") if result is not None else {}
    fields = {
        "reward": dumped.get("reward"),
        "error": dumped.get("error"),
        "durations": dumped.get("durations"),
        "timestamps": dumped.get("timestamps"),
        "result_uri": result_uri,
        "upload_error": upload_error,
    }
    if runner is not None:
        fields["runner"] = runner.model_dump(mode="json", by_alias=False)
    return fields


def render(fields: dict[str, Any], limit: int = MAX_BYTES) -> bytes:
    """Compact UTF-8 JSON of `fields`, no longer than `limit` bytes.

    The error message and the upload error are cut to a common length, the longest that fits,
    so that a long upload error cannot crowd out the trial's error or the other way round.
    Should even empty texts not fit, runner, result_uri, timestamps and durations are dropped,
    in that order.
    """
    fields = json.loads(json.dumps(fields))  # a private deep copy
    texts = _texts(fields)
    originals = [holder[key] for holder, key in texts]

    def size_with(cap: int) -> int:
        for (holder, key), text in zip(texts, originals, strict=True):
            holder[key] = _cut(text, cap)
        return len(_dumps(fields))

    for droppable in (None, "runner", "result_uri", "timestamps", "durations"):
        if droppable is not None:
            fields[droppable] = None
        longest = max((len(t) for t in originals), default=0)
        if size_with(longest) <= limit:
            return _dumps(fields)
        if size_with(0) > limit:
            continue
        # The largest cap that fits: the size only grows with the cap.
        low, high = 0, longest
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if size_with(middle) <= limit else (low, middle - 1)
        size_with(low)
        return _dumps(fields)
    raise ValueError(f"a termination message cannot fit in {limit} bytes")


def _dumps(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()


def _texts(fields: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Where the free texts are: error.message and upload_error."""
    found: list[tuple[dict[str, Any], str]] = []
    error = fields.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        found.append((error, "message"))
    if isinstance(fields.get("upload_error"), str):
        found.append((fields, "upload_error"))
    return found


def _cut(text: str, cap: int) -> str:
    """`text` in at most `cap` characters, ending in the truncation marker when cut."""
    if len(text) <= cap:
        return text
    if cap < len(TRUNCATED):
        return ""
    return text[: cap - len(TRUNCATED)] + TRUNCATED
