"""The contract of an image build Pod: what the operator puts in it, what the runner image's
build helper (`rollout_runner.build`) reads and reports back.

A build Pod (`rollout.controller.build_pod`) builds one environment image and pushes it:

- init container `context` (the runner image): `python -m rollout_runner.build context` fetches
  the environment's archive from object storage (`CONTEXT_KEY_ENV`, the key of
  `environments/<environment hash>.tar.gz`) and unpacks it into `CONTEXT_DIR`. Only this
  container and `report` get storage credentials; the builder never sees them.
- container `build` (the builder's own image, BuildKit or Buildah): a POSIX sh script runs the
  builder with its output in `OUT_DIR/build.log` (and on the container's stdout, for
  `kubectl logs`), and writes the builder's exit status to `OUT_DIR/exit` last, once the log is
  complete. The builder leaves the pushed image's digest in `OUT_DIR/digest` (Buildah's
  `--digestfile`) or `OUT_DIR/metadata.json` (BuildKit's `--metadata-file`).
- container `report` (the runner image): `python -m rollout_runner.build report` waits for
  `OUT_DIR/exit` until the build's timeout (`TIMEOUT_ENV`) has passed, uploads the build log to
  `LOG_KEY_ENV` in storage, and writes a `BuildReport` as its termination message, which the
  operator reads from the Pod's status. It exits 0 whatever the build did: its report says.

The paths are the Pod's; the variables carry them to every container, so that nothing else need
know them (and a test kubelet can move them).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import Field, ValidationError

from rollout.api.base import FileModel

WORKSPACE_DIR = "/workspace"
"""An emptyDir shared by the Pod's three containers."""
CONTEXT_DIR = f"{WORKSPACE_DIR}/context"
"""The environment/ directory, unpacked: the build context and its Dockerfile."""
OUT_DIR = f"{WORKSPACE_DIR}/out"
"""Where the builder leaves its log, its exit status and the pushed digest."""

LOG_FILE = "build.log"
EXIT_FILE = "exit"
DIGEST_FILE = "digest"
METADATA_FILE = "metadata.json"

CONTEXT_KEY_ENV = "ROLLOUT_BUILD_CONTEXT_KEY"
"""Storage key of the environment's archive (`context`)."""
CONTEXT_DIR_ENV = "ROLLOUT_BUILD_CONTEXT"
"""Where the context is unpacked (`context`) and built from (`build`)."""
OUT_DIR_ENV = "ROLLOUT_BUILD_OUT"
"""The builder's output directory (`build`, `report`)."""
LOG_KEY_ENV = "ROLLOUT_BUILD_LOG_KEY"
"""Storage key the build log is uploaded to (`report`)."""
TIMEOUT_ENV = "ROLLOUT_BUILD_TIMEOUT_SEC"
"""Seconds the build may take, from the `report` container's start (`report`)."""
IMAGE_ENV = "ROLLOUT_BUILD_IMAGE"
"""The image reference to push, `<registry>/<repository>:<tag>` (`build`)."""
PLATFORM_ENV = "ROLLOUT_BUILD_PLATFORM"
"""The target platform, e.g. linux/amd64 (`build`)."""
PLAIN_HTTP_ENV = "ROLLOUT_BUILD_PLAIN_HTTP"
"""`true` to push over plain HTTP (a local registry without TLS), else `false` (`build`)."""
STORAGE_ENV = "ROLLOUT_BUILD_STORAGE"
"""Buildah's image store, an emptyDir (`build`, Buildah only)."""

MAX_BYTES = 4096
"""Kubernetes keeps at most 4096 bytes of a container's termination message."""
TAIL_LINES = 30
"""The most lines of the build log a report carries (the end of it)."""

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class BuildReport(FileModel):
    """What the `report` container learnt of the build: its termination message."""

    exit_code: int | None = Field(
        None, description="The builder's exit status; null when it did not finish in time."
    )
    timed_out: bool = Field(False, description="The build ran past its timeout.")
    digest: str | None = Field(
        None, description="The pushed image's manifest digest (sha256:...), when it was pushed."
    )
    log_tail: str = Field("", description="The last lines of the build log.")
    log_uri: str | None = Field(None, description="s3:// URI of the whole build log.")
    upload_error: str | None = Field(None, description="Why the log could not be uploaded.")
    build_sec: float | None = Field(
        None, ge=0, description="Seconds from the report container's start to the exit file."
    )

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0 and self.digest is not None and not self.timed_out


def log_tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a log, without a trailing newline."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def render_report(report: BuildReport, limit: int = MAX_BYTES) -> bytes:
    """The report as compact JSON within `limit` bytes: the log tail loses its oldest
    characters first (the end of a build log says why it failed)."""
    data = report.model_dump(mode="json")
    tail: str = data["log_tail"]

    def dumped(kept: int) -> bytes:
        data["log_tail"] = tail if kept >= len(tail) else "..." + tail[len(tail) - kept :]
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()

    if len(text := dumped(len(tail))) <= limit:
        return text
    if len(dumped(0)) > limit:
        raise ValueError(f"a build report cannot fit in {limit} bytes")
    low, high = 0, len(tail)  # the most characters kept that fit: the size grows with them
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if len(dumped(middle)) <= limit else (low, middle - 1)
    return dumped(low)


def parse_report(text: str | None) -> BuildReport | None:
    """The report in a termination message; None when it is not one."""
    if not text:
        return None
    try:
        data: Any = json.loads(text)
        return BuildReport.model_validate(data)
    except (ValueError, ValidationError):
        return None


def pushed_digest(digest_file: str | None, metadata_file: str | None) -> str | None:
    """The pushed manifest's digest, from Buildah's digest file (the digest alone) or
    BuildKit's metadata file (JSON with `containerimage.digest`); None when neither has one."""
    if digest_file and (found := _DIGEST.fullmatch(digest_file.strip())):
        return found.group(0)
    if metadata_file:
        try:
            metadata = json.loads(metadata_file)
        except ValueError:
            return None
        value = metadata.get("containerimage.digest") if isinstance(metadata, dict) else None
        if isinstance(value, str) and _DIGEST.fullmatch(value):
            return value
    return None
