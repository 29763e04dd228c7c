"""`rollout check`: whether what a run needs is there, one line each, with how to fix what is not.

Each line is `ok`, `FAIL` (what is wrong and how to fix it), `warn` (what could not be verified,
or will fail some jobs but not all) or `skip` (not checked, because a check it needs failed):

- cluster: the kubeconfig loads and the Kubernetes API answers; its context, server, namespace
  (that the namespace exists, where the user may read it) and version;
- CRDs: the API group rollout.dev serves rolloutjobs, rollouttrials and rolloutimages in the
  version this CLI speaks. Found by API discovery, which every authenticated user may read (no
  cluster-scope RBAC); where the user may also read CustomResourceDefinitions, their schemas are
  compared with this CLI's: a field this CLI has that the installed CRD lacks would be dropped by
  the API server, so the CRDs are older than this CLI (the line says when it could not compare);
- operator: an operator runs and serves the namespace: a fresh keep-alive in the chart's kopf
  peering object, or the chart's Deployment with ready replicas, watching the namespace (where
  the user may read neither, a warning says so);
- storage: the bucket answers at its endpoint with the CLI's credentials (a missing bucket,
  refused credentials, credentials without the right to list it, an endpoint that does not
  answer: each its own message);
- runner image: the image jobs from here run their trials' runner with, and where that setting
  came from (a flag, a variable, the config file, or none: the operator's default).

Every check runs, whatever failed before it. With `--local`, local mode's needs instead: a
container engine for `environment.type: docker`, the host sandbox for `local`; one of them
missing is a warning while the other works.

Exit status: 0 when nothing failed (warnings included), 1 otherwise. `rollout login` runs the
same checks on what it is about to save.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from rollout.api.crd import resource_schema
from rollout.api.errors import InvalidInput
from rollout.api.imageref import parse_image_reference
from rollout.api.resources import CUSTOM_RESOURCES, GROUP, VERSION
from rollout.cli import config, kube
from rollout.cli.errors import CliError, ExitCode
from rollout.cli.kubeconfig import ClusterError
from rollout.local.engine import engine_address, engine_unavailable
from rollout.local.host import host_sandbox_unavailable
from rollout.storage import ObjectStore, RetryPolicy, StorageError

EPILOG = """\
Each line is ok, FAIL (with what to do), warn (could not be verified; does not fail the check) or
skip (it needs a check that failed). Exit status 0 when nothing failed.

examples:
  rollout check                                 the current context, namespace and storage
  rollout check --context prod -n evals         another context and namespace
  rollout check --storage-bucket other-bucket   another bucket, as `rollout run` would use it
  rollout check --local                         what `rollout run --local` needs instead
"""

CHART_NAME = "rollout-operator"
OPERATOR_SELECTOR = f"app.kubernetes.io/name={CHART_NAME},app.kubernetes.io/component=operator"
"""The labels the chart gives the operator's Deployment (charts/rollout-operator/_helpers.tpl)."""
PEERING_NAME = "rollout-operator"
"""The kopf peering object's name: the chart's `operator.peering.name` and the operator's
default peering (`--peering`)."""
PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"
CHECK_RETRY = RetryPolicy(max_attempts=2, max_seconds=10.0, initial_backoff_seconds=0.2)
"""A check says at once what is wrong: one retry, not the minute a run rides out."""


class Status(StrEnum):
    OK = "ok"
    FAIL = "FAIL"
    WARN = "warn"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    """One line of `rollout check`."""

    name: str
    status: Status
    message: str

    @property
    def failed(self) -> bool:
        return self.status is Status.FAIL

    def line(self) -> str:
        return f"{self.status.value:<4}  {self.name}: {self.message}"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "check",
        help="check that what a run needs is there: cluster, CRDs, operator, storage, runner image",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--local",
        action="store_true",
        help="check what `rollout run --local` needs instead: a container engine, the host sandbox",
    )
    kube.add_cluster_arguments(parser)
    config.add_storage_arguments(parser)
    config.add_runner_image_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    checks = report(local_checks(environ) if args.local else run_checks(args, environ))
    return ExitCode.FAILED if any(c.failed for c in checks) else ExitCode.OK


def report(checks: Iterable[Check]) -> list[Check]:
    """Print each line as its check ends, then a summary line; returns the checks."""
    done = []
    for check in checks:
        print(check.line(), flush=True)
        done.append(check)
    print(summary(done), flush=True)
    return done


