"""CustomResourceDefinitions for a test's API: the manifests of a directory, or minimal ones."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from kubeharness.resources import GROUP, VERSION, Body


def crd_manifests(directory: Path) -> list[Body]:
    """Every CustomResourceDefinition in the *.yaml/*.yml files of a directory (multi-document)."""
    manifests: list[Body] = []
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                manifests.append(document)
    return manifests


def minimal_crd(
    kind: str,
    plural: str,
    *,
    group: str = GROUP,
    version: str = VERSION,
    short_names: Sequence[str] = (),
    namespaced: bool = True,
) -> Body:
    """A CRD with the status subresource and a schema that keeps every field.

    For tests written before the real CRDs exist in crds/; they prune nothing.
    """
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": kind.lower(),
                "listKind": f"{kind}List",
                "shortNames": list(short_names),
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def minimal_rollout_crds() -> list[Body]:
    """Minimal CRDs for RolloutJob (rj) and RolloutTrial (rt), until crds/ holds the real ones."""
    return [
        minimal_crd("RolloutJob", "rolloutjobs", short_names=["rj"]),
        minimal_crd("RolloutTrial", "rollouttrials", short_names=["rt"]),
    ]
