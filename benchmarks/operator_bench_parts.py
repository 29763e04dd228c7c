"""The pure parts of `operator_throughput.py`: manifests, storage settings, figures.

Nothing here talks to an API, storage or a process, so that each part is tested without a
cluster (tests/unit/test_bench_operator.py), which the `--api cluster` and `--job-ratio` modes
need and the test suite does not have.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

GROUP, VERSION = "rollout.dev", "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CRD_NAMES = (
    f"rolloutjobs.{GROUP}",
    f"rollouttrials.{GROUP}",
    f"rolloutimages.{GROUP}",
)
"""The CRDs the operator watches: all of them must be installed before it starts."""

NO_NODE_LABEL = "rollout.dev/benchmark-no-such-node"
"""A node label no node has: trial Pods that select it are never scheduled, so only the control
plane is measured (`--api cluster`)."""

SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
)
"""What the API server (or the owner) put in an object's metadata: not part of a template."""


# --- manifests ----------------------------------------------------------------------------------


def namespace_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "rollout-benchmark"}},
    }


def rollout_job(
    name: str,
    datasets: Sequence[Mapping[str, str]],
    *,
    attempts: int,
    concurrency: int,
    node_selector: Mapping[str, str] | None = None,
    storage: Mapping[str, Any] | None = None,
    runner_image: str | None = None,
    resources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A RolloutJob of the oracle agent on `datasets`.

    `node_selector`: spec.pod.nodeSelector, the RolloutJob's field for its trial Pods' node
    labels (a selector no node matches keeps them unscheduled); `storage`: spec.storage (else the
    operator's own); `resources`: spec.environment's overrideCpus/overrideMemory/overrideStorage
    (keys `cpus`, `memory`, `storage`)."""
    spec: dict[str, Any] = {
        "agents": [{"name": "oracle"}],
        "datasets": [dict(d) for d in datasets],
        "nAttempts": attempts,
        "nConcurrentTrials": concurrency,
    }
    if node_selector:
        spec["pod"] = {"nodeSelector": dict(node_selector)}
    if storage:
        spec["storage"] = dict(storage)
    if runner_image:
        spec["runnerImage"] = runner_image
    if resources:
        overrides = {
            "cpus": "overrideCpus",
            "memory": "overrideMemory",
            "storage": "overrideStorage",
        }
        spec["environment"] = {overrides[k]: v for k, v in resources.items()}
    return {
        "apiVersion": API_VERSION,
        "kind": "RolloutJob",
        "metadata": {"name": name},
        "spec": spec,
    }


OVERRIDES = {"cpus": "overrideCpus", "memory": "overrideMemory", "storage": "overrideStorage"}


def unschedulable_selector(run_id: str) -> dict[str, str]:
    """A nodeSelector no node matches (a label no node has, with this run's value)."""
    return {NO_NODE_LABEL: run_id}


def template(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object as the API server has it, made a manifest to create another like it: no status,
    none of the server's metadata, no owner."""
    body = copy.deepcopy(dict(obj))
    body.pop("status", None)
    metadata = body.setdefault("metadata", {})
    for key in SERVER_METADATA:
        metadata.pop(key, None)
    metadata.pop("namespace", None)
    return body


@dataclass(frozen=True)
class CeilingPair:
    """A RolloutTrial to create and, once its uid is known, its Pod: what the operator creates
    for each trial, made by a plain client to measure the API's own ceiling."""

    trial: dict[str, Any]
    pod: Callable[[str], dict[str, Any]]


def ceiling_pair(
    trial_template: Mapping[str, Any], pod_template: Mapping[str, Any], index: int
) -> CeilingPair:
    """The `index`th copy of a trial and its Pod (templates made by `template`): its own names
    and `rollout.dev/trial` label, the Pod owned by the trial as the operator's are."""
    name = f"ceiling-{index:06d}"
    trial = copy.deepcopy(dict(trial_template))
    trial["metadata"]["name"] = name
    _relabel(trial, name)

    def pod(trial_uid: str) -> dict[str, Any]:
        body = copy.deepcopy(dict(pod_template))
        body["metadata"]["name"] = name
        _relabel(body, name)
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": "RolloutTrial",
                "name": name,
                "uid": trial_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        spec = body.get("spec") or {}
        spec.pop("nodeName", None)
        return body

    return CeilingPair(trial, pod)


def _relabel(body: dict[str, Any], name: str) -> None:
    labels = body["metadata"].get("labels")
    if isinstance(labels, dict):
        if "rollout.dev/trial" in labels:
            labels["rollout.dev/trial"] = name
        if "rollout.dev/job" in labels:
            labels["rollout.dev/job"] = "ceiling"


def benchmark_task(image: str) -> dict[str, str]:
    """A trivial task's files (path: content): the oracle's solve.sh does nothing and the
    verifier writes reward 1. `image` must have bash (the runner runs `bash solve.sh` and
    `bash /tests/test.sh` in it)."""
    return {
        "task.toml": (
            'version = "1.0"\n\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 60.0\n\n'
            f"[environment]\ndocker_image = {_toml_string(image)}\n"
        ),
        "instruction.md": "Do nothing.\n",
        "solution/solve.sh": "#!/bin/bash\ntrue\n",
        "tests/test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        "environment/Dockerfile": f"FROM {image}\n",
    }


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def job_pod_container(
    name: str, image: str, resources: Mapping[str, Any], sleep_sec: float
) -> dict[str, Any]:
    """A container of the Indexed Job's Pods: `image` sleeping `sleep_sec`, with `resources`
    (requests and limits as the trial Pod's container of that name has them)."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",  # never a forced pull, as the trial Pods
        "command": ["/bin/sh", "-c", f"sleep {sleep_sec:g}"],
        "resources": copy.deepcopy(dict(resources)),
    }


def containers_like(pod: Mapping[str, Any], sleep_sec: float) -> list[dict[str, Any]]:
    """The Job Pod's containers for a trial Pod (`render_trial_pod`'s manifest): one per
    container of the trial Pod, the same name, image, requests and limits, sleeping instead."""
    return [
        job_pod_container(c["name"], c["image"], c.get("resources") or {}, sleep_sec)
        for c in (pod.get("spec") or {}).get("containers") or []
    ]


def indexed_job(
    name: str,
    *,
    completions: int,
    parallelism: int,
    containers: Sequence[Mapping[str, Any]],
    node_selector: Mapping[str, str] | None = None,
    termination_grace_sec: int | None = None,
) -> dict[str, Any]:
    """A batch/v1 Indexed Job of `completions` Pods, `parallelism` at a time, each running
    `containers` once (restartPolicy Never; a failed Pod is retried up to `completions` times in
    all, so that one bad node does not fail the comparison)."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [dict(c) for c in containers],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if termination_grace_sec is not None:
        pod_spec["terminationGracePeriodSeconds"] = termination_grace_sec
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "rollout-benchmark"}},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": parallelism,
            "backoffLimit": completions,
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/part-of": "rollout-benchmark"}},
                "spec": pod_spec,
            },
        },
    }


