"""The NetworkPolicies that hold a job's no-internet trials to what they need. Pure: no I/O.

A task with `allow_internet = false` or `network_mode = "no-network"`/`"allowlist"`
(`rollout.api.network`) runs in a Pod labelled `EGRESS_LABEL`. Its job gets, once, before its
first trial Pod (`jobdecide.CreateNetworkPolicies`, carried out by `jobexec`):

- `<job>-egress`, selecting every such Pod of the job: egress to cluster DNS (kube-system's
  `k8s-app: kube-dns` Pods, UDP and TCP 53) and to the endpoints the trial itself needs
  (`job_endpoints`: object storage, and the services the job names: endpoint agents, model
  agents' APIs, the llm_judgement evaluator), and nowhere else. Ingress is left alone: nothing
  connects to a trial Pod.
- `<job>-egress-hosts-<digest>`, one per set of `allowed_hosts` among the job's tasks,
  selecting the Pods of that set: egress to those hosts' addresses, any port.

NetworkPolicies add up, so a Pod of a host set gets both. A NetworkPolicy covers the whole Pod,
runner and agent alike: whatever the runner may reach, the agent may too.

A NetworkPolicy matches addresses, not names, so names are resolved (by the executor) when the
policies are made, and kept as resolved:

- an address (or, in `allowed_hosts`, a CIDR) is taken as it is;
- an in-cluster Service name (`<service>.<namespace>.svc[.<cluster domain>]`) also allows its
  namespace's Pods on that port: most CNIs check egress after a Service's address has been
  translated to one of its Pods', where the Service's own address would never match;
- another name allows the addresses it resolved to;
- an endpoint whose addresses cannot be known (a name that did not resolve, or AWS S3 without an
  endpoint, whose addresses change all the time) has its port open to any address: the trial
  must be able to fetch its task and upload its results. The operator says so in a Warning
  event on the job;
- an allowed host that did not resolve is left out (the task gets less, never more), also with
  a Warning event.

Both policies are owned by the RolloutJob (deleted with it) and labelled with its
`rollout.dev/job`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rollout.api.names import controller_reference
from rollout.api.network import EGRESS_LABEL, TrialEgress
from rollout.api.plan import JobPlan
from rollout.api.resources import LABEL_JOB, RolloutJob
from rollout.api.storage import StorageLocation
from rollout.api.trials import label_value

DNS_PORT = 53
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
"""CoreDNS keeps kube-dns's Pod label (kubeadm, kind, GKE, EKS, AKS)."""
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by the API server on every namespace (Kubernetes 1.21 and newer)."""
ANY_ADDRESS = ("0.0.0.0/0", "::/0")
MAX_NAME_LENGTH = 253
"""A NetworkPolicy's name is a DNS subdomain."""

_SERVICE_HOST = re.compile(r"^[a-z0-9-]+\.(?P<namespace>[a-z0-9-]+)\.svc(\.[a-z0-9.-]+)?\.?$")


@dataclass(frozen=True)
class Endpoint:
    """A service a trial's Pod must reach: a host and a TCP port."""

    what: str
    """What it is, for people: "object storage"."""
    host: str
    port: int
    addresses_known: bool = True
    """False: its addresses change all the time (AWS S3): its port is open to any address."""


@dataclass(frozen=True)
class PolicyPlan:
    """What a job's policies are made from, but the addresses: `names` are to be resolved."""

    endpoints: tuple[Endpoint, ...]
    egresses: tuple[TrialEgress, ...]
    """The job's distinct restricted egresses (each set of allowed hosts once)."""

    @property
    def names(self) -> list[str]:
        """The host names to resolve before rendering (addresses and CIDRs need nothing)."""
        hosts = [e.host for e in self.endpoints if e.addresses_known]
        hosts += [host for egress in self.egresses for host in egress.allowed_hosts]
        return sorted({host for host in hosts if _network(host) is None})


@dataclass(frozen=True)
class Rendered:
    """The policies to create, and what the cluster operator should be told about them."""

    policies: list[dict[str, Any]]
    warnings: list[str]


def storage_endpoint(storage: StorageLocation) -> Endpoint:
    """Where the runner fetches the task and uploads results (`StorageLocation.endpoint`, or
    AWS S3's regional endpoint)."""
    if storage.endpoint is None:
        host = f"s3.{storage.signing_region}.amazonaws.com"
        return Endpoint("object storage (AWS S3)", host, 443, addresses_known=False)
    return url_endpoint("object storage", storage.endpoint)


def service_endpoints(job: RolloutJob) -> list[Endpoint]:
    """The services the job names for its trials, which the runner calls from the trial's Pod:
    endpoint agents' URLs, model agents' base URLs, the llm_judgement evaluator's base URL.
    Every no-internet trial of the job may reach them (the agent runs in the same Pod)."""
    found: list[Endpoint] = []
    for agent in job.spec.agents:
        if agent.endpoint is not None:
            found.append(url_endpoint(f"agent {agent.name}'s endpoint", agent.endpoint))
        if agent.model is not None:
            found.append(url_endpoint(f"agent {agent.name}'s model API", agent.model.base_url))
    if job.spec.evaluator_base_url is not None:
        found.append(url_endpoint("the llm_judgement evaluator", job.spec.evaluator_base_url))
    return list({(e.host, e.port): e for e in found}.values())


