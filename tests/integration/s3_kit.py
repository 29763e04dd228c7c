"""How integration tests reach a bucket on a test S3 server: `S3Settings`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.api.resources import StorageSpec
from rollout.storage import ObjectStore, StorageCredentials


@dataclass(frozen=True)
class S3Settings:
    """A bucket's location on a test S3 server and the static test credentials for it, given
    beside each other as the product's code gives them. The location is a StorageSpec (a
    location that names no Secret), so that it can also be the operator's default storage."""

    location: StorageSpec
    credentials: StorageCredentials

    def store(self, **options: Any) -> ObjectStore:
        """An ObjectStore for the bucket (`options` as ObjectStore takes them). Loopback answers
        at once; short timeouts keep a test of a hung endpoint short too."""
        options.setdefault("connect_timeout_seconds", 2)
        options.setdefault("read_timeout_seconds", 10)
        return ObjectStore(self.location, self.credentials, **options)

    def secrets(self) -> list[str]:
        return self.credentials.secrets()
