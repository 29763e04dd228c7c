"""A real Kubernetes control plane for the suite, behind the same `Kube` helpers as the emulator.

controller-runtime's envtest convention: the binaries are found in the directory that
`KUBEBUILDER_ASSETS` names (default `/usr/local/kubebuilder/bin`): `kube-apiserver` is required,
`etcd` is taken from there or from PATH (Debian's `etcd-server`), and `kube-controller-manager`,
when it is there too, runs the garbage collector and the namespace and ServiceAccount
controllers (so owner references, namespace deletion and the `default` ServiceAccount behave as
on a cluster; without it, tests that need garbage collection are skipped). No node, no kubelet,
no scheduler: the test plays the kubelet (`Kube.set_pod_status`), binding each Pod to a Node
object of its own before it writes the Pod's status, and confirming the deletion of bound Pods as
a kubelet does.

One control plane serves the whole session; every test gets a namespace of its own. Clients
authenticate with static tokens (`--token-auth-file`) and RBAC is on:

- the harness (`rollout-harness`, system:masters) makes the test's own requests;
- the operator runs as the chart's ServiceAccount (a token for its user name), with exactly the
  RBAC objects the chart renders, so that a call the chart does not allow fails the test;
- a user (`rollout-user`, system:masters) runs the CLI;
- kube-controller-manager has a token of its own.

The request log (`calls()`) comes from the API server's audit log (JSON lines): the operator's and
the user's requests, writes with their bodies. A barrier request makes sure that everything
answered before `calls()` was called is in the log.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime
import http.client
import ipaddress
import itertools
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import kopf
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from kubeharness.kube import (
    CRDS,
    CRDS_DIR,
    NAMESPACES,
    PODS,
    RELEASE_NAMESPACES,
    ApiCall,
    Body,
    Identity,
    Kube,
    Namespace,
    RunningOperator,
    chart_rbac,
    crd_manifests,
    operator_user,
    resource_path_of,
)

ASSETS_ENV = "KUBEBUILDER_ASSETS"
DEFAULT_ASSETS = Path("/usr/local/kubebuilder/bin")
NODE = "rollout-test-node"

HARNESS_USER = "rollout-harness"
CLI_USER = "rollout-user"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
READY_TIMEOUT_SEC = 90.0


AUDIT_POLICY: Body = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        # The harness's barrier (see RealKube.calls), and nothing else of the harness's.
        {"level": "Metadata", "users": [HARNESS_USER], "nonResourceURLs": ["/version"]},
        {"level": "None", "users": [HARNESS_USER, CONTROLLER_MANAGER_USER, "system:apiserver"]},
        {
            "level": "Request",
            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
        },
        {
            "level": "Request",
            "resources": [
                {"group": "", "resources": ["pods/exec", "pods/attach", "pods/portforward"]}
            ],
        },
        {"level": "Metadata"},
    ],
}
VERB_METHODS = {
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path
    kube_controller_manager: Path | None


def find_binaries() -> Binaries | None:
    """The control plane's binaries, found as envtest finds them; None without kube-apiserver."""
    assets = Path(os.environ.get(ASSETS_ENV) or DEFAULT_ASSETS)
    apiserver = assets / "kube-apiserver"
    if not os.access(apiserver, os.X_OK):
        return None
    etcd = assets / "etcd" if os.access(assets / "etcd", os.X_OK) else shutil.which("etcd")
    if etcd is None:
        return None
    manager = assets / "kube-controller-manager"
    return Binaries(apiserver, Path(etcd), manager if os.access(manager, os.X_OK) else None)


