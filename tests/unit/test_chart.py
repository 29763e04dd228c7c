"""The Helm chart, rendered by Helm's own engine (helm-python-sdk bundles Helm's Go library), with
the default values, the quickstart values and a values file listing watched namespaces; every
object checked against the Kubernetes schemas (kubernetes-validate) and against the project's
rules: minimal RBAC without wildcards, restricted Pod Security, a trial ServiceAccount without
token or bindings, the generated CRDs, the operator's environment contract."""

from __future__ import annotations

import base64
import functools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from jsonschema import ValidationError as JsonSchemaValidationError

from crd_rules import validate_object
from kubeharness.kubelet import container_env, expand
from paths import REPO
from rollout.api.crd import stale_crds
from rollout.api.resources import PodOverrides
from rollout.controller.config import OperatorConfig
from rollout.controller.prices import UnitPrices

CHART = REPO / "charts" / "rollout-operator"
RELEASE = "rollout-operator"
NAMESPACE = "rollout-system"
# kubernetes-validate ships schemas from 1.25 on; the project targets 1.24+, and 1.24's apps,
# batch, core and rbac v1 schemas are the same as 1.25's for every field the chart uses.
KUBERNETES_VERSIONS = ("1.25.0", "1.28.0")
# Kinds whose schema is a CRD kubernetes-validate does not know: checked on their own below.
KOPF_PEERING_KINDS = {"KopfPeering", "ClusterKopfPeering"}
SERVICE_MONITOR = "ServiceMonitor"
POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}

# A values file as a user would write it: the operator watches two namespaces; trials may also
# run in a third; storage credentials are given inline; trial Pods get scheduling defaults.
NAMESPACED_VALUES = """
watchNamespaces: [evals, rl]
trialNamespaces: [scratch]
storage:
  bucket: eval-results
  prefix: team-a
  endpoint: https://s3.example.test
  region: eu-west-1
  credentials:
    accessKeyId: AKIAEXAMPLEKEY
    secretAccessKey: example-secret-value
trialPods:
  nodeSelector:
    pool: evals
  tolerations:
    - key: evals
      operator: Exists
      effect: NoSchedule
  runtimeClassName: gvisor
  priorityClassName: batch-low
  imagePullSecrets:
    - name: regcred
unitPrices:
  cpu: 0.031
  memory: 0.004
  ephemeral-storage: 0.00001
  nvidia.com/gpu: 2.5
operator:
  logLevel: debug
  workerLimit: 200
metrics:
  serviceMonitor:
    enabled: true
    labels:
      release: prometheus
"""

