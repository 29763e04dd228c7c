"""Text the kubelet passes on unchanged: what the operator writes into a container's command,
args and env values reaches the process byte for byte."""

from __future__ import annotations

from typing import Any


def kubelet_literal(text: str) -> str:
    """`text` written so that the kubelet passes it on unchanged.

    In a container's command, args and env values the kubelet replaces `$(NAME)` with the value
    of a variable defined earlier in the container and turns `$$` into `$` (the Kubernetes API
    reference, "Container": "Double $$ are reduced to a single $, which allows for escaping the
    $(VAR_NAME) syntax"). Unescaped, the shim's `$$` (its own pid) becomes `$`, and an agent's
    `echo $$` or `$(HOME)` is silently rewritten before it runs. With every `$` doubled, the
    expansion gives back exactly `text`.
    """
    return text.replace("$", "$$")


def as_kubelet_literals(container: dict[str, Any]) -> dict[str, Any]:
    """The container with `kubelet_literal` applied to its command, args and env values."""
    for field in ("command", "args"):
        if field in container:
            container[field] = [kubelet_literal(item) for item in container[field]]
    for variable in container.get("env", []):
        if "value" in variable:
            variable["value"] = kubelet_literal(variable["value"])
    return container
