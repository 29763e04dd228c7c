"""Pod status parts as the kubelet writes them (containers' statuses, timestamps), for the unit
tests of what a Pod's status says: a trial Pod's (`podstatus`) and a build Pod's
(`buildstatus`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

IMAGE_ID_DIGEST = "b" * 64
CONTAINER_ID = "d" * 64


def ts(at: datetime) -> str:
    """An API timestamp: RFC 3339, UTC, whole seconds."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def waiting(name: str, image: str, reason: str, message: str | None = None) -> dict[str, Any]:
    """A container the kubelet has not started (pulling, creating, backing off)."""
    state: dict[str, Any] = {"reason": reason}
    if message is not None:
        state["message"] = message
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": state},
    }


def running(name: str, image: str, since: datetime) -> dict[str, Any]:
    """A container running since `since`."""
    return {
        "name": name,
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{IMAGE_ID_DIGEST}",
        "containerID": f"containerd://{'c' * 64}",
        "ready": True,
        "restartCount": 0,
        "started": True,
        "state": {"running": {"startedAt": ts(since)}},
    }


def terminated(
    name: str,
    image: str,
    *,
    code: int,
    reason: str,
    started: datetime,
    finished: datetime,
    message: str | None = None,
) -> dict[str, Any]:
    """A container that ended with `code` (and its termination message, if any)."""
    state: dict[str, Any] = {
        "exitCode": code,
        "reason": reason,
        "startedAt": ts(started),
        "finishedAt": ts(finished),
        "containerID": f"containerd://{CONTAINER_ID}",
    }
    if message is not None:
        state["message"] = message
    return {
        "name": name,
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{IMAGE_ID_DIGEST}",
        "containerID": f"containerd://{CONTAINER_ID}",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"terminated": state},
    }