def job_finished(job: Mapping[str, Any]) -> str | None:
    """ "Complete" or "Failed" once a Job has that condition True; None while it runs."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return str(condition["type"])
    return None


# --- storage ------------------------------------------------------------------------------------

STORAGE_ENV_PREFIX = "ROLLOUT_BENCH_S3_"


@dataclass(frozen=True)
class BenchStorage:
    """An S3 endpoint for the benchmark, from ROLLOUT_BENCH_S3_* (None: the local moto server).

    ENDPOINT is how this machine (and the operator process, which runs here) reaches it;
    CLUSTER_ENDPOINT how the trial Pods do, when that differs (a MinIO inside the cluster);
    BUCKET (default rollout-bench, made if missing), REGION, PATH_STYLE (default true), and
    credentials from ROLLOUT_BENCH_S3_ACCESS_KEY_ID/SECRET_ACCESS_KEY or AWS_ACCESS_KEY_ID/
    AWS_SECRET_ACCESS_KEY."""

    endpoint: str
    cluster_endpoint: str
    bucket: str
    region: str | None
    path_style: bool
    access_key_id: str | None
    secret_access_key: str | None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> BenchStorage | None:
        def get(key: str) -> str:
            return environ.get(STORAGE_ENV_PREFIX + key, "").strip()

        endpoint = get("ENDPOINT")
        if not endpoint:
            return None
        return cls(
            endpoint=endpoint,
            cluster_endpoint=get("CLUSTER_ENDPOINT") or endpoint,
            bucket=get("BUCKET") or "rollout-bench",
            region=get("REGION") or None,
            path_style=get("PATH_STYLE").lower() not in ("false", "0", "no"),
            access_key_id=get("ACCESS_KEY_ID") or environ.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=(
                get("SECRET_ACCESS_KEY") or environ.get("AWS_SECRET_ACCESS_KEY") or None
            ),
        )

    def job_storage(self, prefix: str, secret: str | None) -> dict[str, Any]:
        """spec.storage of a RolloutJob: where its trial Pods reach the bucket."""
        storage: dict[str, Any] = {
            "bucket": self.bucket,
            "prefix": prefix,
            "endpoint": self.cluster_endpoint,
            "pathStyle": self.path_style,
        }
        if self.region:
            storage["region"] = self.region
        if secret:
            storage["credentialsSecret"] = secret
        return storage


# --- figures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    """`count` things in `seconds`."""

    count: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else math.inf

    def __str__(self) -> str:
        return f"{self.count} in {self.seconds:.1f} s = {self.per_second:.2f}/s"


def ratio(numerator: Rate, denominator: Rate) -> float:
    """How fast `numerator` went as a share of `denominator` (per second over per second)."""
    if denominator.per_second == 0:
        return math.inf
    return numerator.per_second / denominator.per_second


def bound_by(operator: Rate, ceiling: Rate, *, near: float = 0.8) -> str:
    """Which party a creation rate is bounded by: the API (its plain-client ceiling) when the
    operator reaches `near` of it, else the operator."""
    share = ratio(operator, ceiling)
    if share >= near:
        return f"the API ({share:.0%} of its plain-client ceiling)"
    return f"the operator ({share:.0%} of the API's plain-client ceiling)"


def percentile(values: Iterable[float], fraction: float) -> float:
    """The value below which `fraction` of `values` lie (nearest rank; the largest for 1)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