def unavailable_reason() -> str | None:
    """Why no real control plane can run here, or None when one can."""
    assets = os.environ.get(ASSETS_ENV) or str(DEFAULT_ASSETS)
    if find_binaries() is None:
        return (
            f"no real control plane: kube-apiserver (and etcd) not found in {assets} "
            f"(set {ASSETS_ENV}; etcd may also be on PATH)"
        )
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------
# Certificates and keys.


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def write_certificates(directory: Path) -> None:
    """A CA, a serving certificate for 127.0.0.1 signed by it, and a ServiceAccount key pair."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rollout-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    serving_key = _key()
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(serving_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "apiserver.crt").write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    (directory / "apiserver.key").write_bytes(_pem_key(serving_key))
    sa_key = _key()
    (directory / "sa.key").write_bytes(_pem_key(sa_key))
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


# --------------------------------------------------------------------------------------------
# A small synchronous client for bootstrapping and for the audit barrier.


class ApiError(RuntimeError):
    """An API server error answer: its status, reason and message."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = body.get("reason", "") if isinstance(body, Mapping) else ""
        message = body.get("message", body) if isinstance(body, Mapping) else body
        super().__init__(f"{status} {self.reason}: {message}")


@dataclass
class SyncClient:
    host: str
    port: int
    token: str
    context: ssl.SSLContext

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=30
        )
        try:
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            text = response.read()
        finally:
            connection.close()
        decoded: Any = json.loads(text) if text.strip().startswith(b"{") else text.decode()
        if response.status >= 400:
            raise ApiError(response.status, decoded)
        return decoded


# --------------------------------------------------------------------------------------------
# The control plane.


@dataclass
class ControlPlane:
    """etcd, kube-apiserver and (when found) kube-controller-manager, as processes."""

    binaries: Binaries
    workdir: Path
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    port: int = 0
    _namespaces: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_path(self) -> Path:
        return self.workdir / "ca.crt"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    @property
    def garbage_collector(self) -> bool:
        return self.binaries.kube_controller_manager is not None

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    def client(self, user: str = HARNESS_USER) -> SyncClient:
        return SyncClient("127.0.0.1", self.port, self.tokens[user], self.ssl_context())

    def token(self, identity: Identity) -> str:
        if identity is Identity.USER:
            return self.tokens[CLI_USER]
        return self.tokens[operator_user(identity).name]

    @property
    def operator_users(self) -> list[str]:
        return [operator_user(i).name for i in (Identity.OPERATOR, Identity.NAMESPACED_OPERATOR)]

    def next_namespace(self) -> str:
        return f"t{next(self._namespaces):03d}"  # short: the CLI prints it in tables

    # ---- start and stop

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        write_certificates(self.workdir)
        users = {
            HARNESS_USER: "system:masters",
            CLI_USER: "system:masters",
            CONTROLLER_MANAGER_USER: "system:masters",
        }
        for identity in (Identity.OPERATOR, Identity.NAMESPACED_OPERATOR):
            user = operator_user(identity)
            users[user.name] = ",".join(user.groups)
        rbac = chart_rbac(RELEASE_NAMESPACES[Identity.OPERATOR])
        lines = []
        for index, (user, groups) in enumerate(users.items()):
            self.tokens[user] = f"token-{index}-{uuid.uuid4().hex}"
            lines.append(f'{self.tokens[user]},{user},uid-{index},"{groups}"')
        (self.workdir / "tokens.csv").write_text("\n".join(lines) + "\n")
        (self.workdir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        try:
            self._start_etcd()
            self._start_apiserver()
            self._wait_ready()
            self._bootstrap(rbac)
            # After the CRDs: the garbage collector looks for resources to watch at its start
            # and then only every 30 s.
            if self.binaries.kube_controller_manager is not None:
                self._start_controller_manager()
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        process = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        self.processes.append((name, process))
        return process

    def _start_etcd(self) -> None:
        self.etcd_port, peer = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{self.etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--log-level=warn",
                "--logger=zap",
            ],
        )

    def _start_apiserver(self) -> None:
        self.port = free_port()
        d = self.workdir
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={d / 'certs'}",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--anonymous-auth=false",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                f"--audit-policy-file={d / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
            ],
        )

    def _start_controller_manager(self) -> None:
        assert self.binaries.kube_controller_manager is not None
        kubeconfig = self.workdir / "controller-manager.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                kubeconfig_document(self.url, self.ca_path, self.tokens[CONTROLLER_MANAGER_USER])
            )
        )
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                "--controllers=garbagecollector,namespace,serviceaccount",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--secure-port=0",
                "--concurrent-gc-syncs=10",
                "--v=1",
            ],
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SEC
        last: object = None
        while time.monotonic() < deadline:
            for name, process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {process.returncode}: {self.log_tail(name)}"
                    )
            try:
                if self.client().request("GET", "/readyz") == "ok":
                    return
            except (OSError, ApiError) as err:
                last = err
            time.sleep(0.2)
        raise RuntimeError(
            f"kube-apiserver was not ready within {READY_TIMEOUT_SEC}s ({last}): "
            f"{self.log_tail('kube-apiserver')}"
        )

    def _bootstrap(self, rbac: Iterable[Body]) -> None:
        """The chart's RBAC for the operator, the rollout CRDs, and the test's Node."""
        client = self.client()
        for namespace in RELEASE_NAMESPACES.values():
            create(client, NAMESPACES, {"metadata": {"name": namespace}})
        for obj in rbac:
            create(client, resource_path_of(obj), obj)
        for crd in crd_manifests(CRDS_DIR):
            install_crd(client, crd)
        create(
            client,
            "v1/nodes",
            {"metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}},
        )

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for _name, process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for _name, process in reversed(self.processes):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.processes.clear()


def kubeconfig_document(url: str, ca_path: Path, token: str, namespace: str = "default") -> Body:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": url, "certificate-authority": str(ca_path)}}
        ],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [
            {"name": "test", "context": {"cluster": "test", "user": "test", "namespace": namespace}}
        ],
        "current-context": "test",
    }