def summary(checks: list[Check]) -> str:
    failed = sum(c.failed for c in checks)
    warned = sum(c.status is Status.WARN for c in checks)
    warnings = f" ({warned} warning{'s' * (warned != 1)})" if warned else ""
    if failed:
        return (
            f"{failed} of {len(checks)} checks failed{warnings}: fix what FAIL says, then run "
            "`rollout check` again"
        )
    return f"all {len(checks)} checks passed{warnings}"


# --- the cluster's checks -------------------------------------------------------------------------


@dataclass
class _Context:
    """What later checks need of earlier ones."""

    cluster: kube.Cluster | None = None
    settings: config.CliSettings | None = None
    settings_problem: str | None = None
    deployments: list[OperatorDeployment] = field(default_factory=list)


def run_checks(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    *,
    loaded: config.LoadedConfig | None = None,
) -> Iterable[Check]:
    """Every check of a cluster run, each yielded when it is done. `loaded` stands for the
    config file (`rollout login` checks what it is about to write)."""
    context = _Context()
    cluster_check, context.cluster = check_cluster(args, environ, loaded)
    yield cluster_check
    cluster = context.cluster
    if cluster is None:
        yield Check("CRDs", Status.SKIP, "needs the cluster")
        yield Check("operator", Status.SKIP, "needs the cluster")
    else:
        yield _guarded("CRDs", lambda: check_crds(cluster))
        operator_check, context.deployments = operator_check_of(cluster)
        yield operator_check
    yield from check_storage(args, environ, loaded, context)
    yield check_runner_image(context)


def _guarded(name: str, check: Callable[[], Check]) -> Check:
    """A check whose requests failed in a way it does not foresee says so in its line."""
    try:
        return check()
    except CliError as err:
        return Check(name, Status.FAIL, str(err))


def check_cluster(
    args: argparse.Namespace, environ: Mapping[str, str], loaded: config.LoadedConfig | None
) -> tuple[Check, kube.Cluster | None]:
    """The kubeconfig (and the config file's kube: values) loads, and the API answers."""
    try:
        cluster = kube.Cluster.from_args(args, environ, loaded=loaded)
    except CliError as err:
        return Check("cluster", Status.FAIL, str(err)), None
    context = f"context {cluster.context}" if cluster.context else "the in-cluster service account"
    try:
        version = cluster.server_version()
    except ClusterError as err:
        return Check("cluster", Status.FAIL, f"{err}: {_cluster_hint(err, cluster)}"), None
    where = f"{context}, server {cluster.host}, namespace {cluster.namespace}"
    running = f" (Kubernetes {version['gitVersion']})" if version.get("gitVersion") else ""
    try:
        namespace = cluster.get_namespace(cluster.namespace)
    except ClusterError:
        namespace = {}  # not ours to read (403): whether it exists shows when a job is created
    if namespace is None:
        return Check(
            "cluster",
            Status.FAIL,
            f"{where}{running}: the namespace {cluster.namespace} does not exist: create it "
            f"(kubectl create namespace {cluster.namespace}) or choose another (--namespace, or "
            "`rollout login`)",
        ), cluster
    return Check("cluster", Status.OK, f"{where}{running}"), cluster


def _cluster_hint(err: ClusterError, cluster: kube.Cluster) -> str:
    name = f" --context {cluster.context}" if cluster.context else ""
    if err.status == 401:
        return (
            "the kubeconfig's credentials were refused: log in to the cluster again (e.g. your "
            f"cloud's get-credentials command), then `kubectl{name} get namespaces`"
        )
    if err.status is None:
        return (
            "is the cluster running, and is the kubeconfig's server address right from here? "
            f"(`kubectl{name} cluster-info`)"
        )
    return f"see `kubectl{name} cluster-info`"