RUNNER_TIMES = ("started_at", "trial_started_at", "environment_ready_at", "ended_at")


def runner_times(pod: Mapping[str, Any], container: str) -> dict[str, datetime] | None:
    """When a trial Pod's runner started, ended its start-up, saw its environment ready and
    ended: its termination message's `runner`, on the node's clock. None until the container
    `container` has ended with all four."""
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") != container:
            continue
        terminated = (status.get("state") or {}).get("terminated") or {}
        try:
            runner = json.loads(terminated.get("message") or "")["runner"]
            return {key: datetime.fromisoformat(runner[key]) for key in RUNNER_TIMES}
        except (ValueError, KeyError, TypeError):
            return None
    return None


RUNNER_OVERHEAD_ROWS = (
    ("environment ready -> runner end", "environment_ready_at", "ended_at"),
    ("runner start -> trial start (its start-up)", "started_at", "trial_started_at"),
    ("runner start -> environment ready", "started_at", "environment_ready_at"),
)


def runner_overhead(times: Sequence[Mapping[str, datetime]]) -> list[tuple[str, float, float]]:
    """(what, p50 ms, p90 ms) over the runners' times (`runner_times`) for each span of
    `RUNNER_OVERHEAD_ROWS`. The first is the issue's measure of the runner's overhead (with a
    trivial task's commands inside it); the last is how far ahead of its environment a runner
    started (negative: after it)."""
    rows = []
    for label, begin, end in RUNNER_OVERHEAD_ROWS:
        spans = [(t[end] - t[begin]).total_seconds() * 1000 for t in times]
        rows.append((label, percentile(spans, 0.5), percentile(spans, 0.9)))
    return rows


_METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text exposition: {(name, labels): value} (comments skipped)."""
    values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _METRIC_LINE.match(line)
        if match is None:
            continue
        labels = frozenset(_LABEL.findall(match.group(3) or ""))
        try:
            values[(match.group(1), labels)] = float(match.group(4))
        except ValueError:
            continue
    return values


def api_writes(text: str) -> dict[tuple[str, str], float]:
    """The operator's writes by (resource, verb), from its /metrics (`rollout_api_writes_total`:
    the writes of its own API client; kopf's few, a job's finalizer and events, are not there)."""
    writes: dict[tuple[str, str], float] = {}
    for (name, labels), value in parse_metrics(text).items():
        if name != "rollout_api_writes_total":
            continue
        found = dict(labels)
        writes[(found.get("resource", ""), found.get("verb", ""))] = value
    return writes


def writes_between(
    before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float]
) -> dict[tuple[str, str], float]:
    """Writes made between two readings of `api_writes` (kinds with none left out)."""
    return {
        key: value - before.get(key, 0.0)
        for key, value in sorted(after.items())
        if value - before.get(key, 0.0) > 0
    }
