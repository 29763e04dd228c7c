"""The chart's bridge controller (`bridge.*`), rendered by Helm's own engine as test_chart.py
renders the rest: nothing of it unless `bridge.enabled`; then one Deployment of one stable
identity that never runs twice at once, the operator's image and Pod Security, the operator's
storage settings, the remote Docker TLS files only when asked for, and RBAC of its own that grants
exactly the bridge's contract, cluster-wide or per watched namespace as the operator's does."""

from __future__ import annotations

import base64
import functools
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
from test_chart import (
    CHART,
    CLUSTER_RULES,
    KOPF_PEERING_KINDS,
    KUBERNETES_VERSIONS,
    NAMESPACE,
    RELEASE,
    SCENARIOS,
    SERVICE_MONITOR,
    Rendered,
    render,
    rules_of,
    values_file,
)

from kubeharness.kubelet import container_env
from rollout.bridge.controller import STOP_GRACE_SEC
from rollout.bridge.settings import from_env

BRIDGE = f"{RELEASE}-bridge"
COMPONENT = "app.kubernetes.io/component"
TLS_DIR = "/etc/rollout/docker-tls"
ENABLED = {"bridge": {"enabled": True}}


def rule(group: str, resource: str, *verbs: str) -> dict[str, list[str]]:
    return {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}


# The bridge's rules, in order, where it serves trials (the contract: claim and run RolloutTrials,
# write their status, post kopf's events, resolve agent env secretKeyRefs by name).
BRIDGE_RULES = [
    rule("rollout.dev", "rollouttrials", "get", "list", "watch", "patch"),
    rule("rollout.dev", "rollouttrials/status", "get", "patch"),
    rule("", "events", "create", "patch"),
    rule("", "secrets", "get"),
]
# kopf follows CRDs (always) and namespaces (only when it serves a list of them).
CRD_RULE = rule("apiextensions.k8s.io", "customresourcedefinitions", "list", "watch")
NAMESPACE_RULE = rule("", "namespaces", "list", "watch")


def with_bridge(text: str, bridge: dict[str, Any] | None = None) -> dict[str, Any]:
    """A scenario's values file with the bridge on (and `bridge` values besides)."""
    values = values_file(text)
    values["bridge"] = {"enabled": True, **(bridge or {})}
    return values


@functools.cache
def scenario(name: str) -> Rendered:
    """test_chart.py's scenario `name` with the bridge enabled."""
    return render(with_bridge(SCENARIOS[name]), name)


@pytest.fixture(params=sorted(SCENARIOS))
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return scenario(request.param)


def bridge_objects(rendered: Rendered) -> list[dict[str, Any]]:
    return [
        obj
        for obj in rendered.objects
        if obj["metadata"].get("labels", {}).get(COMPONENT) == "bridge"
        or "bridge" in obj["metadata"]["name"]
    ]


