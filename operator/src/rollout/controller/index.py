"""The in-memory index: what the operator knows of every RolloutTrial and trial Pod it watches.

The operator's own watches keep the trials' and Pods' indexes (`watches.Index`, with the values
made here) and, crucially for crash safety, fill them from a first listing before kopf starts any
daemon; kopf keeps the RolloutImages' (`kopf.index` in `handlers.py`). A restarted operator
therefore sees every trial that exists before it decides which trials to create, so it neither
duplicates nor loses one.

The values are small and plain (frozen dataclasses of strings and numbers), so that 100,000 trials
fit in memory; a Pod keeps only what `podstatus.classify_pod` and `cost.pod_cost` read (its
status, its timestamps, its containers' names, images and resources, its overhead and
deadline), not its spec with the inline shim; the containers are shared among Pods alike, and
keys and short strings among all (`compact`).

Keys:
- trials by the uid of the RolloutJob that owns them (a job deleted and created again under the
  same name never sees the old job's trials);
- Pods by (namespace, trial name), from their owner reference to the RolloutTrial;
- RolloutImages by (namespace, name): what a trial waiting for a built image needs to know.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rollout.api.aggregate import TrialOutcome
from rollout.api.environment import EnvironmentType
from rollout.api.errors import ErrorType
from rollout.api.failures import FailureClass
from rollout.api.images import pinned_reference
from rollout.api.resources import (
    LABEL_TRIAL,
    ImagePhase,
    ImageReason,
    RolloutJob,
    RolloutTrial,
    TrialConditionReason,
    TrialConditionType,
    TrialPhase,
)
from rollout.api.trials import TrialKey, child_name
from rollout.controller.podfields import timestamp

FINISHED_PHASES = frozenset({TrialPhase.SUCCEEDED, TrialPhase.FAILED})


@dataclass(frozen=True, slots=True)
class RowEntry:
    """A row of a finished shard, as its status lists it (`RowOutcome`)."""

    id: str
    attempt: int
    reward: float | None = None
    error_type: ErrorType | None = None
    failure_class: FailureClass | None = None


@dataclass(frozen=True, slots=True)
class TrialEntry:
    """One RolloutTrial as the job's reconciler needs it."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    agent: str
    dataset: str
    task: str
    attempt: int
    environment_type: str = EnvironmentType.KUBERNETES.value
    preserve_env: bool = False
    phase: TrialPhase | None = None
    reward: float | None = None
    error_type: ErrorType | None = None
    failure_class: FailureClass | None = None
    cost: float | None = None
    pod_name: str | None = None
    infra_retries: int = 0
    earlier_tries: int = 0
    """Tries before this RolloutTrial (a resumed job's trial that runs again)."""
    deleting: bool = False
    created_at: datetime | None = None
    image_build: str | None = None
    """The RolloutImage whose image the trial runs (an image built in the cluster)."""
    waiting_for_image: bool = False
    """Its status says it waits for that image (so it is not said again)."""
    shard: bool = False
    """A shard of data rows (its spec has `rows`): its rows are the seed's trials."""
    rows: tuple[RowEntry, ...] = ()
    """A finished shard's rows, as its status lists them."""

    @property
    def key(self) -> TrialKey:
        return TrialKey(self.agent, self.dataset, self.task, self.attempt)

    @property
    def tries(self) -> int:
        """The trial's tries so far, this one included: those before this RolloutTrial (a
        resumed job's), its first Pod, and one per infrastructure retry."""
        return self.earlier_tries + self.infra_retries + 1

    @property
    def finished(self) -> bool:
        """The trial ended (Succeeded or Failed): nothing more happens to it."""
        return self.phase in FINISHED_PHASES

    @property
    def runs_in_pod(self) -> bool:
        """Whether this operator runs the trial in a Pod (other types would be a bridge
        controller's, which this version does not have)."""
        return self.environment_type == EnvironmentType.KUBERNETES.value

    @property
    def current_pod_name(self) -> str:
        """The Pod that runs (or is to run) the trial's current attempt at it."""
        return self.pod_name or pod_name_for(self.name, self.infra_retries)

    def outcome(self) -> TrialOutcome:
        """What the job's figures need of this trial (an unfinished trial counts only in total)."""
        finished = self.finished
        return TrialOutcome(
            task_name=self.task,
            dataset_name=self.dataset,
            agent_name=self.agent,
            attempt=self.attempt,
            reward=self.reward if finished else None,
            error_type=self.error_type if finished else None,
            cost=self.cost,
            failure_class=self.failure_class if finished else None,
        )


