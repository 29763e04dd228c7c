"""job.yaml <-> RolloutJob: the one translation between the user's file and the cluster resource.

Pure functions: the caller (the CLI) resolves and publishes the datasets, passes their refs in, and
applies what comes out.

Secrets. An agent value with `${VAR}` (an env value, an endpoint header's value, a model's
api_key: `rollout.api.envrefs.AgentText`) never appears in the RolloutJob: its resolved value goes
into ONE Secret per job (`<resource name>-agent-env`), and the value becomes a
`valueFrom.secretKeyRef` into it (a model's `apiKey` is the selector itself). The Secret's keys are
`<agent>.<KEY>`, `<agent>.header.<Name>` and `<agent>.model.api-key` (the agent name made safe
for a Secret key, with a hash of the real name when it had to change), so two agents' same key do
not clash. Literal values stay literal `value`s.

Giving job.yaml back. Kubernetes' EnvVar has no field for "this came from ${VAR}", so the RolloutJob
carries the job.yaml text of every Secret-backed value in the annotation
`rollout.dev/agent-env` (JSON: `{agent: {slot: "${VAR}"}}`, the slot being the env KEY,
`header:<Name>` or `model:api_key`). It holds variable references as the user wrote them, never
values. `rollout_job_to_job` puts that text back.

Names. metadata.name must be a DNS-1123 label; job names like `2025-01-15__10-30-00` or `My Eval`
are not. `resource_name` lowercases, replaces every other character run with `-` and, when that
changed anything or the name is too long, appends a short hash of the original, so two job names
never share a resource name. The job's own name stays in `spec.jobName`: storage uses it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rollout.api.envrefs import (
    HEADER_SLOT_PREFIX,
    MODEL_KEY_SLOT,
    env_references,
    resolve_agent_env,
)
from rollout.api.errors import InvalidInput, Problem
from rollout.api.job import JobAgent, JobConfig, JobDataset, JobModel, resolve_evaluator_key
from rollout.api.names import AGENT_ENV_ANNOTATION, EVALUATOR_KEY_ANNOTATION
from rollout.api.problems import validation_problems
from rollout.api.resources import (
    LABEL_JOB,
    AgentSpec,
    DatasetRef,
    EnvVar,
    EnvVarSource,
    HeaderVar,
    ModelSpec,
    ObjectMeta,
    PodOverrides,
    RolloutJob,
    RolloutJobSpec,
    SecretKeySelector,
    StorageSpec,
)

AGENT_ENV_SECRET_SUFFIX = "-agent-env"  # noqa: S105 - a name, not a password
MAX_RESOURCE_NAME = 63
"""A DNS-1123 label: fits metadata.name, the `rollout.dev/job` label value and child names."""

_HASH_LENGTH = 8
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_DNS = re.compile(r"[^a-z0-9]+")
_NOT_SECRET_KEY = re.compile(r"[^-_a-zA-Z0-9]+")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]


def resource_name(job_name: str) -> str:
    """A DNS-1123 label for the RolloutJob of `job_name`: the name itself when it is one,
    otherwise a cleaned-up name with a hash of the original (`My Eval` -> `my-eval-1a2b3c4d`)."""
    if len(job_name) <= MAX_RESOURCE_NAME and _DNS_LABEL.match(job_name):
        return job_name
    suffix = _short_hash(job_name)
    base = _NOT_DNS.sub("-", job_name.lower()).strip("-")
    base = base[: MAX_RESOURCE_NAME - _HASH_LENGTH - 1].rstrip("-")
    return f"{base}-{suffix}" if base else f"job-{suffix}"


def agent_env_secret_name(rollout_job_name: str) -> str:
    """The name of the job's agent env Secret."""
    return f"{rollout_job_name}{AGENT_ENV_SECRET_SUFFIX}"


EVALUATOR_SECRET_KEY = "evaluator-api-key"  # noqa: S105 - a key name, not a password
"""The Secret key of the llm_judgement evaluator's API key (agent keys hold a dot, so this one
can be no agent's)."""