def deployment(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("Deployment", BRIDGE, NAMESPACE)


def pod_spec(rendered: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = deployment(rendered)["spec"]["template"]["spec"]
    return spec


def container(rendered: Rendered) -> dict[str, Any]:
    [bridge] = pod_spec(rendered)["containers"]
    assert bridge["name"] == "bridge"
    return bridge


def env(rendered: Rendered) -> dict[str, str]:
    """The bridge's environment as its process sees it (after the kubelet's expansion). Every
    variable is a literal: nothing of it comes from the Pod (its name, ...), which changes."""
    variables = container(rendered)["env"]
    assert [v for v in variables if set(v) != {"name", "value"}] == []
    return container_env({"env": variables})


def storage_env(variables: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in variables.items() if k.startswith("ROLLOUT_STORAGE_")}


# --- off by default ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_nothing_of_the_bridge_renders_unless_it_is_enabled(name: str) -> None:
    rendered = render(values_file(SCENARIOS[name]), name)
    assert bridge_objects(rendered) == []
    assert [t for t, docs in rendered.templates.items() if "bridge" in t and docs] == []
    # Disabled, its values are not even checked.
    off = render({**values_file(SCENARIOS[name]), "bridge": {"enabled": False, "limits": "x"}})
    assert bridge_objects(off) == []


def comparable(rendered: Rendered) -> list[dict[str, Any]]:
    """The objects, with generated credentials (new on every render) left out."""
    return [{**o, "data": None} if o["kind"] == "Secret" else o for o in rendered.objects]


def test_enabling_the_bridge_adds_its_objects_and_changes_nothing_else(rendered: Rendered) -> None:
    without = comparable(render(values_file(SCENARIOS[rendered.name]), rendered.name))
    added = [o for o in comparable(rendered) if o not in without]
    assert added == bridge_objects(rendered)
    assert [o for o in without if o not in comparable(rendered)] == []
    kinds = sorted(f"{o['kind']}/{o['metadata'].get('namespace', '')}" for o in added)
    if rendered.name == "namespaced":
        assert kinds == [
            "ClusterRole/",
            "ClusterRoleBinding/",
            f"Deployment/{NAMESPACE}",
            "Role/evals",
            "Role/rl",
            "RoleBinding/evals",
            "RoleBinding/rl",
            f"Service/{NAMESPACE}",  # its metrics
            f"ServiceAccount/{NAMESPACE}",
            f"ServiceMonitor/{NAMESPACE}",  # this scenario's metrics.serviceMonitor.enabled
        ]
    else:
        assert kinds == [
            "ClusterRole/",
            "ClusterRoleBinding/",
            f"Deployment/{NAMESPACE}",
            f"Service/{NAMESPACE}",
            f"ServiceAccount/{NAMESPACE}",
        ]


# --- the Deployment -----------------------------------------------------------------------------


def test_one_bridge_of_one_stable_identity_never_two_at_once() -> None:
    rendered = scenario("default")
    bridge = deployment(rendered)
    assert bridge["spec"]["replicas"] == 1
    assert bridge["spec"]["strategy"] == {"type": "Recreate"}
    variables = env(rendered)
    # The identity is the Deployment's name: the same for every Pod it ever makes.
    assert variables["ROLLOUT_BRIDGE_IDENTITY"] == BRIDGE
    assert container(rendered)["command"] == ["rollout-bridge"]
    assert "args" not in container(rendered)
    # Its Pods are told apart from the operator's by the Deployments' selectors.
    selector = bridge["spec"]["selector"]["matchLabels"]
    assert selector[COMPONENT] == "bridge"
    assert selector.items() <= bridge["spec"]["template"]["metadata"]["labels"].items()
    operator_labels = rendered.operator["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= operator_labels.items()
    assert not rendered.operator["spec"]["selector"]["matchLabels"].items() <= (
        bridge["spec"]["template"]["metadata"]["labels"].items()
    )
    # The metrics Service fronts the operator alone.
    service = rendered.one("Service", f"{RELEASE}-metrics", NAMESPACE)
    assert not service["spec"]["selector"].items() <= selector.items()


def test_the_identity_follows_the_release_name() -> None:
    rendered = render({**ENABLED, "fullnameOverride": "evals"})
    bridge = rendered.one("Deployment", "evals-bridge", NAMESPACE)
    [container] = bridge["spec"]["template"]["spec"]["containers"]
    assert container_env(container)["ROLLOUT_BRIDGE_IDENTITY"] == "evals-bridge"


def test_the_bridge_serves_the_operators_namespaces(rendered: Rendered) -> None:
    expected = {"namespaced": "evals,rl"}.get(rendered.name, "")
    assert env(rendered)["ROLLOUT_NAMESPACES"] == expected
    assert rendered.operator_env["ROLLOUT_NAMESPACES"] == expected


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (None, "docker=16"),  # the default
        ({"docker": 4}, "docker=4"),
        # A map of the user's merges into the default one, as Helm merges maps: docker keeps 16.
        ({"e2b": 32, "daytona": 1}, "daytona=1,docker=16,e2b=32"),
        # Helm's way to drop a default key: null.
        ({"docker": None, "e2b": 8}, "e2b=8"),
    ],
)
def test_limits_are_rendered_provider_by_provider(
    limits: dict[str, int | None] | None, expected: str
) -> None:
    values = with_bridge("", None if limits is None else {"limits": limits})
    assert env(render(values))["ROLLOUT_BRIDGE_LIMITS"] == expected


def test_limits_from_a_values_file() -> None:
    values = values_file("bridge:\n  enabled: true\n  limits:\n    docker: 64\n")
    assert env(render(values))["ROLLOUT_BRIDGE_LIMITS"] == "docker=64"


def test_health_port_probes_and_log_level() -> None:
    rendered = scenario("default")
    bridge = container(rendered)
    assert bridge["ports"] == [
        {"name": "health", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    operator = rendered.operator["spec"]["template"]["spec"]["containers"][0]
    for probe in ("livenessProbe", "readinessProbe"):
        assert bridge[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert bridge[probe] == operator[probe]
    variables = env(rendered)
    assert (variables["ROLLOUT_HEALTH_PORT"], variables["ROLLOUT_LOG_LEVEL"]) == ("8080", "info")
    other = render({"bridge": {"enabled": True, "healthPort": 8181, "logLevel": "debug"}})
    assert container(other)["ports"][0]["containerPort"] == 8181
    assert env(other)["ROLLOUT_HEALTH_PORT"] == "8181"
    assert env(other)["ROLLOUT_LOG_LEVEL"] == "debug"


def test_the_bridge_runs_restricted_as_the_operator_does(rendered: Rendered) -> None:
    spec = pod_spec(rendered)
    operator_spec = rendered.operator["spec"]["template"]["spec"]
    assert spec["securityContext"] == operator_spec["securityContext"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    context = container(rendered)["securityContext"]
    assert context == operator_spec["containers"][0]["securityContext"]
    assert context == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
    assert [v for v in spec["volumes"] if set(v) - {"name", "secret", "emptyDir"}] == []
    # A read-only root needs a writable /tmp: an emptyDir of bridge.tmpSizeLimit.
    assert {"name": "tmp", "mountPath": "/tmp"} in container(rendered)["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}} in spec["volumes"]
    assert spec["serviceAccountName"] == BRIDGE
    assert spec["automountServiceAccountToken"] is True


def test_the_bridge_uses_the_operators_storage_and_credentials(rendered: Rendered) -> None:
    # The same bucket, prefix, endpoint, region, path style and credentials as the operator: it
    # uploads each trial's files where the operator's trial Pods would. Not the Secret's name,
    # which the operator hands to trial Pods and the bridge makes none of.
    operator = storage_env(rendered.operator_env)
    operator.pop("ROLLOUT_STORAGE_CREDENTIALS_SECRET", None)
    assert storage_env(env(rendered)) == operator
    assert operator["ROLLOUT_STORAGE_BUCKET"]

    def credentials(spec: dict[str, Any]) -> tuple[Any, Any]:
        mounts = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] != "tmp"]
        volumes = [v for v in spec["volumes"] if v["name"] == "storage-credentials"]
        return [m for m in mounts if m["name"] == "storage-credentials"], volumes

    bridge_mounts, bridge_volumes = credentials(pod_spec(rendered))
    assert (bridge_mounts, bridge_volumes) == credentials(
        rendered.operator["spec"]["template"]["spec"]
    )
    if rendered.name == "default":  # the ambient chain: no Secret, nothing mounted
        assert bridge_mounts == bridge_volumes == []
        assert "ROLLOUT_STORAGE_CREDENTIALS_DIR" not in env(rendered)
    else:
        [mount] = bridge_mounts
        assert mount["mountPath"] == env(rendered)["ROLLOUT_STORAGE_CREDENTIALS_DIR"]
        assert mount["readOnly"] is True
        [volume] = bridge_volumes
        secret = rendered.one("Secret", volume["secret"]["secretName"], NAMESPACE)
        assert set(secret["data"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


def test_the_bridge_reads_the_environment_the_chart_gives_it(
    rendered: Rendered, tmp_path: Path
) -> None:
    # The bridge's own settings parser takes what the chart renders; a directory with the
    # chart's Secret's keys stands in for the mounted credentials.
    variables = env(rendered)
    if "ROLLOUT_STORAGE_CREDENTIALS_DIR" in variables:
        [volume] = [v for v in pod_spec(rendered)["volumes"] if v["name"] == "storage-credentials"]
        secret = rendered.one("Secret", volume["secret"]["secretName"], NAMESPACE)
        for key, value in secret["data"].items():
            (tmp_path / key).write_bytes(base64.b64decode(value))
        variables["ROLLOUT_STORAGE_CREDENTIALS_DIR"] = str(tmp_path)
    settings = from_env(variables)
    assert settings.identity == variables["ROLLOUT_BRIDGE_IDENTITY"]
    assert settings.limit("docker") == 16
    assert settings.storage is not None
    assert settings.storage.bucket == variables["ROLLOUT_STORAGE_BUCKET"]
    assert (settings.storage_credentials is None) == (rendered.name == "default")


def test_an_existing_storage_secret_is_mounted_too() -> None:
    rendered = render({**ENABLED, "storage": {"credentials": {"existingSecret": "s3-creds"}}})
    [volume] = [v for v in pod_spec(rendered)["volumes"] if v["name"] == "storage-credentials"]
    assert volume["secret"] == {"secretName": "s3-creds", "defaultMode": 0o440}


def test_no_docker_tls_unless_a_secret_is_named(rendered: Rendered) -> None:
    variables = env(rendered)
    assert not {"DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_HOST"} & set(variables)
    assert TLS_DIR not in {m["mountPath"] for m in container(rendered)["volumeMounts"]}
    assert "docker-tls" not in {v["name"] for v in pod_spec(rendered)["volumes"]}


def test_docker_tls_files_are_mounted_where_docker_py_looks() -> None:
    rendered = render(with_bridge("", {"docker": {"tlsSecret": "engine-tls"}}))
    variables = env(rendered)
    assert variables["DOCKER_TLS_VERIFY"] == "1"
    assert variables["DOCKER_CERT_PATH"] == TLS_DIR
    mounts = [m for m in container(rendered)["volumeMounts"] if m["mountPath"] == TLS_DIR]
    assert mounts == [{"name": "docker-tls", "mountPath": TLS_DIR, "readOnly": True}]
    [volume] = [v for v in pod_spec(rendered)["volumes"] if v["name"] == "docker-tls"]
    assert volume["secret"] == {
        "secretName": "engine-tls",
        "defaultMode": 0o440,  # the Pod's fsGroup reads them; nobody writes them
        "items": [{"key": f, "path": f} for f in ("ca.pem", "cert.pem", "key.pem")],
    }


def test_engines_to_sweep_at_start_reach_the_bridges_parser() -> None:
    assert "ROLLOUT_BRIDGE_DOCKER_HOSTS" not in env(render(ENABLED))
    hosts = ["tcp://engine-a:2376", "tcp://engine-b:2376"]
    variables = env(render(with_bridge("", {"docker": {"hosts": hosts}})))
    assert variables["ROLLOUT_BRIDGE_DOCKER_HOSTS"] == "tcp://engine-a:2376,tcp://engine-b:2376"
    assert from_env(variables).docker_hosts == hosts


def test_unit_prices_per_provider_reach_the_bridges_parser() -> None:
    assert "ROLLOUT_BRIDGE_UNIT_PRICES" not in env(render(ENABLED))
    prices = {"docker": {"cpu": 0.03}, "modal": {"cpu": 0.047, "nvidia.com/gpu": 3.95}}
    variables = env(render(with_bridge("", {"unitPrices": prices})))
    settings = from_env(variables)
    assert {p: u.per_hour for p, u in settings.unit_prices.items()} == prices


def test_cloud_credentials_come_from_the_named_secret_as_variables() -> None:
    assert "envFrom" not in container(render(ENABLED))
    named = container(render(with_bridge("", {"providerSecret": "cloud-keys"})))
    assert named["envFrom"] == [{"secretRef": {"name": "cloud-keys"}}]


def test_a_stopping_bridge_has_the_time_to_end_its_sandboxes() -> None:
    grace = pod_spec(render(ENABLED))["terminationGracePeriodSeconds"]
    assert grace > STOP_GRACE_SEC + 15  # kopf's own stop and the process's exit besides


def test_the_bridges_metrics_are_served_and_scraped_as_the_operators_are() -> None:
    rendered = render(ENABLED)
    variables = env(rendered)
    assert from_env(variables).metrics_port == int(variables["ROLLOUT_METRICS_PORT"])
    port = {p["name"]: p["containerPort"] for p in container(rendered)["ports"]}["metrics"]
    assert port == int(variables["ROLLOUT_METRICS_PORT"])
    [service] = [o for o in bridge_objects(rendered) if o["kind"] == "Service"]
    assert service["spec"]["selector"] == deployment(rendered)["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}
    ]
    monitored = render({**ENABLED, "metrics": {"serviceMonitor": {"enabled": True}}})
    monitors = [o for o in monitored.objects if o["kind"] == "ServiceMonitor"]
    selectors = [m["spec"]["selector"]["matchLabels"] for m in monitors]
    assert service["spec"]["selector"] in selectors  # the operator's and the bridge's
    assert len(monitors) == 2


def test_image_defaults_to_the_operators_and_can_be_its_own() -> None:
    with helm.Chart.load(CHART) as chart:
        app_version = chart.metadata["appVersion"]
    rendered = scenario("default")
    operator = rendered.operator["spec"]["template"]["spec"]["containers"][0]
    assert container(rendered)["image"] == operator["image"] == f"rollout-operator:{app_version}"
    assert container(rendered)["imagePullPolicy"] == "IfNotPresent"
    # The operator's image settings, whichever of them are set.
    operator_image = {"repository": "registry.example.test/operator", "tag": "o1"}
    moved = render({**ENABLED, "image": {**operator_image, "pullPolicy": "Always"}})
    assert container(moved)["image"] == "registry.example.test/operator:o1"
    assert container(moved)["imagePullPolicy"] == "Always"
    assert container(render({**ENABLED, "image": {"tag": "o2"}}))["image"] == "rollout-operator:o2"
    # The bridge's own, field by field.
    own = render(
        {
            "image": operator_image,
            "bridge": {
                "enabled": True,
                "image": {"repository": "registry.example.test/bridge", "pullPolicy": "Never"},
            },
        }
    )
    assert container(own)["image"] == "registry.example.test/bridge:o1"
    assert container(own)["imagePullPolicy"] == "Never"
    tagged = render({"bridge": {"enabled": True, "image": {"tag": "b1"}}})
    assert container(tagged)["image"] == "rollout-operator:b1"
    pulled = render({**ENABLED, "imagePullSecrets": [{"name": "regcred"}]})
    assert pod_spec(pulled)["imagePullSecrets"] == [{"name": "regcred"}]


def test_resources_and_scheduling_come_from_bridge_values() -> None:
    assert container(scenario("default"))["resources"] == {
        "requests": {"cpu": "200m", "memory": "512Mi"},
        "limits": {"memory": "2Gi"},
    }
    scheduling = {
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            }
        },
    }
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
    rendered = render(
        {"bridge": {"enabled": True, "resources": resources, "tmpSizeLimit": "8Gi", **scheduling}}
    )
    spec = pod_spec(rendered)
    assert {key: spec[key] for key in scheduling} == scheduling
    assert container(rendered)["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"memory": "4Gi"},
    }
    assert {"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}} in spec["volumes"]
    # None of it reaches the operator, nor the operator's to the bridge.
    operator_spec = rendered.operator["spec"]["template"]["spec"]
    assert not {"nodeSelector", "tolerations", "affinity"} & set(operator_spec)
    placed = render({**ENABLED, "operator": {"nodeSelector": {"pool": "system"}}})
    assert "nodeSelector" not in pod_spec(placed)


# --- the ServiceAccount and RBAC --------------------------------------------------------------


def test_the_bridge_has_its_own_service_account() -> None:
    rendered = render(
        with_bridge("", {"serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "r"}}})
    )
    account = rendered.one("ServiceAccount", BRIDGE, NAMESPACE)
    assert account["automountServiceAccountToken"] is True
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "r"}
    assert "annotations" not in scenario("default").one("ServiceAccount", BRIDGE)["metadata"]


def bindings_of(rendered: Rendered, account: str) -> list[dict[str, Any]]:
    return [
        binding
        for binding in rendered.of_kind("RoleBinding") + rendered.of_kind("ClusterRoleBinding")
        if any(s["name"] == account for s in binding["subjects"])
    ]


def test_cluster_wide_the_bridge_gets_exactly_its_rules_in_one_cluster_role() -> None:
    rendered = scenario("default")
    role = rendered.one("ClusterRole", BRIDGE)
    assert role["rules"] == [*BRIDGE_RULES, CRD_RULE]
    [binding] = bindings_of(rendered, BRIDGE)
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": BRIDGE,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": BRIDGE, "namespace": NAMESPACE}
    ]
    assert [r for r in rendered.of_kind("Role") if "bridge" in r["metadata"]["name"]] == []
    # The operator's RBAC is the same as without the bridge, and bound to the operator only.
    assert rules_of(rendered.one("ClusterRole", RELEASE)) == CLUSTER_RULES
    assert [b["metadata"]["name"] for b in bindings_of(rendered, RELEASE)] == [RELEASE]


def test_watching_namespaces_the_bridge_gets_roles_there_and_only_kopfs_reads_cluster_wide() -> (
    None
):
    rendered = scenario("namespaced")
    cluster_role = rendered.one("ClusterRole", f"{BRIDGE}-crds")
    assert cluster_role["rules"] == [CRD_RULE, NAMESPACE_RULE]
    roles = [r for r in rendered.of_kind("Role") if r["metadata"]["name"] == BRIDGE]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["evals", "rl"]
    for role in roles:
        assert role["rules"] == BRIDGE_RULES
    bindings = bindings_of(rendered, BRIDGE)
    assert sorted(
        (b["kind"], b["metadata"].get("namespace", ""), b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in bindings
    ) == [
        ("ClusterRoleBinding", "", "ClusterRole", f"{BRIDGE}-crds"),
        ("RoleBinding", "evals", "Role", BRIDGE),
        ("RoleBinding", "rl", "Role", BRIDGE),
    ]
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": BRIDGE, "namespace": NAMESPACE}
        ]
    # No Secret, trial or anything else of a namespace it does not serve.
    for role in rendered.of_kind("ClusterRole"):
        granted = {resource for _, resource in rules_of(role)}
        assert not granted & {"secrets", "rollouttrials", "pods", "events"}, role


def test_the_bridge_may_touch_nothing_but_trials_events_and_secrets(rendered: Rendered) -> None:
    granted: dict[tuple[str, str], set[str]] = {}
    for binding in bindings_of(rendered, BRIDGE):
        kind, name = binding["roleRef"]["kind"], binding["roleRef"]["name"]
        namespace = binding["metadata"].get("namespace")
        for (group, resource), verbs in rules_of(rendered.one(kind, name, namespace)).items():
            granted.setdefault((group, resource), set()).update(verbs)
    expected = {
        ("rollout.dev", "rollouttrials"): {"get", "list", "watch", "patch"},
        ("rollout.dev", "rollouttrials/status"): {"get", "patch"},
        ("", "events"): {"create", "patch"},
        ("", "secrets"): {"get"},
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    }
    if rendered.name == "namespaced":
        expected[("", "namespaces")] = {"list", "watch"}
    assert granted == expected


def test_without_rbac_create_the_bridge_has_no_roles() -> None:
    for values in ({}, {"watchNamespaces": ["evals"]}):
        rendered = render({**values, **ENABLED, "rbac": {"create": False}})
        assert bindings_of(rendered, BRIDGE) == []
        roles = rendered.of_kind("Role") + rendered.of_kind("ClusterRole")
        assert [r for r in roles if "bridge" in r["metadata"]["name"]] == []
        assert deployment(rendered)  # the bridge itself is still there
        rendered.one("ServiceAccount", BRIDGE, NAMESPACE)


# --- schemas and lint -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_fits_the_kubernetes_schemas(rendered: Rendered, version: str) -> None:
    failures = []
    checked = 0
    for obj in rendered.objects:
        if obj["kind"] in KOPF_PEERING_KINDS | {SERVICE_MONITOR}:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
            checked += 1
        except kubernetes_validate.ValidationError as err:
            failures.append(f"{obj['kind']}/{obj['metadata']['name']}: {err}")
    assert failures == []
    assert checked >= len(bridge_objects(rendered)) >= 4


def test_schema_check_catches_a_bad_bridge_object() -> None:
    bad = dict(deployment(scenario("default")))
    bad["spec"] = {**bad["spec"], "strategy": {"type": "Recreate", "maxSurge": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSIONS[-1], strict=True)


def test_helm_lint_finds_nothing_wrong() -> None:
    for name, text in SCENARIOS.items():
        values = with_bridge(text, {"docker": {"tlsSecret": "engine-tls"}})
        report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert (name, problems, report["errors"]) == (name, [], [])


# --- bad values -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bridge", "message"),
    [
        ({"limits": "docker=16"}, "bridge.limits must be a map of provider name"),
        ({"limits": {"docker": None}}, "bridge.limits must be a map of provider name"),
        ({"limits": {"Docker": 4}}, "bridge.limits: Docker is not a provider name"),
        ({"limits": {"docker": 0}}, "bridge.limits.docker: 0 (float64) is not a whole number"),
        ({"limits": {"docker": 2.5}}, "bridge.limits.docker: 2.5 (float64) is not a whole number"),
        ({"limits": {"docker": "16"}}, "bridge.limits.docker: 16 (string) is not a whole number"),
        ({"logLevel": "verbose"}, "bridge.logLevel: verbose is not one of debug, info"),
    ],
)
def test_bad_values_fail_with_a_message(bridge: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError) as caught:
        render({"bridge": {"enabled": True, **bridge}})
    assert message in str(caught.value)
