"""Who we are at a bucket: `StorageCredentials`, given beside a location, never inside it.

Without credentials boto3 uses its default chain (IRSA web identity, instance profile, profiles).
Static ones come from a mounted Secret (one file per key, as Kubernetes mounts them) or from the
standard AWS variables; they are held as pydantic `SecretStr`: repr, str and JSON dumps show
`**********`, never the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr

from rollout.api.errors import InvalidInput, Problem
from rollout.settings import ENVIRONMENT

# The standard AWS names, both as environment variables and as the keys (file names) of a
# mounted Secret.
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"  # noqa: S105 - a variable name, not a secret
AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"  # noqa: S105 - a variable name, not a secret


class StorageCredentials(BaseModel):
    """A static access key, its secret, and a session token for temporary ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    access_key_id: SecretStr
    secret_access_key: SecretStr
    session_token: SecretStr | None = None

    def secrets(self) -> list[str]:
        """The secret values, so that messages can be scrubbed of them."""
        values = (self.access_key_id, self.secret_access_key, self.session_token)
        return [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]


def read_credentials_dir(directory: Path, variable: str) -> StorageCredentials:
    """Credentials from a mounted Secret, the directory that `variable` names.

    AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are required, AWS_SESSION_TOKEN optional.
    Surrounding whitespace (a trailing newline from `echo > file`) is dropped.
    """
    if not directory.is_dir():
        raise InvalidInput.one(
            directory, None, f"the credentials directory ({variable}) does not exist"
        )
    values: dict[str, SecretStr] = {}
    problems: list[Problem] = []
    for field, name, required in (
        ("access_key_id", AWS_ACCESS_KEY_ID, True),
        ("secret_access_key", AWS_SECRET_ACCESS_KEY, True),
        ("session_token", AWS_SESSION_TOKEN, False),
    ):
        path = directory / name
        try:
            value = path.read_text().strip()
        except FileNotFoundError:
            value = ""
        except OSError as err:
            problems.append(Problem(str(path), None, f"cannot be read: {err.strerror}"))
            continue
        if value:
            values[field] = SecretStr(value)
        elif required:
            problems.append(Problem(str(path), None, "is missing or empty"))
    if problems:
        raise InvalidInput(problems)
    return StorageCredentials(**values)


def credentials_from_env(environ: Mapping[str, str]) -> StorageCredentials | None:
    """Credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN, or None
    when none is set (boto3's default chain then applies). A key without its secret, or a token
    without both, is an error naming the variable that is missing."""
    key_id, secret, token = (
        environ.get(name, "").strip()
        for name in (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)
    )
    if not (key_id or secret or token):
        return None
    missing = [
        name for name, value in ((AWS_ACCESS_KEY_ID, key_id), (AWS_SECRET_ACCESS_KEY, secret))
        if not value
    ]  # fmt: skip
    if missing:
        given = AWS_SESSION_TOKEN if not (key_id or secret) else None
        given = given or (AWS_ACCESS_KEY_ID if key_id else AWS_SECRET_ACCESS_KEY)
        raise InvalidInput(
            [
                Problem(
                    ENVIRONMENT,
                    name,
                    f"is required when {given} is set: an access key id and a secret access "
                    "key go together",
                )
                for name in missing
            ]
        )
    return StorageCredentials(
        access_key_id=SecretStr(key_id),
        secret_access_key=SecretStr(secret),
        session_token=SecretStr(token) if token else None,
    )