# What the operator may do, per (apiGroup, resource): the contract in the README's "RBAC".
NAMESPACED_RULES = {
    ("rollout.dev", "rolloutjobs"): {"get", "list", "watch", "create", "patch", "update", "delete"},
    ("rollout.dev", "rollouttrials"): {
        "get",
        "list",
        "watch",
        "create",
        "patch",
        "update",
        "delete",
    },
    ("rollout.dev", "rolloutimages"): {"get", "list", "watch", "create", "patch", "delete"},
    ("rollout.dev", "rolloutjobs/status"): {"get", "patch", "update"},
    ("rollout.dev", "rollouttrials/status"): {"get", "patch", "update"},
    ("rollout.dev", "rolloutimages/status"): {"get", "patch", "update"},
    ("rollout.dev", "rolloutjobs/finalizers"): {"update"},
    ("rollout.dev", "rollouttrials/finalizers"): {"update"},
    ("rollout.dev", "rolloutimages/finalizers"): {"update"},
    ("", "pods"): {"get", "list", "watch", "create", "delete"},
    ("", "events"): {"create", "patch"},
    # A job's NetworkPolicies are created once; its deletion takes them (owner references).
    ("networking.k8s.io", "networkpolicies"): {"create"},
}
CRD_RULES = {("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"}}
# kopf lists and watches namespaces also when it serves named ones (read-only, names only).
CLUSTER_READ_RULES = {**CRD_RULES, ("", "namespaces"): {"get", "list", "watch"}}
CLUSTER_RULES = {
    **NAMESPACED_RULES,
    **CLUSTER_READ_RULES,
    ("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "patch"},
}


# --- rendering ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """The chart's output for one set of values: every object (hooks included), by template,
    and NOTES.txt."""

    name: str
    objects: list[dict[str, Any]]
    templates: dict[str, list[dict[str, Any]]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        found = [
            obj
            for obj in self.of_kind(kind)
            if obj["metadata"]["name"] == name
            and (namespace is None or obj["metadata"].get("namespace") == namespace)
        ]
        assert len(found) == 1, f"{len(found)} {kind} named {name} in {namespace}"
        return found[0]

    @property
    def operator(self) -> dict[str, Any]:
        return self.one("Deployment", RELEASE, NAMESPACE)

    @property
    def operator_env(self) -> dict[str, str]:
        """The operator's literal env values as its process sees them (after the kubelet)."""
        container = self.operator["spec"]["template"]["spec"]["containers"][0]
        literal = [e for e in container["env"] if "value" in e]
        return container_env({"env": literal})


def render(values: dict[str, Any], name: str = "custom") -> Rendered:
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[dict[str, Any]] = []
    templates: dict[str, list[dict[str, Any]]] = {}
    notes = ""
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            notes = text
            continue
        docs = [doc for doc in yaml.safe_load_all(text) if doc]
        templates[template.removeprefix(f"{RELEASE}/")] = docs
        objects.extend(docs)
    return Rendered(name, objects, templates, notes)


def values_file(text: str) -> dict[str, Any]:
    """A values file as `helm -f` reads it."""
    return helm.values_from_yaml(text)


SCENARIOS: dict[str, str] = {
    "default": "",
    "quickstart": (CHART / "values-quickstart.yaml").read_text(),
    "namespaced": NAMESPACED_VALUES,
}


@functools.cache
def scenario(name: str) -> Rendered:
    return render(values_file(SCENARIOS[name]), name)


@pytest.fixture(params=sorted(SCENARIOS))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return scenario(request.param)


def pod_specs(rendered: Rendered) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every object that makes Pods."""
    for obj in rendered.objects:
        if obj["kind"] in POD_TEMPLATE_KINDS:
            yield f"{obj['kind']}/{obj['metadata']['name']}", obj["spec"]["template"]["spec"]
        elif obj["kind"] == "Pod":
            yield f"Pod/{obj['metadata']['name']}", obj["spec"]


def containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in obj["metadata"].get("annotations", {})


# --- schemas --------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_fits_the_kubernetes_schemas(rendered: Rendered, version: str) -> None:
    failures = []
    checked = 0
    for obj in rendered.objects:
        if obj["kind"] in KOPF_PEERING_KINDS | {SERVICE_MONITOR}:
            continue
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        try:
            kubernetes_validate.validate(obj, version, strict=True)
            checked += 1
        except kubernetes_validate.ValidationError as err:
            failures.append(f"{where}: {err}")
    assert failures == []
    assert checked >= 9  # CRDs, Deployment, Service, RBAC, ServiceAccounts at least


def test_kopf_peering_objects_fit_the_peering_crds(rendered: Rendered) -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in kopf_crds()}
    peerings = [obj for obj in rendered.objects if obj["kind"] in KOPF_PEERING_KINDS]
    assert peerings
    for obj in peerings:
        crd = crds[obj["kind"]]
        assert obj["apiVersion"] == f"{crd['spec']['group']}/v1"
        assert ("namespace" in obj["metadata"]) == (crd["spec"]["scope"] == "Namespaced")
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        validate_object(schema, obj, forbid_unknown=False)


def test_bad_kopf_peering_object_is_caught_by_its_schema() -> None:
    schema = kopf_crds()[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    with pytest.raises(JsonSchemaValidationError):
        validate_object(schema, {"status": "not an object"}, forbid_unknown=False)


def test_helm_lint_finds_nothing_wrong() -> None:
    for name, text in SCENARIOS.items():
        report = helm.lint(CHART, values_file(text), strict=True, namespace=NAMESPACE)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert (name, problems, report["errors"]) == (name, [], [])


# --- RBAC -----------------------------------------------------------------------------------------


def rules_of(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs, merged over the role's rules."""
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert not rule.get("resourceNames"), rule
        assert not rule.get("nonResourceURLs"), rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def test_no_role_has_a_wildcard(rendered: Rendered) -> None:
    roles = rendered.of_kind("Role") + rendered.of_kind("ClusterRole")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for key in ("verbs", "resources", "apiGroups"):
                assert not any("*" in item for item in rule.get(key, [])), (role, rule)


def test_watching_the_cluster_grants_the_contract_cluster_wide() -> None:
    rendered = scenario("default")
    assert rendered.of_kind("Role") == []
    assert rendered.of_kind("RoleBinding") == []
    role = rendered.one("ClusterRole", RELEASE)
    assert rules_of(role) == CLUSTER_RULES
    binding = rendered.one("ClusterRoleBinding", RELEASE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": RELEASE,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
    ]
    assert rendered.operator["spec"]["template"]["spec"]["serviceAccountName"] == RELEASE


def test_watching_namespaces_grants_roles_there_and_only_reads_cluster_wide() -> None:
    rendered = scenario("namespaced")
    cluster_roles = rendered.of_kind("ClusterRole")
    assert [r["metadata"]["name"] for r in cluster_roles] == [f"{RELEASE}-crds"]
    assert rules_of(cluster_roles[0]) == CLUSTER_READ_RULES
    for role in cluster_roles:
        granted = {resource for _, resource in rules_of(role)}
        assert not granted & {"pods", "rolloutjobs", "rollouttrials", "secrets"}
    expected = {**NAMESPACED_RULES, ("kopf.dev", "kopfpeerings"): {"get", "list", "watch", "patch"}}
    roles = rendered.of_kind("Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["evals", "rl"]
    for role in roles:
        assert rules_of(role) == expected
        binding = rendered.one("RoleBinding", RELEASE, role["metadata"]["namespace"])
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
        ]


def test_without_peering_there_is_no_peering_access_or_object() -> None:
    rendered = render({"operator": {"peering": {"enabled": False}}})
    assert rendered.operator_env["ROLLOUT_PEERING"] == ""
    assert [o for o in rendered.objects if o["kind"] in KOPF_PEERING_KINDS] == []
    granted = rules_of(rendered.one("ClusterRole", RELEASE))
    assert ("kopf.dev", "clusterkopfpeerings") not in granted
    assert granted == {k: v for k, v in CLUSTER_RULES.items() if k[0] != "kopf.dev"}


def test_no_access_to_secrets_anywhere(rendered: Rendered) -> None:
    for role in rendered.of_kind("Role") + rendered.of_kind("ClusterRole"):
        assert ("", "secrets") not in rules_of(role)


# --- Pod Security ---------------------------------------------------------------------------------


def test_every_container_runs_restricted(rendered: Rendered) -> None:
    checked = []
    for where, spec in pod_specs(rendered):
        pod = spec.get("securityContext", {})
        assert pod.get("runAsNonRoot") is True, where
        assert pod.get("seccompProfile") == {"type": "RuntimeDefault"}, where
        assert not spec.get("hostNetwork"), where
        assert not spec.get("hostPID"), where
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], where
        for container in containers(spec):
            context = container["securityContext"]
            name = f"{where}/{container['name']}"
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["runAsNonRoot"] is True, name
            assert context.get("runAsUser", pod.get("runAsUser")) == 65532, name
            assert context.get("seccompProfile", pod["seccompProfile"]) == {
                "type": "RuntimeDefault"
            }, name
            assert not context.get("privileged"), name
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{name}: a read-only root needs a writable /tmp"
            checked.append(name)
    expected = {f"Deployment/{RELEASE}/operator"}
    if rendered.name == "quickstart":
        expected |= {f"Deployment/{RELEASE}-minio/minio", f"Job/{RELEASE}-bucket/create-bucket"}
    assert set(checked) == expected


