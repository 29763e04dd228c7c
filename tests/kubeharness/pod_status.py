"""The kubelet's side of a test: container states, and `Kube`'s helpers that write a Pod's
status as the kubelet does (through the status subresource).
"""

from __future__ import annotations

import abc
import builtins
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kubeharness.resources import PODS, Body, Namespace, now


class KubeletHelpers(abc.ABC):
    """`Kube`'s kubelet: each backend binds a Pod to the test's node its own way (`_schedule`);
    `get` and `patch_status` are `Kube`'s."""

    @abc.abstractmethod
    async def _schedule(self, pod: Body) -> None:
        """Bind the Pod to the test's node before its status is set, if it is not yet."""

    async def set_pod_status(
        self,
        name: str,
        namespace: Namespace = ...,
        *,
        containers: Mapping[str, Mapping[str, Any]] | None = None,
        init_containers: Mapping[str, Mapping[str, Any]] | None = None,
        phase: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        conditions: Sequence[Mapping[str, Any]] | None = None,
    ) -> Body:
        """Write a Pod's status as the kubelet would, through the status subresource.

        `containers` maps container names (from the Pod's spec) to states made by
        `running()`, `terminated()` or `waiting()`; containers not named keep their state
        (or are "waiting: ContainerCreating"). `init_containers` does the same for the Pod's
        init containers (`status.initContainerStatuses`, written only for a Pod that has them,
        with an `Initialized` condition). Without `phase`, it follows from the states as for
        `restartPolicy: Never`: an init container terminated with non-zero -> Failed, init
        containers not all terminated with 0 -> Pending; then all terminated with 0 ->
        Succeeded, all terminated -> Failed, any running -> Running, else Pending.

        Unless `conditions` say the Pod is not scheduled (the scheduler's word, e.g.
        Unschedulable), this is the kubelet writing: the Pod is bound to the test's node first,
        as the scheduler would have done, and `status.startTime` is set on the first write and
        kept after, as the kubelet's status manager does ("RFC 3339 date and time at which the
        object was acknowledged by the Kubelet. This is before the Kubelet pulled the container
        image(s) for the pod.", the API reference): so a Pod waiting for its images has one.
        """
        pod = await self.get(PODS, name, namespace)
        spec = pod.get("spec", {})
        spec_containers = builtins.list(spec.get("containers", []))
        spec_init = builtins.list(spec.get("initContainers") or [])
        for kind, wanted, declared in (
            ("containers", containers, spec_containers),
            ("init containers", init_containers, spec_init),
        ):
            unknown = set(wanted or {}) - {c["name"] for c in declared}
            if unknown:
                raise ValueError(
                    f"pod {self._ns(namespace)}/{name} has no {kind} {sorted(unknown)}"
                )
        old = pod.get("status", {})
        statuses = _statuses(spec_containers, containers, old.get("containerStatuses"))
        init_statuses = _statuses(
            spec_init, init_containers, old.get("initContainerStatuses"), init=True
        )
        states = [s["state"] for s in statuses]
        init_states = [s["state"] for s in init_statuses]
        if phase is None:
            phase = _init_phase(init_states) or _phase_of(states)
        all_ready = bool(statuses) and all(s["ready"] for s in statuses)
        scheduled = conditions is None or any(
            c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conditions
        )
        if scheduled:
            await self._schedule(pod)
        default_conditions: builtins.list[Body] = [{"type": "PodScheduled", "status": "True"}]
        if spec_init:
            initialized = all(s["ready"] for s in init_statuses)
            default_conditions.append(
                {"type": "Initialized", "status": "True" if initialized else "False"}
            )
        default_conditions.append({"type": "Ready", "status": "True" if all_ready else "False"})
        new_status: Body = {
            "phase": phase,
            "containerStatuses": statuses,
            "conditions": builtins.list(conditions)
            if conditions is not None
            else default_conditions,
            "reason": reason,
            "message": message,
        }
        if spec_init:
            new_status["initContainerStatuses"] = init_statuses
        if scheduled and not old.get("startTime"):
            new_status["startTime"] = now()
        return await self.patch_status(PODS, name, new_status, namespace)

    async def run_pod(self, name: str, namespace: Namespace = ...) -> Body:
        """All of the Pod's containers running, phase Running."""
        pod = await self.get(PODS, name, namespace)
        names = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        return await self.set_pod_status(name, namespace, containers={n: running() for n in names})

    async def finish_pod(
        self,
        name: str,
        namespace: Namespace = ...,
        *,
        exit_codes: Mapping[str, int] | None = None,
        messages: Mapping[str, str] | None = None,
    ) -> Body:
        """All of the Pod's containers terminated (exit code 0 unless named in `exit_codes`),
        with `messages` as their termination messages; the phase follows from the exit codes."""
        pod = await self.get(PODS, name, namespace)
        names = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        exit_codes, messages = exit_codes or {}, messages or {}
        states = {n: terminated(exit_codes.get(n, 0), message=messages.get(n)) for n in names}
        return await self.set_pod_status(name, namespace, containers=states)


def _statuses(
    spec_containers: Sequence[Mapping[str, Any]],
    states: Mapping[str, Mapping[str, Any]] | None,
    old_statuses: Sequence[Mapping[str, Any]] | None,
    *,
    init: bool = False,
) -> builtins.list[Body]:
    """The containers' statuses: the new state of those in `states`, the old (or "waiting:
    ContainerCreating") of the others. An init container is ready once it has succeeded."""
    old_by_name = {s["name"]: s for s in old_statuses or []}
    statuses = []
    for container in spec_containers:
        old = old_by_name.get(container["name"])
        state = (states or {}).get(container["name"])
        if state is None:
            state = old["state"] if old else waiting("ContainerCreating")
        is_running = "running" in state
        ready = _succeeded(state) if init else is_running
        container_id = (old or {}).get("containerID") or f"containerd://{uuid.uuid4().hex}"
        status: Body = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": container_id,
            "ready": ready,
            "started": is_running,
            "restartCount": 0,
            "state": dict(state),
            "lastState": {},
        }
        if "waiting" in state:
            del status["containerID"]
        statuses.append(status)
    return statuses


def _succeeded(state: Mapping[str, Any]) -> bool:
    return "terminated" in state and state["terminated"].get("exitCode", 0) == 0


def _init_phase(states: Sequence[Mapping[str, Any]]) -> str | None:
    """The phase that init containers decide (restartPolicy Never), or None once all succeeded:
    a failed one fails the Pod, one not done yet keeps it Pending."""
    if any("terminated" in s and not _succeeded(s) for s in states):
        return "Failed"
    if not all(_succeeded(s) for s in states):
        return "Pending"
    return None


def _phase_of(states: Sequence[Mapping[str, Any]]) -> str:
    if states and all("terminated" in s for s in states):
        codes = [s["terminated"].get("exitCode", 0) for s in states]
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"
    if any("running" in s for s in states):
        return "Running"
    return "Pending"


def running() -> Body:
    """A container state: running since now."""
    return {"running": {"startedAt": now()}}


def terminated(
    exit_code: int = 0, *, message: str | None = None, reason: str | None = None
) -> Body:
    """A container state: terminated with an exit code and (the runner's) termination message."""
    state: Body = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": now(),
        "finishedAt": now(),
    }
    if message is not None:
        state["message"] = message
    return {"terminated": state}


def waiting(reason: str, message: str | None = None) -> Body:
    """A container state: waiting, e.g. `waiting('ImagePullBackOff', 'Back-off pulling ...')`."""
    state: Body = {"reason": reason}
    if message is not None:
        state["message"] = message
    return {"waiting": state}