def check_crds(cluster: kube.Cluster) -> Check:
    """The rollout CRDs, by API discovery; their schemas where the user may read CRDs."""
    install = (
        "install the chart (helm install rollout-operator charts/rollout-operator, README: "
        "Install), or apply this CLI's CRDs (kubectl apply -f crds/)"
    )
    group = cluster.api_group(GROUP)
    if group is None:
        return Check(
            "CRDs",
            Status.FAIL,
            f"the API group {GROUP} is not served: the rollout CRDs are not installed in this "
            f"cluster: {install}",
        )
    served = [str(v.get("version")) for v in group.get("versions") or []]
    if VERSION not in served:
        return Check(
            "CRDs",
            Status.FAIL,
            f"{GROUP} is served in {', '.join(served) or 'no version'}, but this CLI speaks "
            f"{VERSION}: use the CLI of the installed chart's version, or upgrade the chart (and "
            "its CRDs) to this CLI's",
        )
    resources = {str(r.get("name")) for r in cluster.api_resources(GROUP, VERSION) or []}
    wanted = [model.resource.plural for model in CUSTOM_RESOURCES]
    if missing := [plural for plural in wanted if plural not in resources]:
        return Check(
            "CRDs",
            Status.FAIL,
            f"{GROUP}/{VERSION} does not serve {', '.join(missing)}: {install}",
        )
    served_text = f"{GROUP}/{VERSION} serves {', '.join(wanted)} (the version this CLI speaks)"
    gaps, not_compared = schema_gaps(cluster)
    if gaps:
        return Check(
            "CRDs",
            Status.FAIL,
            f"{served_text}, but the installed CRDs are older than this CLI: they lack "
            f"{_some(gaps)}, which the API server would drop from jobs: apply this CLI's CRDs "
            "(kubectl apply -f crds/) or upgrade the chart",
        )
    note = f"; {not_compared}" if not_compared else ""
    return Check("CRDs", Status.OK, served_text + note)


def schema_gaps(cluster: kube.Cluster) -> tuple[list[str], str | None]:
    """The fields (`RolloutJob spec.agents[].name`) of this CLI's CRD schemas that the
    installed CRDs lack, and why they were not compared when they were not."""
    gaps: list[str] = []
    for model in CUSTOM_RESOURCES:
        info = model.resource
        try:
            crd = cluster.get_cluster_object(
                "apiextensions.k8s.io", "v1", "customresourcedefinitions", info.crd_name
            )
        except ClusterError as err:
            if err.status == 403:
                return [], (
                    "their schemas were not compared with this CLI's: you may not read "
                    "CustomResourceDefinitions (403)"
                )
            return [], f"their schemas were not compared with this CLI's ({err})"
        versions = ((crd or {}).get("spec") or {}).get("versions") or []
        installed = next((v for v in versions if v.get("name") == info.version), None)
        schema = ((installed or {}).get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            continue  # no schema to compare: nothing is pruned
        missing = field_paths(resource_schema(model)) - field_paths(schema)
        gaps += [f"{info.kind} {path}" for path in sorted(missing)]
    return gaps, None


def field_paths(schema: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Every field a structural schema declares, as `spec.agents[].env{}`."""
    paths: set[str] = set()
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else str(name)
        paths.add(path)
        if isinstance(sub, Mapping):
            paths |= field_paths(sub, path)
    for key, marker in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(sub_schema := schema.get(key), Mapping):
            paths |= field_paths(sub_schema, prefix + marker)
    return paths


def _some(items: list[str], shown: int = 4) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


# --- the operator -----------------------------------------------------------------------------


@dataclass(frozen=True)
class OperatorDeployment:
    """The chart's operator Deployment, as far as a check needs it."""

    namespace: str
    name: str
    replicas: int
    ready: int
    watched: tuple[str, ...]
    """The namespaces it watches (ROLLOUT_NAMESPACES); empty: the whole cluster."""
    runner_image: str | None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> OperatorDeployment:
        metadata = body.get("metadata") or {}
        spec = body.get("spec") or {}
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        operator = next((c for c in containers if c.get("name") == "operator"), None)
        env = {
            str(e.get("name")): _kubelet_literal(str(e["value"]))
            for e in ((operator or {}).get("env") or [])
            if "value" in e
        }
        watched = tuple(n.strip() for n in env.get("ROLLOUT_NAMESPACES", "").split(",") if n)
        return cls(
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            replicas=int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1),
            ready=int((body.get("status") or {}).get("readyReplicas") or 0),
            watched=watched,
            runner_image=env.get("ROLLOUT_RUNNER_IMAGE") or None,
        )

    @property
    def where(self) -> str:
        return f"Deployment {self.namespace}/{self.name}"

    def serves(self, namespace: str) -> bool:
        return not self.watched or namespace in self.watched

    def watching(self) -> str:
        return "all namespaces" if not self.watched else ", ".join(self.watched)


def _kubelet_literal(value: str) -> str:
    """An env value as the process sees it: the chart doubles every `$` for the kubelet."""
    return value.replace("$$", "$")


@dataclass(frozen=True)
class Peering:
    """A kopf peering object and the operators alive in it (identity, seconds since seen)."""

    kind: str
    name: str
    namespace: str | None
    alive: tuple[tuple[str, float], ...]
    last_seen: float | None
    """Seconds since any operator's keep-alive, alive or not; None when it has none."""

    @property
    def where(self) -> str:
        place = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {place}{self.name}"


def peering_of(kind: str, body: Mapping[str, Any], now: datetime) -> Peering:
    """The peers of a peering object's status, each `{priority, lifetime, lastseen}` as kopf
    writes them; alive while lastseen + lifetime is ahead (kopf's own rule)."""
    alive = []
    ages = []
    for identity, info in (body.get("status") or {}).items():
        if not isinstance(info, Mapping) or not info.get("lastseen"):
            continue
        try:
            seen = datetime.fromisoformat(str(info["lastseen"]).replace("Z", "+00:00"))
            lifetime = float(info.get("lifetime", 60))
        except (TypeError, ValueError):
            continue
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=UTC)
        age = max(0.0, (now - seen).total_seconds())
        ages.append(age)
        if age < lifetime:
            alive.append((str(identity), age))
    metadata = body.get("metadata") or {}
    return Peering(
        kind=kind,
        name=str(metadata.get("name", "")),
        namespace=metadata.get("namespace"),
        alive=tuple(sorted(alive, key=lambda peer: peer[1])),
        last_seen=min(ages) if ages else None,
    )