def test_operator_probes_and_ports() -> None:
    rendered = scenario("default")
    spec = rendered.operator["spec"]["template"]["spec"]
    container = spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}} in spec["volumes"]
    assert rendered.operator["spec"]["strategy"] == {"type": "Recreate"}


# --- the trial ServiceAccount ---------------------------------------------------------------------


def test_trial_service_account_has_no_token_and_no_bindings(rendered: Rendered) -> None:
    name = f"{RELEASE}-trial"
    accounts = [a for a in rendered.of_kind("ServiceAccount") if a["metadata"]["name"] == name]
    expected_namespaces = {
        "default": [NAMESPACE],
        "quickstart": [NAMESPACE],
        "namespaced": sorted([NAMESPACE, "evals", "rl", "scratch"]),
    }
    namespaces = sorted(a["metadata"]["namespace"] for a in accounts)
    assert namespaces == expected_namespaces[rendered.name]
    for account in accounts:
        assert account["automountServiceAccountToken"] is False
    for binding in rendered.of_kind("RoleBinding") + rendered.of_kind("ClusterRoleBinding"):
        for subject in binding["subjects"]:
            assert subject["name"] != name, binding
    assert rendered.operator_env["ROLLOUT_TRIAL_SERVICE_ACCOUNT"] == name
    # The operator's own account is a different one, and the one that is bound.
    assert rendered.operator["spec"]["template"]["spec"]["serviceAccountName"] != name


def test_trial_service_account_can_be_left_to_each_namespace() -> None:
    rendered = render({"trialPods": {"serviceAccount": {"create": False}}})
    names = [a["metadata"]["name"] for a in rendered.of_kind("ServiceAccount")]
    assert names == [RELEASE]
    assert "ROLLOUT_TRIAL_SERVICE_ACCOUNT" not in rendered.operator_env


# --- CRDs -----------------------------------------------------------------------------------------