@dataclass(frozen=True, slots=True)
class PodEntry:
    """A trial Pod: its name and the parts of it that say how the trial fares."""

    namespace: str
    name: str
    uid: str
    trial: str
    body: Mapping[str, Any]

    @property
    def deleting(self) -> bool:
        return bool((self.body.get("metadata") or {}).get("deletionTimestamp"))


RunnerStarted = Callable[[TrialEntry], bool]
"""Whether a trial's current Pod shows its runner started (the index's Pods, asked on demand)."""


def no_runner_started(trial: TrialEntry) -> bool:
    """A `RunnerStarted` for where no Pod is known."""
    return False


def pod_name_for(trial_name: str, retry: int) -> str:
    """The Pod of a trial's attempt number `retry`: the trial's own name first (so that
    `kubectl logs <trial>` works), then `<trial>-r<n>` after an infrastructure retry."""
    if retry < 0:
        raise ValueError(f"retry must be 0 or more, not {retry}")
    return trial_name if retry == 0 else child_name(trial_name, f"r{retry}")


# --- reading bodies (tolerant: the index must never fail on a garbled object) ---------------------


def owner_uid(body: Mapping[str, Any], kind: str) -> str | None:
    """The uid of the controlling owner of `kind` (or the first owner of that kind)."""
    owners = [
        ref
        for ref in (body.get("metadata") or {}).get("ownerReferences") or []
        if isinstance(ref, Mapping) and ref.get("kind") == kind and ref.get("uid")
    ]
    owners.sort(key=lambda ref: not ref.get("controller"))
    return str(owners[0]["uid"]) if owners else None


def owner_name(body: Mapping[str, Any], kind: str) -> str | None:
    """The name of the controlling owner of `kind`, if any."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == kind and ref.get("name"):
            return str(ref["name"])
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _phase(value: Any) -> TrialPhase | None:
    try:
        return TrialPhase(value) if value is not None else None
    except ValueError:
        return None


def _error_type(status: Mapping[str, Any]) -> ErrorType | None:
    error = status.get("error")
    if not isinstance(error, Mapping) or error.get("type") is None:
        return None
    try:
        return ErrorType(error["type"])
    except ValueError:
        return ErrorType.INTERNAL_ERROR  # an error of a type we do not know is still an error


def _failure_class(status: Mapping[str, Any]) -> FailureClass | None:
    # Absent (a status of the previous version) or unknown: the table decides, from the error.
    try:
        return FailureClass(status["failureClass"])
    except (KeyError, ValueError, TypeError):
        return None


def trial_entry(body: Mapping[str, Any]) -> TrialEntry:
    """The index value of a RolloutTrial object."""
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    agent = spec.get("agent") or {}
    retries = status.get("infraRetries")
    earlier = spec.get("earlierTries")
    attempt = spec.get("attempt")
    return TrialEntry(
        # Strings many trials share are shared (`sys.intern`): 100,000 trials hold one copy.
        namespace=sys.intern(str(metadata.get("namespace") or "")),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        agent=sys.intern(str(agent.get("name") or "")),
        dataset=sys.intern(str(spec.get("datasetName") or "")),
        task=sys.intern(str(spec.get("taskName") or "")),
        attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0,
        environment_type=sys.intern(
            str(spec.get("environmentType") or EnvironmentType.KUBERNETES.value)
        ),
        preserve_env=spec.get("preserveEnv") is True,
        phase=_phase(status.get("phase")),
        reward=_number(status.get("reward")),
        error_type=_error_type(status),
        failure_class=_failure_class(status),
        cost=_number(status.get("cost")),
        pod_name=str(status["podName"]) if status.get("podName") else None,
        infra_retries=retries if isinstance(retries, int) and retries >= 0 else 0,
        earlier_tries=earlier if isinstance(earlier, int) and earlier >= 0 else 0,
        deleting=bool(metadata.get("deletionTimestamp")),
        created_at=timestamp(metadata.get("creationTimestamp")),
        image_build=str(spec["imageBuild"]) if spec.get("imageBuild") else None,
        waiting_for_image=_waits_for_image(status),
        shard=isinstance(spec.get("rows"), Mapping),
        rows=_rows(status.get("rows")),
    )


def _rows(value: Any) -> tuple[RowEntry, ...]:
    """A shard status's rows (entries that are not rows are skipped)."""
    if not isinstance(value, list):
        return ()
    rows: list[RowEntry] = []
    for item in value:
        if not isinstance(item, Mapping):
            continue
        attempt = item.get("attempt")
        if not isinstance(item.get("id"), str) or not isinstance(attempt, int):
            continue
        rows.append(
            RowEntry(
                id=item["id"],
                attempt=attempt,
                reward=_number(item.get("reward")),
                error_type=_error_type({"error": {"type": item.get("errorType")}}),
                failure_class=_failure_class(item),
            )
        )
    return tuple(rows)


