"""`rollout login`: ask for what a run needs here, check it as `rollout check` does, and keep it in
the CLI's config file, which every command then reads.

What it asks (on a terminal; a flag answers a question without asking it, for scripts):

- the kube context (the kubeconfig's contexts are listed; the default is the one stored before,
  else the kubeconfig's current one) and the namespace (default: the stored one, else the
  context's);
- the storage endpoint (empty for AWS S3), whether to address it path-style (as MinIO needs),
  the bucket and its region;
- the CLI's own storage credentials: an access key id and its secret (read without echo).
  Press Enter to keep what is stored.

`--runner-image`, `--storage-prefix`, `--storage-cluster-endpoint` and
`--storage-credentials-secret` are stored when given. Then the checks of `rollout check` run
against the new settings (`--no-check` skips them), and the settings are saved, merged into the
config file ($ROLLOUT_CONFIG, else ~/.config/rollout/config.yaml honouring XDG_CONFIG_HOME):
written atomically, readable by you only (0600, in a 0700 directory). A variable of the
environment that would win over a stored value (ROLLOUT_STORAGE_*, AWS_ACCESS_KEY_ID, ...) is
pointed out. Secrets are never shown, not even the stored ones.

Without a terminal nothing is asked: flags and what is stored give the values, and what is still
missing (a bucket) is an error. Exit status: 0 when saved and every check passed, 1 when a check
failed (the settings are saved all the same, unless you said no at the prompt).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollout.api.errors import InvalidInput
from rollout.cli import check, config, kube
from rollout.cli.errors import CliError, ExitCode, Problems
from rollout.cli.kubeconfig import list_contexts
from rollout.storage.credentials import AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY

EPILOG = """\
examples:
  rollout login                                 asks for each value, checks, saves
  rollout login --context kind-rollout -n evals --storage-endpoint http://127.0.0.1:9000 \\
      --storage-path-style --storage-bucket rollout \\
      --access-key-id "$KEY_ID" --secret-access-key - <<< "$SECRET"   for scripts
  rollout login --storage-bucket other-bucket --no-check   change one value, keep the rest
"""

NONE = "-"
"""What to answer to clear a stored value (the endpoint: then AWS S3)."""
FROM_STDIN = "-"
"""`--secret-access-key -` reads the secret from stdin."""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "login",
        help="ask for the cluster, storage and credentials a run needs, check and save them",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kube.add_cluster_arguments(parser)
    config.add_storage_arguments(parser)
    config.add_runner_image_argument(parser)
    credentials = parser.add_argument_group(
        "credentials", "The CLI's own storage credentials, stored in the config file."
    )
    credentials.add_argument("--access-key-id", metavar="ID", help="access key id")
    credentials.add_argument(
        "--secret-access-key",
        metavar="SECRET",
        help="its secret; `-` reads it from stdin (a value here shows in the process list and "
        "the shell's history: prefer the prompt or stdin)",
    )
    parser.add_argument(
        "--no-check", action="store_true", help="save without running the checks first"
    )
    parser.set_defaults(handler=run)


class Prompter:
    """Questions on the terminal; without one, every question takes its default."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive

    def ask(self, question: str, default: str | None = None) -> str | None:
        """The answer, or `default` for an empty one (and without a terminal)."""
        if not self.interactive:
            return default
        shown = f" [{default}]" if default else ""
        try:
            answer = input(f"{question}{shown}: ").strip()
        except EOFError:  # no more answers: the defaults from here on
            self.interactive = False
            return default
        return answer or default

    def secret(self, question: str, stored: bool) -> str | None:
        """A secret, read without echo; None for an empty answer."""
        if not self.interactive:
            return None
        shown = " [keep the stored one]" if stored else ""
        try:
            answer = getpass.getpass(f"{question}{shown}: ").strip()
        except EOFError:
            self.interactive = False
            return None
        return answer or None

    def yes(self, question: str, default: bool) -> bool:
        answer = self.ask(f"{question} (y/n)", "y" if default else "n")
        return (answer or "").lower() in ("y", "yes")