def generated_crds() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted((REPO / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        found[crd["metadata"]["name"]] = crd
    assert set(found) == {
        "rolloutjobs.rollout.dev",
        "rollouttrials.rollout.dev",
        "rolloutimages.rollout.dev",
    }
    return found


def kopf_crds() -> list[dict[str, Any]]:
    return [
        yaml.safe_load(p.read_text()) for p in sorted((CHART / "files" / "kopf").glob("*.yaml"))
    ]


def without_keep(crd: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(crd))
    annotations = copy["metadata"].pop("annotations")
    assert annotations.pop("helm.sh/resource-policy") == "keep"
    if annotations:
        copy["metadata"]["annotations"] = annotations
    return copy


def test_chart_crds_are_exactly_the_generated_ones(rendered: Rendered) -> None:
    crds = {c["metadata"]["name"]: c for c in rendered.of_kind("CustomResourceDefinition")}
    rollout = {name: without_keep(crd) for name, crd in crds.items() if "rollout.dev" in name}
    assert rollout == generated_crds()
    kopf = {name: without_keep(crd) for name, crd in crds.items() if "kopf.dev" in name}
    assert kopf == {crd["metadata"]["name"]: crd for crd in kopf_crds()}
    assert sorted(kopf) == ["clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"]
    assert not any(is_hook(crd) for crd in crds.values())


def test_chart_copy_of_the_crds_is_up_to_date() -> None:
    assert stale_crds(CHART / "files" / "crds") == []


def test_crd_generator_writes_and_checks_the_chart_copy(tmp_path: Path) -> None:
    crds, chart_copy = tmp_path / "crds", tmp_path / "chart-crds"

    def crd_command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rollout.api.crd", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    written = crd_command("--write", "--dir", str(crds), "--chart-dir", str(chart_copy))
    assert written.returncode == 0, written.stderr
    assert sorted(p.name for p in chart_copy.iterdir()) == sorted(p.name for p in crds.iterdir())
    stale = chart_copy / "rollout.dev_rolloutjobs.yaml"
    stale.write_text(stale.read_text().replace("Attempts per", "Tries per"))
    checked = crd_command("--check", "--dir", str(crds), "--chart-dir", str(chart_copy))
    assert checked.returncode == 1
    assert f"{stale}: out of date" in checked.stderr
    assert str(crds) not in checked.stderr.replace(str(chart_copy), "")
    # Without --chart-dir, an explicit --dir checks that directory alone.
    assert crd_command("--check", "--dir", str(crds)).returncode == 0


def test_crds_can_be_left_out() -> None:
    rendered = render({"crds": {"enabled": False}})
    assert rendered.of_kind("CustomResourceDefinition") == []
    assert rendered.operator  # the rest is still there


# --- metrics, MinIO -------------------------------------------------------------------------------


def test_service_monitor_only_with_its_flag() -> None:
    assert scenario("default").of_kind(SERVICE_MONITOR) == []
    assert scenario("quickstart").of_kind(SERVICE_MONITOR) == []
    rendered = scenario("namespaced")
    monitor = rendered.one(SERVICE_MONITOR, RELEASE, NAMESPACE)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    service = rendered.one("Service", f"{RELEASE}-metrics", NAMESPACE)
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
    pod_labels = rendered.operator["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_metrics_service_selects_only_the_operator() -> None:
    rendered = scenario("quickstart")
    selector = rendered.one("Service", f"{RELEASE}-metrics")["spec"]["selector"]
    minio_labels = rendered.one("Deployment", f"{RELEASE}-minio")["spec"]["template"]["metadata"][
        "labels"
    ]
    assert not selector.items() <= minio_labels.items()


def minio_objects(rendered: Rendered) -> list[dict[str, Any]]:
    return [
        obj
        for obj in rendered.objects
        if obj["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        in ("minio", "minio-bucket")
    ]


def test_minio_only_when_enabled() -> None:
    assert minio_objects(scenario("default")) == []
    assert minio_objects(scenario("namespaced")) == []
    assert scenario("default").of_kind("Job") == []
    rendered = scenario("quickstart")
    kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in minio_objects(rendered))
    assert kinds == [
        f"Deployment/{RELEASE}-minio",
        f"Job/{RELEASE}-bucket",
        f"Service/{RELEASE}-minio",
    ]


def test_minio_is_the_default_storage_in_the_quickstart() -> None:
    rendered = scenario("quickstart")
    env = rendered.operator_env
    service = rendered.one("Service", f"{RELEASE}-minio", NAMESPACE)
    port = service["spec"]["ports"][0]["port"]
    assert env["ROLLOUT_STORAGE_ENDPOINT"] == f"http://{RELEASE}-minio.{NAMESPACE}.svc:{port}"
    assert env["ROLLOUT_STORAGE_PATH_STYLE"] == "true"
    assert env["ROLLOUT_STORAGE_BUCKET"] == "rollout"
    secret_name = env["ROLLOUT_STORAGE_CREDENTIALS_SECRET"]
    secret = rendered.one("Secret", secret_name, NAMESPACE)
    assert set(secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    minio = rendered.one("Deployment", f"{RELEASE}-minio")["spec"]["template"]["spec"]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in minio["containers"][0]["env"]
        if "valueFrom" in e
    }
    assert refs == {
        "MINIO_ROOT_USER": {"name": secret_name, "key": "AWS_ACCESS_KEY_ID"},
        "MINIO_ROOT_PASSWORD": {"name": secret_name, "key": "AWS_SECRET_ACCESS_KEY"},
    }
    job = rendered.one("Job", f"{RELEASE}-bucket")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
    assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    job_env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert job_env["BUCKET"]["value"] == "rollout"
    assert job_env["MINIO_HOST"]["value"] == f"{RELEASE}-minio.{NAMESPACE}.svc:{port}"
    assert job_env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == secret_name


def test_generated_credentials_are_one_pair_in_every_namespace() -> None:
    rendered = render({"minio": {"enabled": True}, "watchNamespaces": ["evals", "rl"]})
    secrets = rendered.of_kind("Secret")
    assert sorted(s["metadata"]["namespace"] for s in secrets) == sorted([NAMESPACE, "evals", "rl"])
    assert len({json.dumps(s["data"], sort_keys=True) for s in secrets}) == 1
    # Generated, not a fixed default: another install gets another pair.
    other = render({"minio": {"enabled": True}}).of_kind("Secret")[0]["data"]
    assert other["AWS_ACCESS_KEY_ID"] != secrets[0]["data"]["AWS_ACCESS_KEY_ID"]
    assert other["AWS_SECRET_ACCESS_KEY"] != secrets[0]["data"]["AWS_SECRET_ACCESS_KEY"]


def test_existing_secret_is_used_and_none_is_made() -> None:
    rendered = render(
        {"minio": {"enabled": True}, "storage": {"credentials": {"existingSecret": "s3-creds"}}}
    )
    assert rendered.of_kind("Secret") == []
    assert rendered.operator_env["ROLLOUT_STORAGE_CREDENTIALS_SECRET"] == "s3-creds"
    volumes = rendered.operator["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "storage-credentials",
        "secret": {"secretName": "s3-creds", "defaultMode": 0o440},
    } in volumes


def test_no_credentials_means_the_ambient_chain() -> None:
    env = scenario("default").operator_env
    assert "ROLLOUT_STORAGE_CREDENTIALS_SECRET" not in env
    assert "ROLLOUT_STORAGE_CREDENTIALS_DIR" not in env
    assert scenario("default").of_kind("Secret") == []


# --- the operator's environment contract ----------------------------------------------------------


def test_operator_environment_watching_the_cluster() -> None:
    env = scenario("default").operator_env
    assert env == {
        "ROLLOUT_NAMESPACES": "",
        "ROLLOUT_CLUSTERWIDE_PEERING": "true",
        "ROLLOUT_PEERING": "rollout-operator",
        "ROLLOUT_RUNNER_IMAGE": "rollout-runner:0.1.0",
        "ROLLOUT_RUNNER_IMAGE_PULL_POLICY": "IfNotPresent",
        "ROLLOUT_STORAGE_BUCKET": "rollout",
        "ROLLOUT_STORAGE_PREFIX": "",
        "ROLLOUT_STORAGE_ENDPOINT": "",
        "ROLLOUT_STORAGE_REGION": "us-east-1",
        "ROLLOUT_STORAGE_PATH_STYLE": "false",
        "ROLLOUT_TRIAL_SERVICE_ACCOUNT": f"{RELEASE}-trial",
        "ROLLOUT_DEFAULT_POD_OVERRIDES": "{}",
        "ROLLOUT_UNIT_PRICES": "{}",
        "ROLLOUT_IMAGE_REGISTRY": "",
        "ROLLOUT_IMAGE_REPOSITORY": "rollout-env",
        "ROLLOUT_IMAGE_PULL_REGISTRY": "",
        "ROLLOUT_IMAGE_REGISTRY_PLAIN_HTTP": "false",
        "ROLLOUT_IMAGE_PUSH_SECRET": "",
        "ROLLOUT_IMAGE_PULL_SECRET": "",
        "ROLLOUT_BUILDER": "buildkit",
        "ROLLOUT_BUILDER_IMAGE": "",
        "ROLLOUT_BUILD_PLATFORM": "linux/amd64",
        "ROLLOUT_METRICS_PORT": "9090",
        "ROLLOUT_HEALTH_PORT": "8080",
        "ROLLOUT_WORKER_LIMIT": "200",
        "ROLLOUT_LOG_LEVEL": "info",
    }


def test_the_operator_runs_its_own_command_with_its_pod_name_as_identity(
    rendered: Rendered,
) -> None:
    container = rendered.operator["spec"]["template"]["spec"]["containers"][0]
    # Not the image's entrypoint: an image with a CMD of its own still runs the operator.
    assert container["command"] == ["rollout-operator"]
    assert "args" not in container
    pod_name = next(e for e in container["env"] if e["name"] == "POD_NAME")
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    dockerfile = (REPO / "operator" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["rollout-operator"]' in dockerfile


def test_values_with_dollars_reach_the_operator_byte_for_byte() -> None:
    """The kubelet expands `$(NAME)` and `$$` in env values: the chart doubles every `$`."""
    prefix, endpoint = "team-$(HOSTNAME)-$$", "http://s3.example.test/$(X)"
    env = render({"storage": {"bucket": "b", "prefix": prefix, "endpoint": endpoint}}).operator_env
    assert (env["ROLLOUT_STORAGE_PREFIX"], env["ROLLOUT_STORAGE_ENDPOINT"]) == (prefix, endpoint)


def test_no_script_of_the_chart_is_rewritten_by_the_kubelet(rendered: Rendered) -> None:
    for where, pod_spec in pod_specs(rendered):
        for container in containers(pod_spec):
            env = container_env({"env": [e for e in container.get("env", []) if "value" in e]})
            for item in [*container.get("command", []), *container.get("args", [])]:
                assert expand(item, env) == item, f"{where} {container['name']}: {item!r}"


def test_operator_environment_watching_namespaces() -> None:
    rendered = scenario("namespaced")
    env = rendered.operator_env
    assert env["ROLLOUT_NAMESPACES"] == "evals,rl"
    assert env["ROLLOUT_CLUSTERWIDE_PEERING"] == "false"
    assert env["ROLLOUT_STORAGE_BUCKET"] == "eval-results"
    assert env["ROLLOUT_STORAGE_PREFIX"] == "team-a"
    assert env["ROLLOUT_STORAGE_ENDPOINT"] == "https://s3.example.test"
    assert env["ROLLOUT_STORAGE_REGION"] == "eu-west-1"
    assert env["ROLLOUT_LOG_LEVEL"] == "debug"
    assert env["ROLLOUT_WORKER_LIMIT"] == "200"
    # Credentials: a Secret in every namespace where trials may run, mounted into the operator
    # where ROLLOUT_STORAGE_CREDENTIALS_DIR says.
    secret_name = env["ROLLOUT_STORAGE_CREDENTIALS_SECRET"]
    secrets = [s for s in rendered.of_kind("Secret") if s["metadata"]["name"] == secret_name]
    assert sorted(s["metadata"]["namespace"] for s in secrets) == sorted(
        [NAMESPACE, "evals", "rl", "scratch"]
    )
    assert secrets[0]["data"]["AWS_ACCESS_KEY_ID"] == "QUtJQUVYQU1QTEVLRVk="  # AKIAEXAMPLEKEY
    spec = rendered.operator["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mount = mounts["storage-credentials"]
    assert mount["mountPath"] == env["ROLLOUT_STORAGE_CREDENTIALS_DIR"]
    assert mount["readOnly"] is True
    assert volumes["storage-credentials"]["secret"]["secretName"] == secret_name
    # Peering objects: one KopfPeering per watched namespace.
    peerings = rendered.of_kind("KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["evals", "rl"]
    assert {p["metadata"]["name"] for p in peerings} == {env["ROLLOUT_PEERING"]}
    assert all(is_hook(p) for p in peerings)
    assert rendered.of_kind("ClusterKopfPeering") == []


def test_the_operator_reads_the_environment_the_chart_gives_it(
    rendered: Rendered, tmp_path: Path
) -> None:
    # The real parser of the operator's settings takes what the chart renders. The credentials
    # Secret is mounted where ROLLOUT_STORAGE_CREDENTIALS_DIR says; here, a directory with the
    # chart's Secret's keys stands in for it.
    env = dict(rendered.operator_env)
    secret_name = env.get("ROLLOUT_STORAGE_CREDENTIALS_SECRET")
    if secret_name:
        secret = rendered.one("Secret", secret_name, NAMESPACE)
        for key, value in secret["data"].items():
            (tmp_path / key).write_bytes(base64.b64decode(value))
        env["ROLLOUT_STORAGE_CREDENTIALS_DIR"] = str(tmp_path)
    config = OperatorConfig.from_env(env)
    assert config.namespaces == {"namespaced": ["evals", "rl"]}.get(rendered.name, [])
    assert config.clusterwide_peering is (rendered.name != "namespaced")
    assert config.peering_name == "rollout-operator"
    assert config.runner_image == env["ROLLOUT_RUNNER_IMAGE"]
    assert config.trial_service_account == f"{RELEASE}-trial"
    assert config.storage is not None
    assert config.storage.bucket == env["ROLLOUT_STORAGE_BUCKET"]
    assert config.storage.endpoint == (env["ROLLOUT_STORAGE_ENDPOINT"] or None)
    assert config.storage.path_style is (rendered.name == "quickstart")
    assert (config.storage_credentials is not None) is bool(secret_name)
    assert config.storage_credentials_secret == secret_name
    if rendered.name == "namespaced":
        assert config.default_pod_overrides is not None
        assert config.default_pod_overrides.runtime_class_name == "gvisor"
        assert config.log_level == "debug"
        assert config.worker_limit == 200
        assert config.unit_prices == UnitPrices(
            per_hour={
                "cpu": 0.031,
                "memory": 0.004,
                "ephemeral-storage": 0.00001,
                "nvidia.com/gpu": 2.5,
            }
        )
    else:
        assert config.default_pod_overrides is None
        assert config.unit_prices is None  # no prices unless given: every cost is null
    builds = config.builds
    if rendered.name == "quickstart":
        # kind: build Pods push to the registry container, nodes pull through localhost:5001.
        assert builds is not None
        assert (builds.registry, builds.pull_registry) == ("kind-registry:5000", "localhost:5001")
        assert builds.plain_http is True
        assert builds.builder.type == "buildkit"
    else:
        assert builds is None  # no registry, no builds: trials that need one say so


def test_default_pod_overrides_are_what_a_rolloutjob_spec_pod_takes() -> None:
    raw = scenario("namespaced").operator_env["ROLLOUT_DEFAULT_POD_OVERRIDES"]
    overrides = PodOverrides.model_validate(json.loads(raw))
    assert overrides == PodOverrides.model_validate(
        {
            "nodeSelector": {"pool": "evals"},
            "tolerations": [{"key": "evals", "operator": "Exists", "effect": "NoSchedule"}],
            "runtimeClassName": "gvisor",
            "priorityClassName": "batch-low",
            "imagePullSecrets": [{"name": "regcred"}],
        }
    )
    dumped = overrides.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    assert json.loads(raw) == dumped


def test_cluster_wide_peering_object() -> None:
    rendered = scenario("default")
    peering = rendered.one("ClusterKopfPeering", "rollout-operator")
    assert peering["apiVersion"] == "kopf.dev/v1"
    assert peering["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert rendered.of_kind("KopfPeering") == []


def test_every_image_comes_from_values_and_is_never_forced_to_pull() -> None:
    rendered = render(
        {
            "minio": {
                "enabled": True,
                "image": {"repository": "registry.example.test/minio", "tag": "m1"},
                "mcImage": {"repository": "registry.example.test/mc", "tag": "c1"},
            },
            "image": {"repository": "registry.example.test/operator", "tag": "o1"},
            "runner": {
                "image": {"repository": "registry.example.test/runner", "tag": "r1"},
                "rowsImage": "registry.example.test/python:3.12-slim",
            },
        }
    )
    images = set()
    for _, spec in pod_specs(rendered):
        for container in containers(spec):
            images.add(container["image"])
            assert container["imagePullPolicy"] == "IfNotPresent"
    assert images == {
        "registry.example.test/operator:o1",
        "registry.example.test/minio:m1",
        "registry.example.test/mc:c1",
    }
    env = rendered.operator_env
    assert env["ROLLOUT_RUNNER_IMAGE"] == "registry.example.test/runner:r1"
    assert env["ROLLOUT_RUNNER_IMAGE_PULL_POLICY"] == "IfNotPresent"
    assert env["ROLLOUT_ROWS_IMAGE"] == "registry.example.test/python:3.12-slim"
    # The operator reads the variable the chart sets (the mounted credentials aside).
    read = {k: v for k, v in env.items() if k != "ROLLOUT_STORAGE_CREDENTIALS_DIR"}
    assert OperatorConfig.from_env(read).rows_image == "registry.example.test/python:3.12-slim"


def test_image_tags_default_to_the_app_version() -> None:
    with helm.Chart.load(CHART) as chart:
        app_version = chart.metadata["appVersion"]
    rendered = scenario("default")
    container = rendered.operator["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"rollout-operator:{app_version}"


# --- values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"watchNamespaces": "evals"}, "watchNamespaces must be a list of namespace names"),
        ({"watchNamespaces": ["Evals_1"]}, "watchNamespaces: Evals_1 is not a namespace name"),
        ({"trialNamespaces": ["a/b"]}, "trialNamespaces: a/b is not a namespace name"),
        ({"operator": {"logLevel": "verbose"}}, "operator.logLevel: verbose is not one of"),
        (
            {"storage": {"credentials": {"accessKeyId": "only-half"}}},
            "set both accessKeyId and secretAccessKey",
        ),
        ({"storage": {"bucket": ""}}, "storage.bucket is required"),
        (
            {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
            "metrics.serviceMonitor.enabled needs metrics.service.enabled",
        ),
        ({"metrics": {"port": 8080}}, "metrics.port and operator.healthPort must differ"),
        ({"unitPrices": ["cpu", 0.03]}, "unitPrices must be a map of resource name to price"),
        ({"unitPrices": {"cpu": -1}}, "unitPrices.cpu: -1 (float64) is not a price"),
        ({"unitPrices": {"cpu": "0.03"}}, "unitPrices.cpu: 0.03 (string) is not a price"),
        ({"images": {"builder": {"type": "kaniko"}}}, "images.builder.type: kaniko is not one of"),
        (
            {"images": {"registry": "https://ghcr.io/org"}},
            "images.registry: https://ghcr.io/org is not host[:port]",
        ),
    ],
)
def test_bad_values_fail_with_a_message(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError) as caught:
        render(values)
    assert message in str(caught.value)


KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][A-Za-z0-9_]*):(?P<rest>.*)$")


def undocumented_values(text: str) -> list[str]:
    """Keys of a values file without documentation. As helm-docs reads it, a value is documented
    by a comment block right above it whose first line starts with `# --`; that covers the whole
    value (e.g. the requests and limits of `resources`). A key holding other keys and no such
    comment is a section: each of its keys must be documented in turn."""
    lines = text.splitlines()
    missing = []
    enclosing: list[tuple[int, bool]] = []  # (indent, documented) of the keys around this one
    for number, line in enumerate(lines):
        match = KEY_LINE.match(line)
        if match is None:
            continue
        indent = len(match["indent"])
        while enclosing and enclosing[-1][0] >= indent:
            enclosing.pop()
        block = []
        for above in reversed(lines[:number]):
            if not above.strip().startswith("#"):
                break
            block.insert(0, above.strip())
        documented = bool(block) and block[0].startswith("# --")
        covered = documented or any(flag for _, flag in enclosing)
        following = [rest for rest in lines[number + 1 :] if rest.strip()]
        is_section = (
            match["rest"].strip() == ""
            and bool(following)
            and len(following[0]) - len(following[0].lstrip()) > indent
        )
        if not (covered or is_section):
            missing.append(f"line {number + 1}: {match['key']}")
        enclosing.append((indent, covered))
    return missing


def test_every_value_is_documented() -> None:
    assert undocumented_values((CHART / "values.yaml").read_text()) == []
    # The checker itself: a section's keys each need a `# --` comment; a documented value covers
    # its nested keys; a plain comment documents nothing.
    assert undocumented_values("section:\n  # -- doc\n  a: 1\n  b: 2\n") == ["line 4: b"]
    assert undocumented_values("# -- doc\nresources:\n  requests:\n    cpu: 1\n") == []
    assert undocumented_values("# a section\ns:\n  # not a doc\n  a: 1\n") == ["line 4: a"]
    assert undocumented_values("# -- first line\n# more\na: 1\n") == []


def test_every_value_in_values_yaml_is_used_by_a_template() -> None:
    # A documented value that no template reads would be a lie to the user.
    templates = "\n".join(p.read_text() for p in (CHART / "templates").iterdir())

    def leaves(node: Any, path: str) -> Iterator[str]:
        if isinstance(node, dict) and node and path not in FREE_FORM:
            for key, value in node.items():
                yield from leaves(value, f"{path}.{key}" if path else key)
        else:
            yield path

    with helm.Chart.load(CHART) as chart:
        values = chart.values
    unused = []
    for path in leaves(values, ""):
        parent, _, last = path.rpartition(".")
        if f".Values.{path}" in templates:
            continue
        # Read through a `with`/variable of the parent (e.g. $c.accessKeyId, $t.nodeSelector).
        if f".Values.{parent}" in templates and re.search(rf"\$\w+\.{last}\b", templates):
            continue
        unused.append(path)
    assert unused == []


FREE_FORM = {"operator.resources", "minio.resources", "bridge.resources", "bridge.limits"}


# --- NOTES.txt ------------------------------------------------------------------------------------


def test_notes_say_what_to_do_next() -> None:
    notes = scenario("quickstart").notes
    assert "rollout run examples/job.yaml --namespace rollout-system" in notes
    assert "kubectl --namespace rollout-system apply -f examples/rolloutjob.yaml" in notes
    assert "s3://rollout/jobs/<job>/result.json" in notes
    assert "port-forward service/rollout-operator-minio 9000:9000" in notes
    assert "export ROLLOUT_STORAGE_ENDPOINT=http://127.0.0.1:9000" in notes
    cluster_endpoint = scenario("quickstart").operator_env["ROLLOUT_STORAGE_ENDPOINT"]
    assert f"export ROLLOUT_STORAGE_CLUSTER_ENDPOINT={cluster_endpoint} " in notes
    assert "export ROLLOUT_STORAGE_CREDENTIALS_SECRET=rollout-operator-storage " in notes
    assert "/metrics" in notes
    namespaced = scenario("namespaced").notes
    assert "watches the namespaces evals, rl" in namespaced
    assert "rollout run examples/job.yaml --namespace evals" in namespaced
    assert "s3://eval-results/team-a/jobs/<job>/result.json" in namespaced
    assert "A ServiceMonitor named rollout-operator" in namespaced


def test_builds_push_with_the_secret_the_operator_also_looks_images_up_with(
    tmp_path: Path,
) -> None:
    rendered = render(
        {
            "images": {
                "registry": "registry.example.com",
                "repository": "evals/rollout-env",
                "pushSecret": "regcred",
                "pullSecret": "pullcred",
                "builder": {"type": "buildah"},
            }
        }
    )
    env = rendered.operator_env
    spec = rendered.operator["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    mount = mounts["registry-credentials"]
    assert mount["readOnly"] is True
    assert env["ROLLOUT_IMAGE_REGISTRY_CONFIG"] == f"{mount['mountPath']}/.dockerconfigjson"
    secret = volumes["registry-credentials"]["secret"]
    assert secret["secretName"] == "regcred"
    assert secret["items"] == [{"key": ".dockerconfigjson", "path": ".dockerconfigjson"}]
    # The operator's own parser takes what the chart gives it (the file stands in for the mount).
    config_file = tmp_path / ".dockerconfigjson"
    config_file.write_text('{"auths": {"registry.example.com": {"auth": "dTpw"}}}')
    config = OperatorConfig.from_env({**env, "ROLLOUT_IMAGE_REGISTRY_CONFIG": str(config_file)})
    builds = config.builds
    assert builds is not None
    assert (builds.registry, builds.repository) == ("registry.example.com", "evals/rollout-env")
    assert (builds.push_secret, builds.pull_secret) == ("regcred", "pullcred")
    assert builds.builder.type == "buildah"
    assert config.image_registry_config == str(config_file)
    # Without a push Secret, nothing is mounted and look-ups are anonymous.
    plain = render({"images": {"registry": "registry.example.com"}})
    assert "ROLLOUT_IMAGE_REGISTRY_CONFIG" not in plain.operator_env
    plain_spec = plain.operator["spec"]["template"]["spec"]
    assert "registry-credentials" not in {v["name"] for v in plain_spec["volumes"]}