def _ours(body: Mapping[str, Any]) -> bool:
    metadata = body.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return metadata.get("name") == PEERING_NAME or labels.get("app.kubernetes.io/name") == (
        CHART_NAME
    )


def operator_check_of(cluster: kube.Cluster) -> tuple[Check, list[OperatorDeployment]]:
    """Whether an operator runs and serves the namespace, from what the user may read.

    A user of one namespace usually may read neither the operator's namespace nor anything
    cluster-scoped, and nothing an operator does is visible from a namespace until a job is
    there, so this looks where the answer may be and says which searches were refused:

    1. kopf peering objects, which the running operator renews every few seconds (the chart
       makes them when `operator.peering.enabled`, the default): the ClusterKopfPeering of a
       cluster-wide operator and the KopfPeering in this namespace of one that watches it, named
       `rollout-operator` or labelled by the chart. A fresh keep-alive is the best evidence of a
       live operator, and it also shows an operator run outside the chart (a developer's). A
       peering object nobody renews means its operator is gone.
    2. The chart's Deployment (labels app.kubernetes.io/name=rollout-operator,
       app.kubernetes.io/component=operator), in every namespace, else (refused) in this one: its
       ready replicas say whether it runs, its ROLLOUT_NAMESPACES whether it watches this
       namespace. Readiness comes from the operator's own /healthz probe.

    An operator is found when one of them says so. It is missing (FAIL) when the Deployments
    say it is down, scaled to zero or watching other namespaces, when a peering object is stale,
    or when every namespace's Deployments could be listed and none is the chart's. When the
    searches that could answer were refused (403), the check cannot tell: a warning that says
    so (`rollout run` says it too when no operator picks the job up).
    """
    namespace = cluster.namespace
    refused: list[str] = []
    now = datetime.now(UTC)

    def listing(what: str, call: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]] | None:
        try:
            return call()
        except ClusterError as err:
            if err.status == 403:
                refused.append(what)
                return None
            raise

    try:
        peerings = [
            peering_of("ClusterKopfPeering", body, now)
            for body in listing(
                "read ClusterKopfPeerings",
                lambda: cluster.list_objects(PEERING_GROUP, PEERING_VERSION, "clusterkopfpeerings"),
            )
            or []
            if _ours(body)
        ]
        peerings += [
            peering_of("KopfPeering", body, now)
            for body in listing(
                f"read KopfPeerings in namespace {namespace}",
                lambda: cluster.list_objects(
                    PEERING_GROUP, PEERING_VERSION, "kopfpeerings", namespace=namespace
                ),
            )
            or []
            if _ours(body)
        ]
        bodies = listing(
            "list Deployments in all namespaces",
            lambda: cluster.list_objects(
                "apps", "v1", "deployments", label_selector=OPERATOR_SELECTOR
            ),
        )
        every_namespace = bodies is not None
        if bodies is None:
            bodies = listing(
                f"list Deployments in namespace {namespace}",
                lambda: cluster.list_objects(
                    "apps",
                    "v1",
                    "deployments",
                    namespace=namespace,
                    label_selector=OPERATOR_SELECTOR,
                ),
            )
    except ClusterError as err:
        return Check("operator", Status.FAIL, f"could not look for the operator: {err}"), []
    deployments = [OperatorDeployment.from_body(body) for body in bodies or []]
    return _operator_verdict(namespace, peerings, deployments, every_namespace, refused), (
        deployments
    )