def secret_key(agent_name: str, env_key: str) -> str:
    """The Secret key holding `agent`'s `env_key`: `<agent>.<KEY>`, valid as a Secret key.

    Env keys have no dot, so the dot separates unambiguously; an agent name that had to be
    changed gets a hash of the original, so two agents never share a key.
    """
    safe = _NOT_SECRET_KEY.sub("-", agent_name)
    if safe != agent_name:
        safe = f"{safe}-{_short_hash(agent_name)}"
    return f"{safe}.{env_key}"


def agent_secret_key(agent_name: str, slot: str) -> str:
    """The Secret key holding one of an agent's values (`rollout.api.envrefs.AgentText.slot`):
    `<agent>.<KEY>` for env, `<agent>.header.<Name>` (the name made safe for a Secret key, with
    a hash when it had to change) or `<agent>.model.api-key`."""
    if slot == MODEL_KEY_SLOT:
        return secret_key(agent_name, "model.api-key")
    if slot.startswith(HEADER_SLOT_PREFIX):
        name = slot.removeprefix(HEADER_SLOT_PREFIX)
        safe = _NOT_SECRET_KEY.sub("-", name)
        if safe != name:
            safe = f"{safe}-{_short_hash(name)}"
        return secret_key(agent_name, f"header.{safe}")
    return secret_key(agent_name, slot)


def _value_fields(source: tuple[str | None, EnvVarSource | None]) -> dict[str, Any]:
    value, value_from = source
    return {"value": value} if value_from is None else {"value_from": value_from}


