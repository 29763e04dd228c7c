"""The CLI's view of the cluster: its requests to the Kubernetes API, in one namespace.

Which cluster: `rollout.cli.kubeconfig`, as kubectl chooses it, with the CLI's config file
(`rollout login` writes it) filling in what flags do not give: `--context`, else `kube.context`,
else the kubeconfig's current context; `--namespace`, else `kube.namespace` (when the context is
the one it was chosen with), else the context's namespace.

Every request has a timeout. API errors become `ClusterError`s that say what was being done, to
which object, and what the API server answered; a RolloutJob resource that is not served means
the operator (its CRDs) is not installed, and the message says so.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from rollout.api.errors import InvalidInput
from rollout.api.resources import GROUP, VERSION, RolloutJob, RolloutTrial
from rollout.api.translate import resource_name
from rollout.cli import config
from rollout.cli.kubeconfig import ClusterError, load_configuration

Body = dict[str, Any]
logger = logging.getLogger("rollout.cli")

JOBS = RolloutJob.resource.plural
TRIALS = RolloutTrial.resource.plural
CONNECT_TIMEOUT_SEC = 10.0
READ_TIMEOUT_SEC = 60.0
WATCH_TIMEOUT_SEC = 60
"""How long one watch request lasts before the server ends it and the CLI watches again."""
WATCH_RECONNECTS = 5
"""Consecutive failed watch attempts (e.g. the API server restarting) before giving up."""
INSTALL_HINT = (
    f"the {RolloutJob.resource.kind} resource ({RolloutJob.resource.crd_name}) is not installed "
    "in this cluster: install the rollout operator's Helm chart (charts/rollout-operator) first"
)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster", "Chosen as kubectl chooses them.")
    group.add_argument(
        "--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG)"
    )
    group.add_argument(
        "--context",
        metavar="NAME",
        help="kubeconfig context (default: kube.context of the config file, else the current one)",
    )
    group.add_argument(
        "-n",
        "--namespace",
        metavar="NAME",
        help="namespace (default: kube.namespace of the config file, else the context's)",
    )


@dataclass
class Cluster:
    """A namespace of a cluster, and the typed and custom-object APIs to talk to it."""

    api_client: client.ApiClient
    namespace: str
    context: str | None
    host: str

    @classmethod
    def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Cluster:
        """Load the kubeconfig (or the in-cluster account) without making any request."""
        where = load_configuration(kubeconfig, context, environ)
        return cls(
            api_client=client.ApiClient(where.configuration),
            namespace=namespace or where.namespace,
            context=where.context,
            host=where.configuration.host,
        )

    @classmethod
    def from_args(
        cls,
        args: argparse.Namespace,
        environ: Mapping[str, str],
        *,
        loaded: config.LoadedConfig | None = None,
    ) -> Cluster:
        """The cluster of the flags, with the config file's `kube:` values (of `loaded`, else
        of the file `environ` names) where the flags give none. A bad `kube:` value is a
        ClusterError naming the file and key."""
        try:
            defaults = config.kube_defaults(environ, loaded)
        except InvalidInput as err:
            raise ClusterError("\n".join(str(p) for p in err.problems)) from None
        context = args.context or defaults.context
        where = load_configuration(
            args.kubeconfig,
            context,
            environ,
            context_source=None if args.context else defaults.source("context"),
        )
        return cls(
            api_client=client.ApiClient(where.configuration),
            namespace=args.namespace or defaults.namespace_for(where.context) or where.namespace,
            context=where.context,
            host=where.configuration.host,
        )

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @property
    def where(self) -> str:
        context = f", context {self.context}" if self.context else ""
        return f"namespace {self.namespace} ({self.host}{context})"

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]

    # --- requests ---------------------------------------------------------------------------

    def _call(
        self, what: str, fn: Callable[[], object], *, missing_ok: bool = False
    ) -> Body | None:
        """Run one request and return the object it answered (a dict; None when `missing_ok`
        and it is not there). ApiException and connection failures become ClusterError."""
        try:
            answer = fn()
            return dict(answer) if isinstance(answer, dict) else {}
        except ApiException as err:
            if missing_ok and err.status == 404 and not _resource_missing(err):
                return None
            if err.status == 404 and _resource_missing(err):
                raise ClusterError(f"cannot {what}: {INSTALL_HINT}", 404) from None
            raise ClusterError(f"cannot {what}: {_api_message(err)}", err.status) from None
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ClusterError(
                f"cannot {what}: the Kubernetes API at {self.host} did not answer ({err})"
            ) from None

    def _timeout(self) -> tuple[float, float]:
        return (CONNECT_TIMEOUT_SEC, READ_TIMEOUT_SEC)

    def check_reachable(self) -> None:
        """That the Kubernetes API answers (its version), as a ClusterError when it does not."""
        self._call(
            f"reach the Kubernetes API of {self.where}",
            lambda: client.VersionApi(self.api_client).get_code(_request_timeout=self._timeout()),
        )

    def server_version(self) -> Body:
        """The API server's /version (gitVersion, ...), as a ClusterError when it does not
        answer."""
        return self._get(f"reach the Kubernetes API of {self.where}", "/version") or {}

    def get_namespace(self, name: str) -> Body | None:
        """The Namespace `name`, or None when it does not exist (a ClusterError with status 403
        when the user may not read it)."""
        return self._get(f"read namespace {name}", f"/api/v1/namespaces/{name}", missing_ok=True)

    def api_group(self, group: str) -> Body | None:
        """The discovery document of an API group (its served versions), or None when the
        server does not serve the group. Discovery needs no RBAC beyond being authenticated."""
        return self._get(f"discover the API group {group}", f"/apis/{group}", missing_ok=True)

    def api_resources(self, group: str, version: str) -> list[Body] | None:
        """The resources a served group version has (discovery), or None when it is not served."""
        found = self._get(
            f"discover {group}/{version}", f"/apis/{group}/{version}", missing_ok=True
        )
        return None if found is None else list(found.get("resources") or [])

    def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> Body | None:
        """A cluster-scoped object (a CustomResourceDefinition, ...), or None."""
        return self._get(
            f"read {plural}/{name}", f"/apis/{group}/{version}/{plural}/{name}", missing_ok=True
        )

    def list_objects(
        self,
        group: str,
        version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[Body]:
        """Objects of any resource (`group` "" for the core group): of `namespace`, or with
        None of every namespace (or cluster-scoped ones). A resource the server does not serve
        lists nothing; a refusal is a ClusterError with its status (403)."""
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
        query = [("labelSelector", label_selector)] if label_selector else []
        where = f"namespace {namespace}" if namespace else "all namespaces"
        found = self._get(f"list {plural} in {where}", path, query=query, missing_ok=True)
        return list((found or {}).get("items") or [])

    def _get(
        self,
        what: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        missing_ok: bool = False,
    ) -> Body | None:
        """GET a path of the API as JSON; None for a 404 when `missing_ok` (whatever it was
        that is missing: the object, the resource or the group)."""

        def call() -> Any:
            request = self.api_client.param_serialize(
                "GET",
                path,
                query_params=query or [],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            response = self.api_client.call_api(*request, _request_timeout=self._timeout())
            response.read()  # type: ignore[no-untyped-call]
            return self.api_client.response_deserialize(response, {"2XX": "object"}).data

        try:
            return self._call(what, call)
        except ClusterError as err:
            if missing_ok and err.status == 404:
                return None
            raise

    def get_job(self, name: str) -> Body | None:
        """The RolloutJob `name` in the namespace, or None."""
        return self._call(
            f"read RolloutJob {name} in {self.where}",
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, JOBS, name, _request_timeout=self._timeout()
            ),
            missing_ok=True,
        )

    def find_job(self, name: str) -> Body | None:
        """The RolloutJob named `name`, or made from the job name `name` (`My Eval` is the
        RolloutJob `my-eval-<hash>`), or None."""
        found = self.get_job(name)
        if found is None and resource_name(name) != name:
            found = self.get_job(resource_name(name))
        return found

    def list_jobs(self, *, all_namespaces: bool = False) -> list[Body]:
        def call() -> Any:
            if all_namespaces:
                return self.custom.list_cluster_custom_object(
                    GROUP, VERSION, JOBS, _request_timeout=self._timeout()
                )
            return self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, JOBS, _request_timeout=self._timeout()
            )

        where = "all namespaces" if all_namespaces else self.where
        listing = self._call(f"list RolloutJobs in {where}", call)
        return list((listing or {}).get("items", []))

    def create_job(self, manifest: Body) -> Body:
        name = manifest["metadata"]["name"]
        created = self._call(
            f"create RolloutJob {name} in {self.where}",
            lambda: self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, JOBS, manifest, _request_timeout=self._timeout()
            ),
        )
        assert created is not None
        return created

    def delete_job(self, name: str) -> bool:
        """Delete the RolloutJob (its trials and Pods go with it); False if it was not there."""
        found = self._call(
            f"delete RolloutJob {name} in {self.where}",
            lambda: self.custom.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                JOBS,
                name,
                propagation_policy="Background",
                _request_timeout=self._timeout(),
            ),
            missing_ok=True,
        )
        return found is not None

    def remove_job_finalizer(self, job: Body, finalizer: str) -> None:
        """Take `finalizer` off the RolloutJob `job` as it was read: a JSON patch that tests the
        resourceVersion first, so a finalizer list changed meanwhile is not overwritten (409)."""
        meta = job["metadata"]
        name, namespace = meta["name"], meta.get("namespace") or self.namespace
        remaining = [f for f in meta.get("finalizers") or [] if f != finalizer]
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "replace", "path": "/metadata/finalizers", "value": remaining},
        ]
        self._call(
            f"release RolloutJob {name} in namespace {namespace}",
            lambda: self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                JOBS,
                name,
                patch,
                _content_type="application/json-patch+json",  # the client would send merge
                _request_timeout=self._timeout(),
            ),
            missing_ok=True,
        )

    def get_trial(self, name: str) -> Body | None:
        return self._call(
            f"read RolloutTrial {name} in {self.where}",
            lambda: self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, TRIALS, name, _request_timeout=self._timeout()
            ),
            missing_ok=True,
        )

    def create_secret(self, manifest: Body) -> None:
        name = manifest["metadata"]["name"]
        self._call(
            f"create Secret {name} in {self.where}",
            lambda: self.core.create_namespaced_secret(
                self.namespace, cast(Any, manifest), _request_timeout=self._timeout()
            ),
        )

    def own_secret(self, name: str, owner: Body) -> None:
        """Make the RolloutJob `owner` the Secret's owner, so deleting the job deletes it.

        No blockOwnerDeletion: setting it needs `update` on rolloutjobs/finalizers, which a user
        who may create jobs need not have.
        """
        reference = {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
        }
        patch = {"metadata": {"ownerReferences": [reference]}}
        self._call(
            f"set the owner of Secret {name} in {self.where}",
            lambda: self.core.patch_namespaced_secret(
                name, self.namespace, patch, _request_timeout=self._timeout()
            ),
        )

    def delete_secret(self, name: str) -> None:
        self._call(
            f"delete Secret {name} in {self.where}",
            lambda: self.core.delete_namespaced_secret(
                name, self.namespace, _request_timeout=self._timeout()
            ),
            missing_ok=True,
        )

    # --- watching ---------------------------------------------------------------------------

    def watch_job(
        self,
        name: str,
        *,
        timeout_seconds: int | Callable[[], int] = WATCH_TIMEOUT_SEC,
        ticks: bool = False,
    ) -> Iterator[Body]:
        """The RolloutJob `name` now and after every change; ends when it is deleted (or is not
        there to begin with). With `ticks`, the last one is also yielded again whenever a watch
        ends (every `timeout_seconds` at most), so that the caller can look at the clock;
        `timeout_seconds` may be a function, asked before each watch.

        One list, then watches from its resourceVersion, each ended by the server after
        `timeout_seconds` and started again from the last event; a 410 Gone lists again.
        Connection failures are retried a few times with a growing pause.
        """
        selector = f"metadata.name={name}"
        failures = 0
        while True:
            listing = self._call(
                f"read RolloutJob {name} in {self.where}",
                lambda: self.custom.list_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    self.namespace,
                    JOBS,
                    field_selector=selector,
                    _request_timeout=self._timeout(),
                ),
            )
            items = (listing or {}).get("items", [])
            if not items:
                return
            last: Body = items[0]
            yield last
            version = str((listing or {}).get("metadata", {}).get("resourceVersion", ""))
            while True:
                try:
                    timeout = timeout_seconds() if callable(timeout_seconds) else timeout_seconds
                    for kind, body in self._watch_once(selector, version, timeout):
                        failures = 0
                        version = str(body.get("metadata", {}).get("resourceVersion") or version)
                        if kind == "DELETED":
                            return
                        if kind in ("ADDED", "MODIFIED"):
                            last = body
                            yield body
                    if ticks:
                        yield last
                except ApiException as err:
                    if err.status == 410:  # our resourceVersion is too old: list again
                        break
                    raise ClusterError(
                        f"cannot watch RolloutJob {name} in {self.where}: {_api_message(err)}",
                        err.status,
                    ) from None
                except (urllib3.exceptions.HTTPError, OSError) as err:
                    failures += 1
                    if failures > WATCH_RECONNECTS:
                        raise ClusterError(
                            f"lost the watch of RolloutJob {name}: the Kubernetes API at "
                            f"{self.host} did not answer ({err})"
                        ) from None
                    logger.warning("watch of %s interrupted (%s); watching again", name, err)
                    time.sleep(min(2.0**failures, 30.0))
                    break  # list again: events may have been missed

    def _watch_once(
        self, selector: str, version: str, timeout_seconds: int
    ) -> Iterator[tuple[str, Body]]:
        watcher = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in watcher.stream(  # type: ignore[no-untyped-call]
                self.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self.namespace,
                JOBS,
                field_selector=selector,
                resource_version=version,
                timeout_seconds=timeout_seconds,
                _request_timeout=(CONNECT_TIMEOUT_SEC, timeout_seconds + READ_TIMEOUT_SEC),
            ):
                body = event.get("raw_object") or event.get("object")
                if isinstance(body, dict):
                    yield str(event.get("type")), body
        finally:
            watcher.stop()  # type: ignore[no-untyped-call]


def _api_message(err: ApiException) -> str:
    """What the API server said: its Status message, else the HTTP reason."""
    try:
        status = json.loads(err.body or "")
        message = status.get("message")
    except (ValueError, AttributeError):
        message = None
    reason = f"{err.status} {err.reason}".strip()
    return f"{message} ({reason})" if message else reason


def _resource_missing(err: ApiException) -> bool:
    """A 404 for the resource type itself (no CRD), rather than for one object."""
    try:
        status = json.loads(err.body or "")
    except ValueError:
        return True  # an HTML/plain 404 page: the path itself is unknown
    if not isinstance(status, dict):
        return True
    details = status.get("details") or {}
    return not details.get("name") and "could not find the requested resource" in str(
        status.get("message", "")
    )