def _operator_verdict(
    namespace: str,
    peerings: list[Peering],
    deployments: list[OperatorDeployment],
    every_namespace: bool,
    refused: list[str],
) -> Check:
    serving = [d for d in deployments if d.serves(namespace)]
    running = [d for d in serving if d.ready > 0]
    if running:
        found = running[0]
        return Check(
            "operator",
            Status.OK,
            f"{found.where}: {found.ready}/{found.replicas} ready, watching {found.watching()}",
        )
    if live := [p for p in peerings if p.alive]:
        peering = live[0]
        identity, age = peering.alive[0]
        return Check(
            "operator",
            Status.OK,
            f"alive in kopf peering {peering.where} ({identity}, last seen {age:.0f} s ago)",
        )
    logs = "kubectl -n {ns} describe deployment {name}; kubectl -n {ns} logs deployment/{name}"
    if serving:
        down = serving[0]
        state = (
            "scaled to zero: kubectl -n {ns} scale deployment {name} --replicas=1"
            if down.replicas == 0
            else f"0/{down.replicas} ready: see why with {logs}"
        )
        state = state.format(ns=down.namespace, name=down.name)
        return Check("operator", Status.FAIL, f"{down.where} is {state}")
    if deployments:
        other = deployments[0]
        watched = ",".join([*other.watched, namespace])
        return Check(
            "operator",
            Status.FAIL,
            f"{other.where} watches {other.watching()}, not namespace {namespace}: add it to the "
            f"chart's watchNamespaces (helm upgrade ... --set 'watchNamespaces={{{watched}}}'), "
            "or run jobs in a namespace it watches",
        )
    if stale := [p for p in peerings if p.last_seen is not None]:
        peering = stale[0]
        return Check(
            "operator",
            Status.FAIL,
            f"no operator is alive in kopf peering {peering.where} (last keep-alive "
            f"{peering.last_seen:.0f} s ago): start the operator again (its Deployment in the "
            "chart's namespace: kubectl get deployments -A -l "
            f"{OPERATOR_SELECTOR})",
        )
    if every_namespace:
        return Check(
            "operator",
            Status.FAIL,
            f"no rollout operator in this cluster: no Deployment labelled {OPERATOR_SELECTOR} in "
            "any namespace, and no live kopf peering: install the chart (README: Install)",
        )
    return Check(
        "operator",
        Status.WARN,
        f"cannot tell whether an operator serves namespace {namespace}: you may not "
        f"{' or '.join(refused)} (403); ask the cluster's admin (kubectl get deployments -A -l "
        f"{OPERATOR_SELECTOR}); `rollout run` says so when no operator picks a job up",
    )


# --- storage and the runner image ----------------------------------------------------------------


def check_storage(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    loaded: config.LoadedConfig | None,
    context: _Context,
) -> Iterable[Check]:
    """The bucket, listed (nothing under a prefix no one uses) with the CLI's credentials.

    A LIST rather than a HEAD of the bucket: HEAD answers carry no body, so S3 says only 403 or
    404, and refused credentials could not be told from credentials without the right to this
    bucket. A LIST costs the same, needs the same permission (s3:ListBucket, which `rollout
    download` needs anyway) and its error code says which: NoSuchBucket, InvalidAccessKeyId,
    SignatureDoesNotMatch, AccessDenied.
    """
    try:
        settings = context.settings = config.resolve(args, environ, loaded=loaded)
    except InvalidInput as err:
        context.settings_problem = "; ".join(str(p) for p in err.problems)
        yield Check("storage", Status.FAIL, context.settings_problem)
        return
    if settings.bucket is None:
        where = f", or storage.bucket in {settings.config_file}" if settings.config_file else ""
        yield Check(
            "storage",
            Status.FAIL,
            "no bucket is configured: run `rollout login`, or pass --storage-bucket, or set "
            f"ROLLOUT_STORAGE_BUCKET{where}",
        )
        return
    source = settings.credentials_source(environ)
    try:
        store = ObjectStore(
            settings.storage_location(),
            settings.storage_credentials(environ),
            retry=CHECK_RETRY,
            connect_timeout_seconds=5.0,
            read_timeout_seconds=15.0,
        )
    except InvalidInput as err:
        yield Check("storage", Status.FAIL, "; ".join(str(p) for p in err.problems))
        return
    target = f"{store.uri(store.prefix)} at {store.endpoint_name}"
    try:
        store.list_keys(f"{store.key('.rollout-check')}/", page_size=1)
    except StorageError as err:
        yield Check("storage", Status.FAIL, storage_failure(err, store, source))
        return
    yield Check("storage", Status.OK, f"{target} answers (credentials: {source})")
    if warning := settings.loopback_warning():
        yield Check("storage for trial Pods", Status.WARN, warning)


