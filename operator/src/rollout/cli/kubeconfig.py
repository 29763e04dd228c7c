"""Which cluster and namespace the CLI talks to, as kubectl chooses them.

`--kubeconfig` (else $KUBECONFIG, else ~/.kube/config; inside a Pod without any, the in-cluster
service account), `--context` (else the config file's `kube.context`, which `rollout.cli.kube`
passes in, else the kubeconfig's current context), and the context's namespace (else "default").
Nothing here makes a request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from rollout.cli.errors import CliError

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ClusterError(CliError):
    """A request to the Kubernetes API failed; the message says what, where and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Configuration:
    """A loaded client configuration, the context it came from and that context's namespace."""

    configuration: client.Configuration
    context: str | None
    namespace: str


def kubeconfig_path(kubeconfig: str | None, environ: Mapping[str, str] | None) -> str:
    """`--kubeconfig`, else $KUBECONFIG, else ~/.kube/config, each part of the list expanded."""
    env = os.environ if environ is None else environ
    path = kubeconfig or env.get("KUBECONFIG", "").strip() or "~/.kube/config"
    return os.pathsep.join(str(Path(p).expanduser()) for p in path.split(os.pathsep) if p)


def list_contexts(
    kubeconfig: str | None, environ: Mapping[str, str] | None
) -> tuple[dict[str, str | None], str | None, str]:
    """The kubeconfig's contexts (name: its namespace, or None), its current context's name and
    the kubeconfig's path."""
    expanded = kubeconfig_path(kubeconfig, environ)
    if not any(Path(p).is_file() for p in expanded.split(os.pathsep)):
        raise ClusterError(
            f"no kubeconfig at {expanded}: pass --kubeconfig or set KUBECONFIG to the "
            "cluster's kubeconfig"
        )
    try:
        contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=expanded
        )
    except ConfigException as err:
        raise ClusterError(f"cannot use the kubeconfig {expanded}: {err}") from None
    names = {
        str(c.get("name")): (c.get("context") or {}).get("namespace") or None
        for c in contexts or []
    }
    return names, (str(current["name"]) if current else None), expanded


def load_configuration(
    kubeconfig: str | None,
    context: str | None,
    environ: Mapping[str, str] | None,
    *,
    context_source: str | None = None,
) -> Configuration:
    """The kubeconfig's (or the in-cluster account's) client configuration. `context_source`
    says where a `context` that is not a flag came from (the config file), for its errors."""
    configuration = client.Configuration()
    expanded = kubeconfig_path(kubeconfig, environ)
    readable = any(Path(p).is_file() for p in expanded.split(os.pathsep))
    if not readable and kubeconfig is None and IN_CLUSTER_NAMESPACE.is_file():
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as err:
            raise ClusterError(f"cannot use the in-cluster service account: {err}") from None
        default_namespace = IN_CLUSTER_NAMESPACE.read_text().strip() or "default"
        chosen_context = None
    else:
        if not readable:
            raise ClusterError(
                f"no kubeconfig at {expanded}: pass --kubeconfig or set KUBECONFIG to the "
                "cluster's kubeconfig"
            )
        try:
            contexts, current = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                config_file=expanded
            )
            chosen = _pick_context(contexts, current, context, expanded, context_source)
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=expanded,
                context=chosen["name"],
                client_configuration=configuration,
                persist_config=False,
            )
        except ConfigException as err:
            raise ClusterError(f"cannot use the kubeconfig {expanded}: {err}") from None
        chosen_context = chosen["name"]
        default_namespace = (chosen.get("context") or {}).get("namespace") or "default"
    return Configuration(configuration, chosen_context, default_namespace)


def _pick_context(
    contexts: list[dict[str, Any]] | None,
    current: dict[str, Any] | None,
    wanted: str | None,
    path: str,
    source: str | None = None,
) -> dict[str, Any]:
    if wanted is None:
        if current is None:
            raise ClusterError(f"the kubeconfig {path} has no current context: pass --context")
        return current
    for candidate in contexts or []:
        if candidate.get("name") == wanted:
            return candidate
    names = ", ".join(str(c.get("name")) for c in contexts or []) or "none"
    given = f" ({source}: pass --context, or run `rollout login` again)" if source else ""
    raise ClusterError(f"no context {wanted!r} in the kubeconfig {path} (it has: {names}){given}")