# --------------------------------------------------------------------------------------------
# Paths and plain requests.

CLUSTER_SCOPED = frozenset(
    {
        "v1/namespaces",
        "v1/nodes",
        "v1/persistentvolumes",
        CRDS,
        "rbac.authorization.k8s.io/v1/clusterroles",
        "rbac.authorization.k8s.io/v1/clusterrolebindings",
        "storage.k8s.io/v1/storageclasses",
        "scheduling.k8s.io/v1/priorityclasses",
        "admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
        "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "kopf.dev/v1/clusterkopfpeerings",
    }
)


def resource_path(
    resource: str, namespace: str | None, name: str | None = None, subresource: str | None = None
) -> str:
    """The URL path of a resource (a collection when `name` is None)."""
    parts = resource.split("/")
    base = "/api/v1" if len(parts) == 2 else f"/apis/{parts[0]}/{parts[1]}"
    plural = parts[-1]
    path = base
    if namespace is not None and resource not in CLUSTER_SCOPED:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


def create(client: SyncClient, resource: str, body: Mapping[str, Any]) -> Any:
    """Create an object; an existing one is left as it is."""
    namespace = body.get("metadata", {}).get("namespace")
    try:
        return client.request("POST", resource_path(resource, namespace), dict(body))
    except ApiError as err:
        if err.status != 409:
            raise
        return None


def install_crd(client: SyncClient, crd: Mapping[str, Any], timeout: float = 30.0) -> None:
    """Create or update a CRD and wait until it is established and its resource is served."""
    name = crd["metadata"]["name"]
    path = resource_path(CRDS, None, name)
    try:
        client.request("POST", resource_path(CRDS, None), dict(crd))
    except ApiError as err:
        if err.status != 409:
            raise
        current = client.request("GET", path)
        if current["spec"] != crd["spec"]:
            replacement = {**crd, "metadata": {**crd["metadata"], **current["metadata"]}}
            client.request("PUT", path, replacement)
    spec = crd["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("served", True))
    discovery = f"/apis/{spec['group']}/{version}"
    deadline = time.monotonic() + timeout
    while True:
        current = client.request("GET", path)
        conditions = {
            c["type"]: c["status"] for c in (current.get("status") or {}).get("conditions") or []
        }
        if conditions.get("Established") == "True":
            with contextlib.suppress(ApiError):
                served = client.request("GET", discovery)
                if any(r["name"] == spec["names"]["plural"] for r in served.get("resources", [])):
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} was not established and served within {timeout}s")
        time.sleep(0.1)