def storage_failure(err: StorageError, store: ObjectStore, source: str) -> str:
    """What a failed listing means, by S3's error code, and what to do about it."""
    at = f"at {store.endpoint_name}"
    credentials = f"the credentials ({source})"
    relogin = "`rollout login` stores new ones"
    code = err.code
    if code == "NoSuchBucket":
        return (
            f"the bucket {store.bucket} does not exist {at}: create it (aws s3 mb "
            f"s3://{store.bucket}, with --endpoint-url for MinIO or another S3 service; mc mb), "
            "or name another one (`rollout login`, --storage-bucket)"
        )
    if code in ("InvalidAccessKeyId", "InvalidClientTokenId"):
        return (
            f"{credentials} were refused {at}: the access key id is unknown there ({code}); "
            f"{relogin}"
        )
    if code == "SignatureDoesNotMatch":
        return (
            f"{credentials} were refused {at}: the secret access key does not match the access "
            f"key id ({code}); {relogin}"
        )
    if code in ("AccessDenied", "403"):
        return (
            f"{credentials} may not list the bucket {store.bucket} {at} ({code}): they need "
            "s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject on it"
        )
    if code is None and "no credentials were found" in str(err):
        return (
            f"no credentials were found for {store.bucket} {at}: run `rollout login`, or set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile (AWS_PROFILE)"
        )
    if err.transient and code is None:
        return (
            f"the storage endpoint did not answer {at}: is the endpoint right and reachable from "
            f"here? ({err})"
        )
    return str(err)


def check_runner_image(context: _Context) -> Check:
    """The runner image setting and where it came from; none means the operator's default."""
    settings = context.settings
    if settings is None:
        return Check("runner image", Status.SKIP, "needs the settings, which could not be read")
    image = settings.runner_image
    if image is not None:
        origin = config.origin_text(settings.origins.get("runner_image", ("", None)))
        try:
            parse_image_reference(image)
        except ValueError as err:
            return Check("runner image", Status.FAIL, f"{err} (from {origin})")
        return Check("runner image", Status.OK, f"{image} (from {origin})")
    namespace = context.cluster.namespace if context.cluster else None
    default = next(
        (
            d
            for d in context.deployments
            if d.runner_image and (namespace is None or d.serves(namespace))
        ),
        None,
    )
    what = f" ({default.runner_image}, from {default.where})" if default else ""
    where = f", or runnerImage in {settings.config_file}" if settings.config_file else ""
    return Check(
        "runner image",
        Status.OK,
        f"none set here, so jobs use the operator's default{what}; to choose one: "
        f"--runner-image, ROLLOUT_RUNNER_IMAGE{where}",
    )


# --- local mode ---------------------------------------------------------------------------------


def local_checks(environ: Mapping[str, str]) -> list[Check]:
    """What `rollout run --local` needs: a container engine for environment.type docker, the
    host sandbox for local. One missing is a warning while the other works (jobs of that type
    only cannot run); both missing fail."""
    engine = engine_unavailable(environ)
    host = host_sandbox_unavailable(environ.get("PATH"))
    neither = engine is not None and host is not None
    missing = Status.FAIL if neither else Status.WARN
    return [
        Check(
            "container engine (environment.type docker)",
            Status.OK if engine is None else missing,
            f"{engine_address(environ)} answers" if engine is None else engine,
        ),
        Check(
            "host sandbox (environment.type local)",
            Status.OK if host is None else missing,
            "this machine can create the sandbox's namespaces" if host is None else host,
        ),
    ]