@dataclass
class Answers:
    """What will be stored; None leaves a key as it is."""

    context: str
    namespace: str
    storage: dict[str, Any]
    credentials: dict[str, str] | None
    runner_image: str | None

    def updates(self) -> dict[str, Any]:
        storage = dict(self.storage)
        if self.credentials is not None:
            storage["credentials"] = self.credentials
        updates: dict[str, Any] = {
            "kube": {"context": self.context, "namespace": self.namespace},
            "storage": storage,
        }
        if self.runner_image is not None:
            updates["runnerImage"] = self.runner_image
        return updates


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    loaded = config.read_config(environ)
    prompter = Prompter(interactive=sys.stdin.isatty())
    answers = ask(args, environ, loaded, prompter)
    _, merged = config.merged_config(loaded.path, answers.updates())
    for note in overridden(environ, answers):
        print(f"note: {note}")
    passed = True
    if not args.no_check:
        print(f"Checking the settings for {loaded.path}:")
        preview = config.LoadedConfig(loaded.path, loaded.named, merged)
        checks = check.report(check.run_checks(_no_flags(args), environ, loaded=preview))
        passed = not any(c.failed for c in checks)
        if not passed and not prompter.yes("Save these settings all the same?", default=True):
            print("nothing saved")
            return ExitCode.FAILED
    written = config.save_config(loaded.path, answers.updates(), private_directory=not loaded.named)
    stored = "with" if answers.credentials or _has_credentials(merged) else "without"
    print(f"saved to {written} (readable by you only), {stored} storage credentials")
    return ExitCode.OK if passed else ExitCode.FAILED


def ask(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    loaded: config.LoadedConfig,
    prompter: Prompter,
) -> Answers:
    """Every value, from the flags, the answers, or what is stored; problems all at once."""
    problems: list[str] = []
    context, namespace = _ask_kube(args, environ, loaded, prompter)
    stored = loaded.config.storage
    storage: dict[str, Any] = {}

    endpoint = _flag(args.storage_endpoint) or prompter.ask(
        f"Storage endpoint URL (empty: AWS S3; {NONE} to clear)", stored.endpoint
    )
    storage["endpoint"] = None if endpoint in (None, NONE) else endpoint
    if args.storage_path_style is not None:
        storage["pathStyle"] = args.storage_path_style
    elif storage["endpoint"] and prompter.interactive:
        default = stored.path_style if stored.path_style is not None else True
        storage["pathStyle"] = prompter.yes("Path-style addressing (MinIO needs it)", default)
    bucket = _flag(args.storage_bucket)
    while bucket is None:
        bucket = prompter.ask("Bucket", stored.bucket)
        if bucket is None and not prompter.interactive:
            problems.append("no bucket: pass --storage-bucket (none is stored to keep)")
            break
    storage["bucket"] = bucket
    suggested = stored.region or (_aws_region(environ) if prompter.interactive else None)
    region = _flag(args.storage_region) or prompter.ask(
        f"Region of the bucket ({NONE} to clear)", suggested
    )
    storage["region"] = None if region == NONE else region
    for flag, key in (
        (args.storage_prefix, "prefix"),
        (args.storage_cluster_endpoint, "clusterEndpoint"),
        (args.storage_credentials_secret, "credentialsSecret"),
    ):
        if _flag(flag) is not None:
            storage[key] = _flag(flag)

    credentials, credential_problems = _ask_credentials(args, loaded, prompter)
    problems += credential_problems
    if problems:
        raise Problems(problems)
    return Answers(
        context=context,
        namespace=namespace,
        storage=storage,
        credentials=credentials,
        runner_image=_flag(args.runner_image),
    )


