"""50 malformed RolloutJobs (issue 20, fault 5) and what becomes of each: refused by the API
server (the CRD's schema, the object's metadata, its size), or taken and given `Valid=False` by
the operator. Shared by tests/integration/test_faults_malformed.py (the loopback API, whose
expected messages are kube-apiserver 1.24's, word for word) and tests/e2e/test_faults_e2e.py (a
cluster, whatever its version: there the refusals are checked by status, the conditions by
reason).

`unknown_field` marks the jobs whose fault is a field the schema does not have: kube-apiserver
1.24 prunes it (what remains decides); a 1.25+ server asked with `fieldValidation=Strict`, as
kubectl 1.25+ asks, refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

GROUP, VERSION = "rollout.dev", "v1alpha1"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Malformed:
    """A RolloutJob with one thing wrong, and what becomes of it: refused (`status`, and words
    of the API server's message), or taken and `Valid=False` with `invalid` = (reason, words)."""

    id: str
    change: Callable[[Manifest], None]
    refused: str | None = None
    invalid: tuple[str, str] | None = None
    status: int = 422
    reason: str = "Invalid"
    name: str | None = field(default=None)
    unknown_field: bool = False

    def manifest(self, dataset: dict[str, str], **spec: Any) -> Manifest:
        """The RolloutJob, on `dataset` (a published one), with `spec` added (e.g. storage)."""
        manifest = job_manifest(self.name or self.id, [dataset], **spec)
        self.change(manifest)
        return manifest


def job_manifest(name: str, datasets: Sequence[dict[str, str]], **spec: Any) -> Manifest:
    """A valid RolloutJob of the oracle agent on `datasets`."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RolloutJob",
        "metadata": {"name": name},
        "spec": {"agents": [{"name": "oracle"}], "datasets": [dict(d) for d in datasets], **spec},
    }


def spec(**fields: Any) -> Callable[[Manifest], None]:
    return lambda manifest: manifest["spec"].update(fields)


def without(*keys: str) -> Callable[[Manifest], None]:
    def change(manifest: Manifest) -> None:
        for key in keys:
            manifest["spec"].pop(key)

    return change


def whole(**fields: Any) -> Callable[[Manifest], None]:
    return lambda manifest: manifest.update(fields)


def unchanged(manifest: Manifest) -> None:
    pass


def typed(path: str, wanted: str, found: str) -> str:
    return f'{path}: Invalid value: "{found}": {path} in body must be of type {wanted}: "{found}"'


def agents(*items: Any) -> Callable[[Manifest], None]:
    return spec(agents=list(items))


ORACLE = {"name": "oracle"}
SCRIPT = {"name": "claude", "execute": "claude -p hello"}
SECRET_REF = {"secretKeyRef": {"name": "s", "key": "k"}}
UNPUBLISHED = "f" * 64
SUBDOMAIN = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"

CASES = [
    # Wrong types.
    Malformed("n-attempts-string", spec(nAttempts="3"),
              typed("spec.nAttempts", "integer", "string")),
    Malformed("n-attempts-boolean", spec(nAttempts=True),
              typed("spec.nAttempts", "integer", "boolean")),
    Malformed("n-concurrent-fraction", spec(nConcurrentTrials=2.5),
              typed("spec.nConcurrentTrials", "integer", "number")),
    Malformed("agents-object", spec(agents={"name": "oracle"}),
              typed("spec.agents", "array", "object")),
    Malformed("datasets-string", spec(datasets="hello-set"),
              typed("spec.datasets", "array", "string")),
    Malformed("timeout-multiplier-string", spec(timeoutMultiplier="fast"),
              typed("spec.timeoutMultiplier", "number", "string")),
    Malformed("suspend-string", spec(suspend="yes"), typed("spec.suspend", "boolean", "string")),
    Malformed("environment-string", spec(environment="kubernetes"),
              typed("spec.environment", "object", "string")),
    Malformed("agent-name-number", agents({"name": 42}),
              typed("spec.agents.name", "string", "integer")),
    Malformed("agent-env-map", agents({**SCRIPT, "env": {"KEY": "v"}}),
              typed("spec.agents.env", "array", "object")),
    Malformed("node-selector-number", spec(pod={"nodeSelector": {"disk": 1}}),
              typed("spec.pod.nodeSelector.disk", "string", "integer")),
    Malformed("spec-list", whole(spec=[]), typed("spec", "object", "array")),
    Malformed("task-ids-string", spec(taskIds="t1"), typed("spec.taskIds", "array", "string")),
    Malformed("override-cpus-boolean", spec(environment={"overrideCpus": True}),
              typed("spec.environment.overrideCpus", "integer,string", "boolean")),
    # Missing required fields.
    Malformed("no-spec", lambda manifest: manifest.pop("spec"), "spec: Required value"),
    Malformed("no-agents", without("agents"), "spec.agents: Required value"),
    Malformed("no-datasets", without("datasets"), "spec.datasets: Required value"),
    Malformed("dataset-without-digest", spec(datasets=[{"name": "hello-set"}]),
              "spec.datasets.digest: Required value"),
    Malformed("agent-without-name", agents({"execute": "claude"}),
              "spec.agents.name: Required value"),
    Malformed("metric-without-type", spec(metrics=[{}]), "spec.metrics.type: Required value"),
    Malformed("env-without-name", agents({**SCRIPT, "env": [{"value": "v"}]}),
              "spec.agents.env.name: Required value"),
    Malformed("storage-without-bucket", spec(storage={"prefix": "p"}),
              "spec.storage.bucket: Required value"),
    Malformed("secret-ref-missing",
              agents({**SCRIPT, "env": [{"name": "KEY", "valueFrom": {}}]}),
              "spec.agents.env.valueFrom.secretKeyRef: Required value"),
    # Out of range, not in the enum, not matching the pattern.
    Malformed("n-attempts-zero", spec(nAttempts=0),
              "spec.nAttempts: Invalid value: 0: spec.nAttempts in body should be greater than "
              "or equal to 1"),
    Malformed("n-concurrent-negative", spec(nConcurrentTrials=-1),
              "spec.nConcurrentTrials in body should be greater than or equal to 1"),
    Malformed("timeout-multiplier-zero", spec(timeoutMultiplier=0),
              "spec.timeoutMultiplier in body should be greater than 0"),
    Malformed("max-infra-retries-negative", spec(maxInfraRetries=-1),
              "spec.maxInfraRetries in body should be greater than or equal to 0"),
    Malformed("log-level-verbose", spec(logLevel="verbose"),
              'spec.logLevel: Unsupported value: "verbose": supported values: "debug", "info"'),
    Malformed("environment-type-vm", spec(environment={"type": "vm"}),
              'spec.environment.type: Unsupported value: "vm"'),
    Malformed("agents-empty", spec(agents=[]),
              "spec.agents: Invalid value: 0: spec.agents in body should have at least 1 items"),
    Malformed("digest-short", spec(datasets=[{"name": "hello-set", "digest": "abc"}]),
              "spec.datasets.digest in body should match '^[0-9a-f]{64}$'"),
    Malformed("agent-name-slash", agents({"name": "a/b"}),
              'spec.agents.name: Invalid value: "a/b": spec.agents.name in body should match'),
    Malformed("env-name-digit", agents({**SCRIPT, "env": [{"name": "1KEY", "value": "v"}]}),
              'spec.agents.env.name: Invalid value: "1KEY"'),
    Malformed("retry-error-unknown", spec(retryErrors=["flaky"]),
              'spec.retryErrors: Unsupported value: "flaky"'),
    # Huge values.
    Malformed("n-attempts-beyond-int64", spec(nAttempts=2**63),
              typed("spec.nAttempts", "integer", "number")),
    Malformed("timeout-multiplier-huge", spec(timeoutMultiplier=1e308),
              "spec.timeoutMultiplier in body should be less than or equal to 1000"),
    Malformed("temperature-huge", spec(evaluatorTemperature=1e308),
              "spec.evaluatorTemperature in body should be less than or equal to 2"),
    Malformed("description-4-mib", agents({**ORACLE, "description": "x" * (4 << 20)}),
              "Request entity too large: limit is 3145728", status=413,
              reason="RequestEntityTooLarge"),
    # Bad names and metadata.
    Malformed("name-underscore", unchanged,
              f'metadata.name: Invalid value: "Bad_Name": {SUBDOMAIN}', name="Bad_Name"),
    Malformed("name-too-long", unchanged, "must be no more than 253 characters", name="a" * 254),
    Malformed("label-key-bad", lambda m: m["metadata"].update(labels={"bad key!": "v"}),
              'metadata.labels: Invalid value: "bad key!": name part must consist of'),
    # Unknown fields: pruned; what is left decides.
    Malformed("spec-misspelt", lambda m: m.update(specs=m.pop("spec")), "spec: Required value",
              unknown_field=True),
    Malformed("execute-misspelt", agents({"name": "claude", "command": "claude -p hello"}),
              invalid=("InvalidSpec", "agent 'claude' needs an 'execute' script"),
              unknown_field=True),
    # Taken by the schema; the operator says what is wrong.
    Malformed("dataset-not-published", spec(datasets=[{"name": "gone", "digest": UNPUBLISHED}]),
              invalid=("DatasetNotFound", "spec.datasets[0] (gone)")),
    Malformed("environment-local", spec(environment={"type": "local"}),
              invalid=("UnsupportedEnvironment", "spec.environment.type is 'local'")),
    Malformed("script-agent-without-execute", agents({"name": "claude"}),
              invalid=("InvalidSpec", "agent 'claude' needs an 'execute' script")),
    Malformed("agents-twice", agents(ORACLE, ORACLE),
              invalid=("InvalidSpec", "duplicate agent name 'oracle'")),
    Malformed("env-twice",
              agents({**SCRIPT, "env": [{"name": "K", "value": "1"}, {"name": "K", "value": "2"}]}),
              invalid=("InvalidSpec", "duplicate env var 'K'")),
    Malformed("env-value-and-secret",
              agents({**SCRIPT, "env": [{"name": "K", "value": "1", "valueFrom": SECRET_REF}]}),
              invalid=("InvalidSpec", "env var 'K' has both 'value' and 'valueFrom'")),
    Malformed("task-id-unknown", spec(taskIds=["nope"]),
              invalid=("InvalidSpec", "'nope' is not in the dataset")),
    Malformed("bucket-name-bad", spec(storage={"bucket": "Bad Bucket!"}),
              invalid=("InvalidSpec", "'Bad Bucket!' is not a bucket name")),
    # Built-in agents (rollout agents list).
    Malformed("builtin-without-its-key", agents({"name": "claude-code"}),
              invalid=("InvalidSpec", "the built-in agent 'claude-code' needs ANTHROPIC_API_KEY")),
    Malformed("builtin-unknown", agents({"name": "mine", "builtin": "claude"}),
              invalid=("InvalidSpec", "there is no built-in agent 'claude'")),
    Malformed("builtin-version-bad", agents({"name": "codex", "version": "1 2"}),
              'spec.agents.version: Invalid value: "1 2": spec.agents.version in body should '
              "match"),
]  # fmt: skip
