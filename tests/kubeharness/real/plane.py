"""The session's control plane: etcd, kube-apiserver and (when found) kube-controller-manager as
processes, found as envtest finds them, with static tokens, RBAC and an audit log.
"""

from __future__ import annotations

import itertools
import os
import shutil
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kubeharness.crds import crd_manifests
from kubeharness.identity import (
    CONTROLLERS,
    RELEASE_NAMESPACES,
    Identity,
    chart_rbac,
    operator_user,
)
from kubeharness.real.certificates import write_certificates
from kubeharness.real.client import ApiError, SyncClient, create, install_crd
from kubeharness.resources import CRDS_DIR, NAMESPACES, Body, resource_path_of
from loopback import free_port

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
    def controller_users(self) -> list[str]:
        """The users of the controllers (the operators' and the bridge's), whose requests the
        request log holds beside the CLI's."""
        return [operator_user(identity).name for identity in CONTROLLERS]

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
        for identity in CONTROLLERS:
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
        """The chart's cluster-wide RBAC (the operator's and the bridge's), the rollout CRDs, and
        the test's Node."""
        client = self.client()
        for namespace in dict.fromkeys(RELEASE_NAMESPACES.values()):
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