# --------------------------------------------------------------------------------------------
# The audit log as the request log.


class AuditLog:
    """The API server's audit log, read incrementally: one ApiCall per request (its first event)."""

    def __init__(self, path: Path, users: Iterable[str]) -> None:
        self.path = path
        self.users = set(users)
        self.calls: list[ApiCall] = []
        self._offset = 0
        self._seen: set[str] = set()
        self._pending = b""

    def read(self) -> list[str]:
        """Read what is new; the request URIs of the harness's own (barrier) requests."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(self._offset)
            data = log.read()
        self._offset += len(data)
        data = self._pending + data
        lines = data.split(b"\n")
        self._pending = lines.pop()
        barriers = []
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            if event["auditID"] in self._seen:
                continue
            self._seen.add(event["auditID"])
            user = event.get("user", {}).get("username", "")
            if user == HARNESS_USER:
                barriers.append(event.get("requestURI", ""))
            elif user in self.users:
                self.calls.append(api_call(event))
        return barriers


def api_call(event: Mapping[str, Any]) -> ApiCall:
    """An audit event as the harness's ApiCall."""
    uri = urllib.parse.urlsplit(event.get("requestURI", ""))
    params = dict(urllib.parse.parse_qsl(uri.query, keep_blank_values=True))
    ref = event.get("objectRef") or {}
    resource = None
    if ref.get("resource"):
        group = ref.get("apiGroup") or ""
        version = ref.get("apiVersion") or ""
        resource = (
            f"{group}/{version}/{ref['resource']}" if group else f"{version}/{ref['resource']}"
        )
    body = event.get("requestObject")
    # As in the emulator's log: the name in the path (the API server also names the object of a
    # list or watch by a `metadata.name=` field selector; the path does not), or in a POST's body.
    name = None if event.get("verb") in ("list", "watch") else ref.get("name")
    if name is None and event.get("verb") == "create" and isinstance(body, Mapping):
        name = (body.get("metadata") or {}).get("name")
    return ApiCall(
        method=VERB_METHODS.get(event.get("verb", ""), "GET"),
        path=uri.path,
        params=params,
        resource=resource,
        namespace=ref.get("namespace"),
        name=name,
        subresource=ref.get("subresource"),
        body=body,
        user_agent=event.get("userAgent", ""),
    )


# --------------------------------------------------------------------------------------------
# The Kube of a test.