def url_endpoint(what: str, url: str) -> Endpoint:
    """The host and port of an http(s) URL."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Endpoint(what, parts.hostname or "", port)


def job_endpoints(job: RolloutJob, storage: StorageLocation) -> list[Endpoint]:
    """Everything a restricted trial of the job must reach but DNS."""
    return [storage_endpoint(storage), *service_endpoints(job)]


def restricted_egresses(plan: JobPlan) -> list[TrialEgress]:
    """The job's distinct restricted egresses, in the plan's order (none: no policy needed)."""
    # A broken task's trials get no Pod (they fail at creation): nothing of theirs to hold.
    configs = {
        trial.task.content_hash: trial.task.config
        for trial in plan.trials
        if trial.task.error is None
    }
    seen: dict[str | None, TrialEgress] = {}
    for config in configs.values():
        egress = config.environment.egress
        if egress.restricted:
            seen.setdefault(egress.label_value, egress)
    return list(seen.values())


def policy_plan(job: RolloutJob, storage: StorageLocation, plan: JobPlan) -> PolicyPlan | None:
    """What the job's policies need, or None when no trial of it is restricted."""
    egresses = restricted_egresses(plan)
    if not egresses:
        return None
    return PolicyPlan(tuple(job_endpoints(job, storage)), tuple(egresses))


def render_policies(
    plan: PolicyPlan,
    *,
    job_name: str,
    job_uid: str,
    namespace: str,
    addresses: Mapping[str, Sequence[str]],
) -> Rendered:
    """The job's NetworkPolicies; `addresses` holds what each of `plan.names` resolved to
    (a name missing or without addresses did not resolve)."""
    warnings: list[str] = []
    job_label = label_value(job_name)
    rules: list[dict[str, Any]] = [_dns_rule()]
    for endpoint in plan.endpoints:
        peers = _endpoint_peers(endpoint, addresses)
        if peers is None:
            peers = [{"ipBlock": {"cidr": cidr}} for cidr in ANY_ADDRESS]
            why = "did not resolve" if endpoint.addresses_known else "has no fixed addresses"
            warnings.append(
                f"{endpoint.what} at {endpoint.host} {why}: no-internet trials may reach any "
                f"address on port {endpoint.port}"
            )
        rules.append({"to": peers, "ports": [{"protocol": "TCP", "port": endpoint.port}]})
    base = {"matchExpressions": [{"key": EGRESS_LABEL, "operator": "Exists"}]}
    policies = [_policy(job_name, job_uid, namespace, job_label, "egress", base, rules)]
    for egress in plan.egresses:
        value = egress.label_value
        if value is None or not egress.allowed_hosts:
            continue
        peers = []
        for host in egress.allowed_hosts:
            blocks = _address_peers(host, addresses)
            if not blocks:
                warnings.append(f"allowed host {host} did not resolve: left out")
            peers += blocks
        if not peers:
            continue  # a rule with no peers would allow every address
        selector = {"matchLabels": {EGRESS_LABEL: value}}
        suffix = f"egress-{value}"
        policies.append(
            _policy(job_name, job_uid, namespace, job_label, suffix, selector, [{"to": peers}])
        )
    return Rendered(policies, warnings)


def policy_name(job_name: str, suffix: str) -> str:
    """`<job>-<suffix>`, shortened with a digest of the job's name when too long."""
    name = f"{job_name}-{suffix}"
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:10]
    head = job_name[: MAX_NAME_LENGTH - len(suffix) - len(digest) - 2].rstrip(".-")
    return f"{head}-{digest}-{suffix}"


# --- the parts --------------------------------------------------------------------------------


def _dns_rule() -> dict[str, Any]:
    peer = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: DNS_NAMESPACE}},
        "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
    }
    ports = [{"protocol": protocol, "port": DNS_PORT} for protocol in ("UDP", "TCP")]
    return {"to": [peer], "ports": ports}


def _endpoint_peers(
    endpoint: Endpoint, addresses: Mapping[str, Sequence[str]]
) -> list[dict[str, Any]] | None:
    """Who the endpoint is, as NetworkPolicy peers; None when its addresses are not known."""
    if not endpoint.addresses_known:
        return None
    peers = _address_peers(endpoint.host, addresses)
    service = _SERVICE_HOST.match(endpoint.host.lower())
    if service:
        namespace = service.group("namespace")
        peers.append({"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}})
    return peers or None


def _address_peers(host: str, addresses: Mapping[str, Sequence[str]]) -> list[dict[str, Any]]:
    """ipBlocks for a host: its own address or CIDR, else what its name resolved to."""
    network = _network(host)
    if network is not None:
        return [{"ipBlock": {"cidr": str(network)}}]
    found = (_network(address) for address in addresses.get(host, ()))
    return [{"ipBlock": {"cidr": str(n)}} for n in _unique(found) if n is not None]


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """An address (as a /32 or /128) or a CIDR; None for a name."""
    try:
        return ipaddress.ip_network(text.strip("[]"), strict=False)
    except ValueError:
        return None


def _unique(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def _policy(
    job_name: str,
    job_uid: str,
    namespace: str,
    job_label: str,
    suffix: str,
    selector: dict[str, Any],
    rules: list[dict[str, Any]],
) -> dict[str, Any]:
    pod_selector = {**selector}
    pod_selector["matchLabels"] = {LABEL_JOB: job_label, **selector.get("matchLabels", {})}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": policy_name(job_name, suffix),
            "namespace": namespace,
            "labels": {LABEL_JOB: job_label},
            "ownerReferences": [controller_reference(RolloutJob.resource.kind, job_name, job_uid)],
        },
        "spec": {"podSelector": pod_selector, "policyTypes": ["Egress"], "egress": rules},
    }
