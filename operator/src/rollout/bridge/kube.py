"""The bridge's requests to the Kubernetes API: the operator's client, plus a claim and a Secret.

The bridge reads and writes what its role grants and nothing else: RolloutTrials (the claim is a
patch of the trial's metadata), their status, and single keys of the Secrets a trial's agent env
names (a Pod's kubelet resolves those; a bridge, which runs the agent itself, must).
"""

from __future__ import annotations

import base64
import binascii
from enum import Enum
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_random_exponential

from rollout.controller.kubeapi import CORE, MERGE_PATCH, OURS, TRIALS, KubeApi, namespaced_path

ANNOTATION_BRIDGE = "rollout.dev/bridge"
"""The identity of the bridge that claimed a trial: set once, never changed by another bridge."""


class ClaimOutcome(Enum):
    CLAIMED = "claimed"
    CONFLICT = "conflict"
    """The trial changed since it was read (another bridge may have claimed it): read it again."""
    GONE = "gone"


class SecretMissing(Exception):
    """A Secret, or the key in it, that an agent's env names is not there."""


STATUS_RETRY_SEC = 300.0
"""How long the bridge keeps trying to write a trial's final status through an API server that
fails or does not answer: past it, the trial is taken again later as a lost try."""


def transient(err: BaseException) -> bool:
    """An API error worth trying again: the server's (5xx), throttling (429), or none at all
    (a connection refused or cut, a timeout)."""
    if isinstance(err, ApiException):
        return err.status is None or err.status == 429 or err.status >= 500
    return isinstance(err, OSError | TimeoutError | urllib3.exceptions.HTTPError)


class BridgeApi(KubeApi):
    """The operator's API client (threads, timeouts, raw JSON) with the bridge's own requests."""

    async def patch_trial_status_surely(
        self, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any] | None:
        """`patch_trial_status`, tried again through transient failures for STATUS_RETRY_SEC:
        a trial's final status is all that tells the job it ended."""
        async for attempt in AsyncRetrying(
            retry=retry_if_exception(transient),
            wait=wait_random_exponential(multiplier=0.5, max=15),
            stop=stop_after_delay(STATUS_RETRY_SEC),
            reraise=True,
        ):
            with attempt:
                return await self.patch_trial_status(namespace, name, status)
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    async def claim_trial(
        self, namespace: str, name: str, resource_version: str, identity: str
    ) -> ClaimOutcome:
        """Write this bridge's identity on the trial if it is still the version read.

        The resourceVersion in a merge patch is a precondition: the API server refuses the
        patch (409) when the object changed in between, so of two bridges claiming one trial
        from the same version, exactly one succeeds; the other reads the trial again and sees
        the claim.
        """
        self._count(TRIALS, "patch")
        patch = {
            "metadata": {
                "resourceVersion": resource_version,
                "annotations": {ANNOTATION_BRIDGE: identity},
            }
        }
        try:
            await self._request(
                "PATCH",
                namespaced_path(OURS, namespace, TRIALS, name),
                patch,
                content_type=MERGE_PATCH,
                decode=False,
            )
        except ApiException as err:
            if err.status == 409:
                return ClaimOutcome.CONFLICT
            if err.status == 404:
                return ClaimOutcome.GONE
            raise
        return ClaimOutcome.CLAIMED

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        """One key of a Secret, decoded; SecretMissing when the Secret or the key is absent."""
        data, _ = await self.secret_data(namespace, name)
        if key not in data:
            raise SecretMissing(f"Secret {namespace}/{name} has no key {key!r}")
        return data[key]

    async def secret_data(self, namespace: str, name: str) -> tuple[dict[str, str], str]:
        """Every key of a Secret, decoded, and the Secret's resourceVersion; SecretMissing when
        it is absent or a value is not text."""
        secret: dict[str, Any] | None = await self._get(
            namespaced_path(CORE, namespace, "secrets", name)
        )
        if secret is None:
            raise SecretMissing(f"Secret {namespace}/{name} does not exist")
        decoded: dict[str, str] = {}
        for key, value in (secret.get("data") or {}).items():
            try:
                decoded[key] = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise SecretMissing(
                    f"key {key!r} of Secret {namespace}/{name} is not UTF-8 text"
                ) from None
        return decoded, str((secret.get("metadata") or {}).get("resourceVersion") or "")