def job_to_rollout_job(
    job: JobConfig,
    *,
    namespace: str,
    datasets: Sequence[DatasetRef],
    environ: Mapping[str, str] | None,
    storage: StorageSpec | None = None,
    runner_image: str | None = None,
    secret_name: str | None = None,
    pod_overrides: PodOverrides | None = None,
    max_infra_retries: int = 2,
    suspend: bool = False,
    ttl_seconds_after_finished: int | None = None,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    file: str | Path = "job.yaml",
) -> tuple[RolloutJob, dict[str, Any] | None]:
    """The RolloutJob for `job`, and the Secret its agent env needs (None when no value has
    `${VAR}`).

    `datasets` are the job's datasets as published to storage, in job.yaml's order (one per
    entry); a ref without `source` gets the job.yaml entry. `environ` resolves `${VAR}`; an unset
    variable is an InvalidInput naming the agent, the key and the variable. `environ=None` says
    no value is wanted (`rollout render` without the Secret): nothing is resolved and no Secret
    is returned, though the RolloutJob still reads its env from it (secretKeyRef). Without
    `name`, the resource is named `resource_name(job.name)`.
    """
    if len(datasets) != len(job.datasets):
        raise ValueError(
            f"{len(job.datasets)} datasets in the job but {len(datasets)} dataset refs given"
        )
    resolved = resolve_agent_env(job, environ, file=file) if environ is not None else None
    rj_name = name or resource_name(job.name)
    secret = secret_name or agent_env_secret_name(rj_name)

    secret_data: dict[str, str] = {}
    templates: dict[str, dict[str, str]] = {}
    agents: list[AgentSpec] = []
    for agent in job.agents:

        def source(slot: str, text: str) -> tuple[str | None, EnvVarSource | None]:
            """A literal value, or (when it holds `${VAR}`) a reference into the Secret."""
            if not env_references(text):
                return text, None
            data_key = agent_secret_key(agent.name, slot)  # noqa: B023 - used now
            if resolved is not None:
                secret_data[data_key] = resolved[agent.name][slot]  # noqa: B023
            templates.setdefault(agent.name, {})[slot] = text  # noqa: B023
            selector = SecretKeySelector(name=secret, key=data_key)
            return None, EnvVarSource(secret_key_ref=selector)

        env = [EnvVar(name=k, **_value_fields(source(k, t))) for k, t in agent.env.items()]
        headers = [
            HeaderVar(name=name, **_value_fields(source(f"{HEADER_SLOT_PREFIX}{name}", text)))
            for name, text in agent.headers.items()
        ]
        model: ModelSpec | None = None
        if agent.model is not None:
            api_key = None
            if agent.model.api_key is not None:
                _, key_source = source(MODEL_KEY_SLOT, agent.model.api_key)
                assert key_source is not None  # api_key is always a ${VAR}
                api_key = key_source.secret_key_ref
            model = ModelSpec(**agent.model.settings(), api_key=api_key)
        agents.append(AgentSpec(**agent.scripts(), env=env, headers=headers, model=model))

    evaluator_key: SecretKeySelector | None = None
    if job.evaluator_api_key is not None:
        evaluator_key = SecretKeySelector(name=secret, key=EVALUATOR_SECRET_KEY)
        if environ is not None:
            value = resolve_evaluator_key(job, environ, file=file)
            assert value is not None  # the job has a reference
            secret_data[EVALUATOR_SECRET_KEY] = value

    refs = [
        ref if ref.source is not None else ref.model_copy(update={"source": source})
        for ref, source in zip(datasets, job.datasets, strict=True)
    ]
    annotations = {AGENT_ENV_ANNOTATION: _compact_json(templates)} if templates else {}
    if job.evaluator_api_key is not None:
        annotations[EVALUATOR_KEY_ANNOTATION] = job.evaluator_api_key
    job_labels = {**(labels or {}), LABEL_JOB: rj_name}
    try:
        spec = RolloutJobSpec(
            **job.job_settings(),
            job_name=job.name,
            agents=agents,
            datasets=refs,
            storage=storage,
            runner_image=runner_image,
            pod=pod_overrides or PodOverrides(),
            max_infra_retries=max_infra_retries,
            suspend=suspend,
            ttl_seconds_after_finished=ttl_seconds_after_finished,
            evaluator_api_key=evaluator_key,
        )
    except ValidationError as err:
        # e.g. two datasets that resolve to the same name: report it against job.yaml's fields.
        raise InvalidInput(validation_problems(err, file, RolloutJobSpec)) from None
    rollout_job = RolloutJob(
        metadata=ObjectMeta(
            name=rj_name, namespace=namespace, labels=job_labels, annotations=annotations
        ),
        spec=spec,
    )
    if not secret_data:
        return rollout_job, None
    return rollout_job, agent_env_secret(
        secret, namespace=namespace, data=secret_data, labels=job_labels
    )


