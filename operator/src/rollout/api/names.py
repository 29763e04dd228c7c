"""The project's names in Kubernetes: API group and version, label keys, the finalizer.

A module of constants only, so that every part of `rollout.api` (trial labels, the resources,
the translation's annotation) can use them without importing the resource models.
"""

from typing import Any

GROUP = "rollout.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "rollout"

# Label and annotation keys under our own domain.
LABEL_JOB = f"{GROUP}/job"
LABEL_TRIAL = f"{GROUP}/trial"
LABEL_AGENT = f"{GROUP}/agent"
LABEL_DATASET = f"{GROUP}/dataset"
LABEL_TASK = f"{GROUP}/task"
LABEL_COMPONENT = f"{GROUP}/component"
"""What one of our objects is for: `trial-pod`, `image-build`, `image` (a RolloutImage), ..."""
LABEL_ENVIRONMENT = f"{GROUP}/environment"
"""A RolloutTrial's environment type (`kubernetes`, `docker`, `modal`, ...): the bridge watches
only the trials whose environment is not a Pod, selected by the API server."""

FINALIZER = f"{GROUP}/finalizer"
"""The operator's finalizer on every RolloutJob: it stops its work on a deleted job before the
job goes (kopf needs it to stop the job's daemon). With no operator to remove it, a deleted job
stays until `rollout release` removes it."""

AGENT_ENV_ANNOTATION = f"{GROUP}/agent-env"
"""Annotation with the job.yaml text of Secret-backed agent env values: {agent: {KEY: text}}."""

EVALUATOR_KEY_ANNOTATION = f"{GROUP}/evaluator-api-key"
"""Annotation with the job.yaml text (`${VAR}`) of the llm_judgement evaluator's API key."""


def controller_reference(kind: str, name: str, uid: str) -> dict[str, Any]:
    """The ownerReferences entry that makes one of our resources (`kind`: RolloutJob or
    RolloutTrial) the controller of an object: deleted with it, and kept until the garbage
    collector has deleted the object first when the owner is deleted in the foreground."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