class RealKube(Kube):
    """A namespace of the session's real control plane, seen from a test."""

    def __init__(self, plane: ControlPlane, session: aiohttp.ClientSession, namespace: str) -> None:
        self.plane = plane
        self.session = session
        self.namespace = namespace
        self.operators: builtins.list[RunningOperator] = []
        self.extra_namespaces: builtins.list[str] = []
        self.audit = AuditLog(plane.audit_log, [*plane.operator_users, CLI_USER])
        self._sync_client = plane.client()
        self._base = 0
        self._sync()
        self._base = len(self.audit.calls)

    @classmethod
    @contextlib.asynccontextmanager
    async def for_test(cls, plane: ControlPlane) -> AsyncIterator[RealKube]:
        """A fresh namespace (with its `default` ServiceAccount) and a kubelet for its Pods."""
        connector = aiohttp.TCPConnector(ssl=plane.ssl_context())
        headers = {"Authorization": f"Bearer {plane.tokens[HARNESS_USER]}"}
        async with aiohttp.ClientSession(
            base_url=plane.url, connector=connector, headers=headers
        ) as session:
            kube = cls(plane, session, plane.next_namespace())
            await kube.create_namespace(kube.namespace)
            kubelet = asyncio.create_task(kube._confirm_pod_deletions(kube.namespace))
            try:
                yield kube
            finally:
                for operator in list(kube.operators):
                    if operator.alive:
                        await operator.stop()
                kubelet.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await kubelet
                await kube._clean_up()

    @property
    def url(self) -> str:
        return self.plane.url

    def connection(self, identity: Identity = Identity.OPERATOR) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=self.plane.url,
            ca_path=str(self.plane.ca_path),
            token=self.plane.token(identity),
            default_namespace=self.namespace,
        )

    def _enforce_rbac(self, identity: Identity) -> None:
        pass  # a real API server enforces RBAC on every user but the admins

    # ---- requests

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> Any:
        kwargs: dict[str, Any] = {"params": dict(params or {})}
        if body is not None:
            kwargs["data"] = json.dumps(body)
            kwargs["headers"] = {"Content-Type": content_type}
        async with self.session.request(method, path, **kwargs) as response:
            data = await response.json(content_type=None)
            if response.status >= 400:
                raise ApiError(response.status, data)
            return data

    def _where(self, resource: str, namespace: str | None) -> str | None:
        return None if resource in CLUSTER_SCOPED else namespace

    async def install_crds(self, source: Path | Iterable[Mapping[str, Any]]) -> None:
        manifests = crd_manifests(source) if isinstance(source, Path) else builtins.list(source)
        for manifest in manifests:
            await asyncio.to_thread(install_crd, self._sync_client, manifest)

    async def _kind(self, resource: str) -> str:
        """The kind of a resource, from discovery (as the emulator fills it in, so may we)."""
        group_version, plural = resource.rsplit("/", 1)
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        found = await self._request("GET", path)
        return str(next(r["kind"] for r in found["resources"] if r["name"] == plural))

    async def create(
        self, resource: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> Body:
        meta = body.get("metadata") or {}
        where = self._where(resource, namespace or meta.get("namespace") or self.namespace)
        body = {
            "apiVersion": resource.rsplit("/", 1)[0],
            "kind": body.get("kind") or await self._kind(resource),
            **body,
        }
        created = await self._request("POST", resource_path(resource, where), body)
        if resource == NAMESPACES:
            await self._namespace_ready(created["metadata"]["name"])
        return dict(created)

    async def _namespace_ready(self, name: str) -> None:
        """A namespace has its `default` ServiceAccount (which Pods need) once the controller
        made it; the harness makes it itself where no controller manager runs."""
        account = {"metadata": {"name": "default", "namespace": name}}
        with contextlib.suppress(ApiError):
            await self._request("POST", resource_path("v1/serviceaccounts", name), account)

    async def find(self, resource: str, name: str, namespace: Namespace = ...) -> Body | None:
        path = resource_path(resource, self._where(resource, self._ns(namespace)), name)
        try:
            return dict(await self._request("GET", path))
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    async def list(
        self,
        resource: str,
        namespace: Namespace = None,
        *,
        labels: str | Mapping[str, str] = "",
        fields: str = "",
    ) -> builtins.list[Body]:
        if isinstance(labels, Mapping):
            labels = ",".join(f"{k}={v}" for k, v in labels.items())
        params = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        found = await self._request(
            "GET",
            resource_path(resource, self._where(resource, self._ns(namespace))),
            params=params,
        )
        api_version = found.get("apiVersion", "v1")
        kind = found.get("kind", "List").removesuffix("List")
        return [{"apiVersion": api_version, "kind": kind, **item} for item in found["items"]]

    async def patch(
        self,
        resource: str,
        name: str,
        patch: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        namespace: Namespace = ...,
        *,
        subresource: str | None = None,
    ) -> Body:
        is_merge = isinstance(patch, Mapping)
        body: Any = dict(patch) if is_merge else [dict(op) for op in patch]
        path = resource_path(
            resource, self._where(resource, self._ns(namespace)), name, subresource
        )
        content_type = "application/merge-patch+json" if is_merge else "application/json-patch+json"
        return dict(await self._request("PATCH", path, body, content_type=content_type))

    async def delete(self, resource: str, name: str, namespace: Namespace = ...) -> Body:
        path = resource_path(resource, self._where(resource, self._ns(namespace)), name)
        return dict(await self._request("DELETE", path))

    # ---- the kubelet

    async def _schedule(self, pod: Body) -> None:
        if pod.get("spec", {}).get("nodeName"):
            return
        meta = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        path = resource_path(PODS, meta["namespace"], meta["name"], "binding")
        await self._request("POST", path, binding)

    async def _confirm_pod_deletions(self, namespace: str) -> None:
        """What the kubelet does when a bound Pod is deleted: stop it, then remove it at once."""
        path = resource_path(PODS, namespace)
        version = ""
        while True:
            try:
                if not version:
                    listed = await self._request("GET", path)
                    version = listed["metadata"]["resourceVersion"]
                    for pod in listed["items"]:
                        await self._confirm_deletion(pod)
                params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "60"}
                async with self.session.get(path, params=params, timeout=None) as response:
                    if response.status >= 400:
                        version = ""
                        continue
                    async for line in response.content:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            version = ""
                            break
                        pod = event["object"]
                        version = pod["metadata"]["resourceVersion"]
                        await self._confirm_deletion(pod)
            except (aiohttp.ClientError, ApiError, json.JSONDecodeError):
                await asyncio.sleep(0.2)
                version = ""

    async def _confirm_deletion(self, pod: Body) -> None:
        meta = pod["metadata"]
        if not meta.get("deletionTimestamp") or not pod.get("spec", {}).get("nodeName"):
            return
        path = resource_path(PODS, meta["namespace"], meta["name"])
        with contextlib.suppress(ApiError):
            await self._request("DELETE", path, {"gracePeriodSeconds": 0})

    async def _clean_up(self) -> None:
        """Leave nothing behind for later tests (a cluster-wide operator would see it): the
        test's jobs, trials and Pods deleted at once (finalizers off, no grace), then its
        namespaces (which the namespace controller, where it runs, finishes in the background)."""
        rollout = ("rollout.dev/v1alpha1/rolloutjobs", "rollout.dev/v1alpha1/rollouttrials")
        for namespace in self._own_namespaces():
            for resource in rollout:
                with contextlib.suppress(ApiError):
                    for obj in await self.list(resource, namespace):
                        if obj["metadata"].get("finalizers"):
                            release = {"metadata": {"finalizers": None}}
                            await self.patch(resource, obj["metadata"]["name"], release, namespace)
            for resource in (*rollout, PODS):
                with contextlib.suppress(ApiError):
                    await self._request(
                        "DELETE",
                        resource_path(resource, namespace),
                        params={"gracePeriodSeconds": "0"},
                    )
            with contextlib.suppress(ApiError):
                await self.delete(NAMESPACES, namespace, None)

    def _own_namespaces(self) -> builtins.list[str]:
        return [self.namespace, *self.extra_namespaces]

    async def new_namespace(self, suffix: str) -> str:
        name = f"{self.namespace}-{suffix}"  # the session's control plane is shared
        await self.create_namespace(name)
        self.extra_namespaces.append(name)
        return name

    # ---- the request log

    def _sync(self) -> None:
        """Read the audit log up to a barrier request made now: every request answered before
        this call is then in it (the API server logs a request once it has answered it)."""
        token = uuid.uuid4().hex
        self._sync_client.request("GET", f"/version?barrier={token}")
        deadline = time.monotonic() + 10
        while not any(token in uri for uri in self.audit.read()):
            if time.monotonic() > deadline:
                raise TimeoutError("the audit log did not show the barrier request within 10s")
            time.sleep(0.005)

    def mark(self) -> int:
        self._sync()
        return len(self.audit.calls) - self._base

    def calls(self, since: int = 0) -> builtins.list[ApiCall]:
        self._sync()
        return self.audit.calls[self._base + since :]

    def _inject_fault(self, fault: Any) -> None:
        pytest.skip("injected API errors need the emulator: a real API server fails on no demand")

    def needs_garbage_collector(self) -> None:
        if not self.plane.garbage_collector:
            pytest.skip(
                "needs garbage collection: no kube-controller-manager beside kube-apiserver"
            )
