"""A job's datasets, from the bundle manifests in object storage, cached by digest.

A RolloutJob names each dataset by the digest of its manifest (`datasets/<digest>.json`): the
sha256 of the manifest's bytes. Because the key is the content's hash, a manifest read once is
valid forever, so it is cached by digest for the life of the process (jobs sharing a dataset read
it once); only successes are cached, so a manifest published after the job was created is found
on the next attempt.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import replace

from pydantic import ValidationError

from rollout.api.errors import InvalidInput
from rollout.api.layout import dataset_manifest_key
from rollout.api.manifest import DatasetManifest
from rollout.api.plan import ResolvedDataset, resolved_dataset
from rollout.api.resources import DatasetRef
from rollout.storage import ObjectNotFound, ObjectStore


class DatasetProblem(Exception):
    """A dataset the job cannot use: its manifest is missing or not what its digest says.

    Not transient (a `StorageError` is): the job cannot run until its spec or storage changes.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_manifest(data: bytes, *, digest: str, where: str) -> ResolvedDataset:
    """A manifest's bytes, checked against the digest that names them, as a dataset (named as
    the manifest says; a job names it its own way)."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise DatasetProblem(f"{where} does not match its digest (its sha256 is {actual})")
    try:
        manifest = DatasetManifest.model_validate_json(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        where_in = ".".join(str(p) for p in first["loc"])
        raise DatasetProblem(
            f"{where} is not a dataset manifest: {where_in}: {first['msg']}"
        ) from None
    try:
        dataset = resolved_dataset(manifest, manifest.name, digest)
    except InvalidInput as err:
        raise DatasetProblem(f"{where}: {err}") from None
    if not dataset.tasks:
        raise DatasetProblem(f"{where} lists no tasks")
    return dataset


class DatasetResolver:
    """Reads and caches dataset manifests; storage calls run in a thread, off the event loop."""

    def __init__(self) -> None:
        self._cache: dict[str, ResolvedDataset] = {}

    def cached(self, digest: str) -> ResolvedDataset | None:
        return self._cache.get(digest)

    async def resolve(
        self, refs: Sequence[DatasetRef], store: ObjectStore
    ) -> list[ResolvedDataset]:
        """Every dataset of a job, in the job's order.

        Raises DatasetProblem naming the dataset (and its `spec.datasets[i]`) when its manifest
        is missing or wrong, and StorageError when storage cannot be reached.
        """
        resolved: list[ResolvedDataset] = []
        for index, ref in enumerate(refs):
            dataset = self._cache.get(ref.digest)
            if dataset is None:
                key = dataset_manifest_key(store.location.prefix, ref.digest)
                where = f"spec.datasets[{index}] ({ref.name}): manifest {store.uri(key)}"
                try:
                    data = await asyncio.to_thread(store.get_bytes, key)
                except ObjectNotFound:
                    raise DatasetProblem(
                        f"{where} does not exist; publish the dataset first (rollout publish)"
                    ) from None
                dataset = parse_manifest(data, digest=ref.digest, where=where)
                self._cache[ref.digest] = dataset
            resolved.append(replace(dataset, name=ref.name))
        return resolved
