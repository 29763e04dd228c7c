"""`rollout render JOB.yaml`: the RolloutJob (and its Secret) as YAML on stdout, for GitOps.

Nothing touches the cluster (no kubeconfig is read): the namespace is `--namespace` or left out
(set by kustomize, Argo CD, `kubectl apply -n`). Datasets appear by their content address, computed
locally; `--publish` also uploads their bundles (skipping what storage has), which the operator
needs before the job can run. spec.storage comes from the storage settings when a bucket is
configured (flags, ROLLOUT_STORAGE_*, config file), else it is left out and the operator's default
storage applies; spec.runnerImage likewise.

Secrets. Agent env values written `${VAR}` go into a Secret, never into the RolloutJob. A Secret
with real values does not belong in git, so by default the Secret is NOT rendered: the RolloutJob
document starts with a comment naming it, and the `kubectl create secret` command that makes it
from your environment is printed to stderr (create it before applying; with a secrets manager,
make a Secret of that name and keys). A Secret with empty values is not rendered either: applied
by a GitOps tool it would wipe the real values. `--include-secrets` renders the Secret with the
values from the environment, for pipelines that encrypt it (Sealed Secrets, SOPS) before it
reaches git; only then must every `${VAR}` be set.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rollout.api.envrefs import env_references
from rollout.api.names import AGENT_ENV_ANNOTATION, EVALUATOR_KEY_ANNOTATION
from rollout.api.resources import RolloutJob
from rollout.api.translate import EVALUATOR_SECRET_KEY, agent_secret_key
from rollout.api.wire.spec import agent_secret_carriers
from rollout.cli import config
from rollout.cli.errors import ExitCode
from rollout.cli.prepare import EnvValues, build_resources, cache_dir, prepare_job
from rollout.cli.publish import publish_datasets

_LONE_DOLLAR = re.compile(r"\$(?!\{[A-Za-z_][A-Za-z0-9_]*\})")

EPILOG = """\
examples:
  rollout render job.yaml > rolloutjob.yaml               manifests only; nothing uploaded
  rollout render job.yaml --publish -n evals | kubectl apply -f -
  rollout render job.yaml --include-secrets | kubeseal -o yaml > sealed.yaml
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "render",
        help="print the RolloutJob (and Secret) for a job.yaml as YAML, for GitOps",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job_file", type=Path, metavar="JOB.yaml")
    parser.add_argument("-n", "--namespace", metavar="NAME", help="metadata.namespace to set")
    parser.add_argument(
        "--publish", action="store_true", help="also upload the dataset bundles to storage"
    )
    parser.add_argument(
        "--include-secrets",
        action="store_true",
        help="render the agent env Secret with its values (keep it out of git unencrypted)",
    )
    config.add_storage_arguments(parser)
    config.add_runner_image_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    settings = config.resolve(args, environ)
    # The `${VAR}` values are needed only for the Secret, which only --include-secrets renders.
    env_values = EnvValues.REQUIRED if args.include_secrets else EnvValues.UNUSED
    prepared = prepare_job(args.job_file, environ, cache=cache_dir(environ), env_values=env_values)
    # What rollout run would say before it starts: the same warnings, and the tasks that cannot
    # run (their trials fail without starting once the rendered job is applied).
    for warning in [*prepared.warnings, *prepared.task_problems()]:
        print(f"warning: {warning}", file=sys.stderr)
    rollout_job, secret = build_resources(
        prepared,
        namespace=args.namespace or "",
        environ=environ if args.include_secrets else None,
        storage=settings.storage_spec(),
        runner_image=settings.runner_image,
    )
    if args.publish:
        store = settings.object_store(environ)
        for report in publish_datasets(store, prepared.datasets):
            print(report.describe(store), file=sys.stderr)
    documents: list[str] = []
    job_manifest = _without_empty_namespace(rollout_job.manifest())
    secret_name = agent_env_secret_ref(rollout_job)
    if secret_name is not None and not args.include_secrets:
        command = create_secret_command(rollout_job, secret_name, args.namespace)
        documents.append(_secret_comment(secret_name, command) + _dump(job_manifest))
        print(f"create the agent env Secret before applying:\n  {command}", file=sys.stderr)
    else:
        if secret is not None:
            documents.append(_dump(_without_empty_namespace(secret)))
        documents.append(_dump(job_manifest))
    sys.stdout.write("---\n".join(documents))
    return ExitCode.OK


def agent_env_secret_ref(rollout_job: RolloutJob) -> str | None:
    """The name of the Secret the RolloutJob's agent values (env, endpoint headers, a model's
    key) or its evaluator key read, if any."""
    for agent in rollout_job.spec.agents:
        for carrier in agent_secret_carriers(agent):
            return carrier.selector.name
    if rollout_job.spec.evaluator_api_key is not None:
        return rollout_job.spec.evaluator_api_key.name
    return None


def create_secret_command(rollout_job: RolloutJob, secret_name: str, namespace: str | None) -> str:
    """`kubectl create secret generic NAME "--from-literal=KEY=${VAR}" ...`: the shell that runs
    it fills in the values from its environment, as `rollout run` takes them from its own."""
    templates: dict[str, dict[str, str]] = json.loads(
        rollout_job.metadata.annotations.get(AGENT_ENV_ANNOTATION, "{}")
    )
    parts = ["kubectl create secret generic", secret_name]
    if namespace:
        parts.append(f"--namespace {namespace}")
    for agent, values in templates.items():
        for slot, text in values.items():  # env, headers, a model's key
            assert env_references(text)  # only ${VAR} values go to the Secret
            parts.append(f'"--from-literal={agent_secret_key(agent, slot)}={_shell_text(text)}"')
    evaluator_key = rollout_job.metadata.annotations.get(EVALUATOR_KEY_ANNOTATION)
    if evaluator_key is not None:
        parts.append(f'"--from-literal={EVALUATOR_SECRET_KEY}={_shell_text(evaluator_key)}"')
    return " ".join(parts)


def _shell_text(text: str) -> str:
    """`text` for inside double quotes, with only its `${NAME}` references left to the shell."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
    return _LONE_DOLLAR.sub(r"\\$", escaped)


def _secret_comment(name: str, command: str) -> str:
    return (
        f"# This RolloutJob reads agent env values from the Secret {name}, which is not\n"
        "# rendered here: its values do not belong in git. Create it before applying, e.g.\n"
        f"#   {command}\n"
    )


def _without_empty_namespace(manifest: dict[str, Any]) -> dict[str, Any]:
    metadata = dict(manifest.get("metadata") or {})
    if not metadata.get("namespace"):
        metadata.pop("namespace", None)
    return {**manifest, "metadata": metadata}


def _dump(manifest: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(manifest), sort_keys=False, allow_unicode=True)