def _ask_kube(
    args: argparse.Namespace,
    environ: Mapping[str, str],
    loaded: config.LoadedConfig,
    prompter: Prompter,
) -> tuple[str, str]:
    contexts, current, path = list_contexts(args.kubeconfig, environ)
    if not contexts:
        raise CliError(f"the kubeconfig {path} has no contexts: add the cluster's first")
    try:
        stored = config.kube_defaults(environ, loaded)
    except InvalidInput:
        stored = config.KubeDefaults()  # replaced by the answers
    default = stored.context if stored.context in contexts else current
    names = list(contexts)
    context = _flag(args.context)
    if context is None and prompter.interactive:
        print(f"Contexts of {path}:")
        for number, name in enumerate(names, start=1):
            marks = [
                mark
                for mark, on in (("current", name == current), ("stored", name == stored.context))
                if on
            ]
            print(f"  {number}) {name}" + (f" ({', '.join(marks)})" if marks else ""))
    while context is None:
        answer = prompter.ask("Kube context (name or number)", default)
        if answer is not None and answer.isdigit() and 1 <= int(answer) <= len(names):
            answer = names[int(answer) - 1]
        if answer in contexts:
            context = answer
        elif not prompter.interactive:
            raise CliError(f"the kubeconfig {path} has no current context: pass --context")
        else:
            print(f"no context {answer!r} in {path}: answer one of 1-{len(names)} or a name")
    if context not in contexts:
        raise CliError(
            f"no context {context!r} in the kubeconfig {path} (it has: {', '.join(names)})"
        )
    namespace_default = (
        (stored.namespace if stored.context in (None, context) else None)
        or contexts[context]
        or "default"
    )
    namespace = _flag(args.namespace) or prompter.ask("Namespace", namespace_default)
    return context, namespace or namespace_default


def _ask_credentials(
    args: argparse.Namespace, loaded: config.LoadedConfig, prompter: Prompter
) -> tuple[dict[str, str] | None, list[str]]:
    """The key pair to store (None: keep what is stored, or store none); problems."""
    stored = loaded.config.storage.credentials
    has_stored = stored is not None and stored.cli_credentials() is not None
    key_id = _flag(args.access_key_id)
    secret = _flag(args.secret_access_key)
    if secret == FROM_STDIN:
        secret = sys.stdin.readline().strip() or None
    if key_id is None and secret is None and prompter.interactive:
        hint = "keep the stored one" if has_stored else "none: the AWS_* variables or boto3's chain"
        key_id = prompter.ask(f"Access key id [{hint}]")
        while key_id is not None and secret is None and prompter.interactive:
            secret = prompter.secret("Secret access key", stored=False)
    if key_id is None and secret is None:
        return None, []
    if key_id is None or secret is None:
        missing = "--secret-access-key" if secret is None else "--access-key-id"
        return None, [f"{missing} is needed too: an access key id and its secret go together"]
    return {"accessKeyId": key_id, "secretAccessKey": secret}, []


def overridden(environ: Mapping[str, str], answers: Answers) -> list[str]:
    """The environment's variables that win over values about to be stored."""
    notes = []
    for setting in config.STORAGE_SETTINGS:
        key = (setting.key or "").removeprefix("storage.")
        if answers.storage.get(key) is not None and environ.get(setting.variable, "").strip():
            notes.append(
                f"{setting.variable} is set in this environment and wins over the stored "
                f"{setting.key}"
            )
    if answers.runner_image and environ.get(config.CLI_RUNNER_IMAGE.variable, "").strip():
        notes.append(
            f"{config.CLI_RUNNER_IMAGE.variable} is set in this environment and wins over the "
            "stored runnerImage"
        )
    if answers.credentials and all(
        environ.get(name, "").strip() for name in (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)
    ):
        notes.append(
            f"{AWS_ACCESS_KEY_ID} and {AWS_SECRET_ACCESS_KEY} are set in this environment and "
            "win over the stored credentials"
        )
    return notes


def _no_flags(args: argparse.Namespace) -> argparse.Namespace:
    """The arguments `rollout check` would get with none given but --kubeconfig: so that the
    checks read the settings from the (new) config file, as every later command will."""
    return argparse.Namespace(kubeconfig=args.kubeconfig, context=None, namespace=None, local=False)


def _flag(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip() or None
    return value


def _aws_region(environ: Mapping[str, str]) -> str | None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if value := environ.get(name, "").strip():
            return value
    return None


def _has_credentials(config_file: config.ConfigFile) -> bool:
    credentials = config_file.storage.credentials
    return credentials is not None and credentials.cli_credentials() is not None
