"""`Store`: what the runner needs of storage, so that a bucket and a directory both serve it.

`ObjectStore` (S3) and `DirectoryStore` (a local directory, for local mode) both satisfy it; the
runner takes a `Store`, so mypy shows it asks for nothing more than this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Store(Protocol):
    """Objects under full keys (`rollout.api.layout`'s, under `prefix`), as the runner uses them."""

    @property
    def prefix(self) -> str:
        """The key prefix of everything of ours, without surrounding slashes ("" for none)."""
        ...

    def uri(self, key: str) -> str:
        """Where the object `key` is, for users (s3://..., file://...)."""
        ...

    def secrets(self) -> list[str]:
        """The credentials' secret values, so that messages can be scrubbed of them."""
        ...

    def get_bytes(self, key: str) -> bytes:
        """The object's content; ObjectNotFound when there is none, StorageError otherwise."""
        ...

    def upload_file(self, local_path: Path | str, key: str) -> None:
        """Store a local file's content as `key`; a missing source file is its OSError."""
        ...


class WritableStore(Store, Protocol):
    """A `Store` that the CLI publishes datasets and job files into: a bucket, or (local mode)
    a directory."""

    def exists(self, key: str) -> bool:
        """Whether the object `key` is there."""
        ...

    def put_bytes(self, key: str, data: bytes, content_type: str | None = None) -> None:
        """Write the object (replacing one that is there)."""
        ...

    def put_new(self, key: str, data: bytes, content_type: str | None = None) -> bool:
        """Write the object only where there is none; False when one was there (kept)."""
        ...