def _waits_for_image(status: Mapping[str, Any]) -> bool:
    for condition in status.get("conditions") or []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == TrialConditionType.POD_READY
            and condition.get("reason") == TrialConditionReason.WAITING_FOR_IMAGE
        ):
            return True
    return False


def index_trial(body: Mapping[str, Any]) -> dict[str, TrialEntry] | None:
    """`{job uid: entry}` for the trials index; None (not indexed) without a RolloutJob owner."""
    job = owner_uid(body, RolloutJob.resource.kind)
    return {job: trial_entry(body)} if job else None


_KEPT_CONTAINER_FIELDS = ("name", "image", "resources")
_KEPT_METADATA_FIELDS = ("creationTimestamp", "deletionTimestamp")
_KEPT_SPEC_FIELDS = ("overhead", "activeDeadlineSeconds")
_SHARED_SPECS_MAX = 4096
_shared_specs: dict[str, dict[str, Any]] = {}
"""Pod specs as the index keeps them, one object for all Pods whose specs are alike (a job's
trials of one task have the same containers), by their JSON."""


class SlimPod(Mapping[str, Any]):
    """A Pod as the index keeps it (`slim_pod`): read like its body (`metadata`, `spec`,
    `status`), held as four fields rather than dicts (a Pod's body and metadata dicts were a
    third of its size in the index)."""

    __slots__ = ("_created", "_deleted", "_spec", "_status")
    _KEYS = ("metadata", "spec", "status")

    def __init__(
        self,
        created: str | None,
        deleted: str | None,
        spec: Mapping[str, Any],
        status: Mapping[str, Any],
    ) -> None:
        self._created, self._deleted = created, deleted
        self._spec, self._status = spec, status

    def __getitem__(self, key: str) -> Any:
        if key == "metadata":
            times = (("creationTimestamp", self._created), ("deletionTimestamp", self._deleted))
            return {name: value for name, value in times if value is not None}
        if key == "spec":
            return self._spec
        if key == "status":
            return self._status
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)

    def __repr__(self) -> str:
        return f"SlimPod({dict(self)!r})"


def slim_pod(body: Mapping[str, Any]) -> SlimPod:
    """The parts of a Pod that `classify_pod` and `cost.pod_cost` read: no env, no shim script,
    no volumes, no labels, no name (`PodEntry` has it); the spec shared with the Pods whose
    specs are alike, and the status's keys shared with every other Pod's (`compact`). What is
    kept is read, never changed."""
    metadata = body.get("metadata") or {}
    whole_spec = body.get("spec") or {}
    containers = whole_spec.get("containers") or []
    spec: dict[str, Any] = {
        "containers": [
            {k: c[k] for k in _KEPT_CONTAINER_FIELDS if k in c}
            for c in containers
            if isinstance(c, Mapping)
        ]
    }
    # overhead: a RuntimeClass's share of the node, part of the Pod's cost
    spec.update({k: whole_spec[k] for k in _KEPT_SPEC_FIELDS if whole_spec.get(k)})
    # A second's Pods share their timestamp: one string for them all.
    created, deleted = (metadata.get(k) for k in _KEPT_METADATA_FIELDS)
    return SlimPod(
        compact(created) if isinstance(created, str) else None,
        compact(deleted) if isinstance(deleted, str) else None,
        _shared_spec(spec),
        compact(body.get("status") or {}),
    )


def _shared_spec(spec: dict[str, Any]) -> dict[str, Any]:
    key = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    shared = _shared_specs.get(key)
    if shared is None:
        if len(_shared_specs) >= _SHARED_SPECS_MAX:
            _shared_specs.clear()  # a bound, not a cache policy: Pods keep what they have
        shared = _shared_specs[key] = compact(spec)
    return shared