def agent_env_secret(
    name: str, *, namespace: str, data: Mapping[str, str], labels: Mapping[str, str]
) -> dict[str, Any]:
    """The Secret manifest holding resolved agent env values (base64 in `data`, as the API
    stores them). The caller adds an ownerReference to the RolloutJob once that exists."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "type": "Opaque",
        "data": {
            key: base64.b64encode(value.encode()).decode("ascii")
            for key, value in sorted(data.items())
        },
    }


def rollout_job_to_job(rollout_job: RolloutJob | Mapping[str, Any]) -> JobConfig:
    """The job.yaml a RolloutJob came from: literal env values as they are, Secret-backed ones as
    the `${VAR}` text recorded in the `rollout.dev/agent-env` annotation.

    A RolloutJob without a job.yaml form (an env var from a Secret of the user's own, a dataset
    without `source`) is an InvalidInput naming the field.
    """
    rj = _as_rollout_job(rollout_job)
    where = f"RolloutJob {rj.metadata.namespace or ''}/{rj.metadata.name or ''}".replace(" /", " ")
    templates = _annotation_templates(rj, where)
    problems: list[Problem] = []

    agents: list[JobAgent] = []
    for a_index, agent in enumerate(rj.spec.agents):
        recorded = templates.get(agent.name, {})

        def text_of(slot: str, var: EnvVar | HeaderVar, field: str) -> str | None:
            """The job.yaml text of a value: as it is, or the `${VAR}` text recorded for it."""
            if var.value_from is None:
                return var.value or ""
            text = recorded.get(slot)  # noqa: B023 - used now
            if text is None:
                problems.append(_no_template(where, field, var.name))
            return text

        env: dict[str, str] = {}
        for e_index, var in enumerate(agent.env):
            text = text_of(var.name, var, f"spec.agents[{a_index}].env[{e_index}]")
            if text is not None:
                env[var.name] = text
        headers: dict[str, str] = {}
        for h_index, header in enumerate(agent.headers):
            field = f"spec.agents[{a_index}].headers[{h_index}]"
            text = text_of(f"{HEADER_SLOT_PREFIX}{header.name}", header, field)
            if text is not None:
                headers[header.name] = text
        model: JobModel | None = None
        if agent.model is not None:
            api_key = None
            if agent.model.api_key is not None:
                api_key = recorded.get(MODEL_KEY_SLOT)
                if api_key is None:
                    field = f"spec.agents[{a_index}].model.apiKey"
                    problems.append(_no_template(where, field, "the model's key"))
            model = JobModel(**agent.model.settings(), api_key=api_key)
        agents.append(JobAgent(**agent.scripts(), env=env, headers=headers, model=model))

    datasets: list[JobDataset] = []
    for index, ref in enumerate(rj.spec.datasets):
        if ref.source is None:
            problems.append(
                Problem(
                    where,
                    f"spec.datasets[{index}].source",
                    f"dataset {ref.name!r} has no source (path or registry) to put in job.yaml",
                )
            )
        else:
            datasets.append(ref.source)
    if problems:
        raise InvalidInput(problems)

    evaluator_key = None
    if rj.spec.evaluator_api_key is not None:
        evaluator_key = (rj.metadata.annotations or {}).get(EVALUATOR_KEY_ANNOTATION)
        if evaluator_key is None:
            raise InvalidInput.one(
                where,
                "spec.evaluatorApiKey",
                f"comes from a Secret with no ${{VAR}} recorded in the {EVALUATOR_KEY_ANNOTATION} "
                "annotation; job.yaml cannot express it",
            )
    try:
        return JobConfig(
            **rj.spec.job_settings(),
            name=rj.job_name,
            agents=agents,
            datasets=datasets,
            evaluator_api_key=evaluator_key,
        )
    except ValidationError as err:
        raise InvalidInput(validation_problems(err, where, JobConfig)) from None


def _no_template(where: str, field: str, what: str) -> Problem:
    return Problem(
        where,
        field,
        f"{what} comes from a Secret with no ${{VAR}} recorded in the {AGENT_ENV_ANNOTATION} "
        "annotation; job.yaml cannot express it",
    )


def _as_rollout_job(value: RolloutJob | Mapping[str, Any]) -> RolloutJob:
    if isinstance(value, RolloutJob):
        return value
    metadata = value.get("metadata") or {}
    where = f"RolloutJob {metadata.get('namespace', '')}/{metadata.get('name', '')}"
    try:
        return RolloutJob.model_validate(dict(value))
    except ValidationError as err:
        raise InvalidInput(validation_problems(err, where, RolloutJob)) from None


def _annotation_templates(rj: RolloutJob, where: str) -> dict[str, dict[str, str]]:
    raw = rj.metadata.annotations.get(AGENT_ENV_ANNOTATION)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        field = f"metadata.annotations.{AGENT_ENV_ANNOTATION}"
        raise InvalidInput.one(where, field, f"not valid JSON: {err.msg}") from None
    valid = isinstance(data, dict) and all(
        isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
        for env in data.values()
    )
    if not valid:
        field = f"metadata.annotations.{AGENT_ENV_ANNOTATION}"
        raise InvalidInput.one(where, field, "must map agent names to {KEY: text}")
    templates: dict[str, dict[str, str]] = data
    return templates


def _compact_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