_SHORT_VALUE = 40
"""String values up to this length are shared between Pods (phases, reasons, images, names of
containers: a few distinct ones); longer ones (messages) are kept as they are."""


def compact(value: Any) -> Any:
    """`value` (decoded JSON) with its keys, and its short strings, shared with every other
    object's equal ones: each watch event's JSON is decoded into new strings, and a Pod's
    status has some thirty keys, most of its size in the index."""
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compact(v) for v in value]
    if isinstance(value, str) and len(value) <= _SHORT_VALUE:
        return sys.intern(value)
    return value


def pod_trial_name(body: Mapping[str, Any]) -> str | None:
    """The RolloutTrial a Pod belongs to: its owner, else its `rollout.dev/trial` label."""
    owner = owner_name(body, RolloutTrial.resource.kind)
    if owner:
        return owner
    label = ((body.get("metadata") or {}).get("labels") or {}).get(LABEL_TRIAL)
    return str(label) if label else None


def index_pod(body: Mapping[str, Any]) -> dict[tuple[str, str], PodEntry] | None:
    """`{(namespace, trial name): entry}` for the Pods index; None for a Pod of no trial."""
    metadata = body.get("metadata") or {}
    trial = pod_trial_name(body)
    namespace = metadata.get("namespace")
    if not trial or not namespace:
        return None
    name = str(metadata.get("name") or "")
    entry = PodEntry(
        namespace=sys.intern(str(namespace)),
        name=name,
        uid=str(metadata.get("uid") or ""),
        trial=name if trial == name else trial,  # a first try's Pod is named as its trial
        body=slim_pod(body),
    )
    return {(str(namespace), trial): entry}


def find_pod(pods: Iterable[PodEntry], name: str) -> PodEntry | None:
    """The Pod called `name` among a trial's Pods (an old, terminating one may be there too)."""
    return next((pod for pod in pods if pod.name == name), None)


def newer(a: str, b: str) -> bool:
    """Whether resourceVersion `a` is newer than `b`.

    resourceVersions are opaque to clients in principle; every API server in use (etcd's revision)
    makes them increasing integers, which is what kopf's own consistency checks rely on too. When
    either is not an integer, only equality is known, and `a` counts as newer when it differs.
    """
    if a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return a != b


# --- RolloutImages --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImageEntry:
    """A RolloutImage as the trials waiting for it need it."""

    namespace: str
    name: str
    uid: str
    pull_image: str
    image_hash: str | None = None
    phase: ImagePhase | None = None
    reason: ImageReason | None = None
    message: str | None = None
    digest: str | None = None
    log_uri: str | None = None
    completed_at: datetime | None = None
    deleting: bool = False

    @property
    def ready(self) -> bool:
        return self.phase == ImagePhase.READY and self.digest is not None

    @property
    def failed(self) -> bool:
        return self.phase == ImagePhase.FAILED

    @property
    def pinned_image(self) -> str:
        """The image as a trial Pod runs it: pinned to its digest once known."""
        return pinned_reference(self.pull_image, self.digest) if self.digest else self.pull_image


def image_entry(body: Mapping[str, Any]) -> ImageEntry:
    """The index value of a RolloutImage object."""
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}

    def text(value: Any) -> str | None:
        return str(value) if value else None

    def enum(kind: type[ImagePhase] | type[ImageReason], value: Any) -> Any:
        try:
            return kind(value) if value is not None else None
        except ValueError:
            return None

    return ImageEntry(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        pull_image=str(spec.get("pullImage") or spec.get("image") or ""),
        image_hash=text(spec.get("imageHash")),
        phase=enum(ImagePhase, status.get("phase")),
        reason=enum(ImageReason, status.get("reason")),
        message=text(status.get("message")),
        digest=text(status.get("digest")),
        log_uri=text(status.get("logUri")),
        completed_at=timestamp(status.get("completedAt")),
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def index_image(body: Mapping[str, Any]) -> dict[tuple[str, str], ImageEntry] | None:
    """`{(namespace, name): entry}` for kopf's images index."""
    entry = image_entry(body)
    return {(entry.namespace, entry.name): entry} if entry.namespace and entry.name else None
