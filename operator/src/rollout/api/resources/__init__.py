"""The custom resources: RolloutJob, RolloutTrial and RolloutImage (group rollout.dev, version
v1alpha1).

Models only; `rollout.api.crd` generates the CustomResourceDefinitions in crds/ from them.

The RolloutJob's and RolloutImage's modules are imported when one of their names is first asked
for (PEP 562): the runner, which starts once per trial, needs only the RolloutTrial's, and the
RolloutJob's brings job.yaml's whole model with it.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from rollout.api.names import (
    API_VERSION,
    FINALIZER,
    GROUP,
    LABEL_AGENT,
    LABEL_DATASET,
    LABEL_JOB,
    LABEL_TASK,
    LABEL_TRIAL,
    VERSION,
)
from rollout.api.resources.common import (
    AgentSpec,
    EnvVar,
    EnvVarSource,
    HeaderVar,
    LocalObjectReference,
    ModelSpec,
    ObjectMeta,
    PodOverrides,
    PrinterColumn,
    ResourceInfo,
    SecretKeySelector,
    StorageSpec,
    Toleration,
)
from rollout.api.resources.conditions import (
    Condition,
    ConditionStatus,
    JobConditionReason,
    JobConditionType,
    TrialConditionReason,
    TrialConditionType,
    find_condition,
    set_condition,
)
from rollout.api.resources.trial_resource import (
    UNBUILT_IMAGE,
    RolloutTrial,
    RolloutTrialSpec,
    RolloutTrialStatus,
    TrialPhase,
    TrialResources,
)

if TYPE_CHECKING:
    from rollout.api.resources.image_resource import (
        BuildContext,
        Builder,
        BuilderType,
        ImagePhase,
        ImageReason,
        RolloutImage,
        RolloutImageSpec,
        RolloutImageStatus,
    )
    from rollout.api.resources.job_resource import (
        DatasetRef,
        JobPhase,
        RolloutJob,
        RolloutJobSpec,
        RolloutJobStatus,
        TrialCounts,
    )

    CUSTOM_RESOURCES: tuple[type[RolloutJob], type[RolloutTrial], type[RolloutImage]]
    """The kinds `rollout.api.crd` writes a CustomResourceDefinition for."""

_LAZY = {
    **dict.fromkeys(
        (
            "BuildContext",
            "Builder",
            "BuilderType",
            "ImagePhase",
            "ImageReason",
            "RolloutImage",
            "RolloutImageSpec",
            "RolloutImageStatus",
        ),
        "image_resource",
    ),
    **dict.fromkeys(
        (
            "DatasetRef",
            "JobPhase",
            "RolloutJob",
            "RolloutJobSpec",
            "RolloutJobStatus",
            "TrialCounts",
        ),
        "job_resource",
    ),
}


def __getattr__(name: str) -> Any:
    """A name of the RolloutJob's or RolloutImage's module, imported on first use."""
    if name == "CUSTOM_RESOURCES":
        value: Any = (__getattr__("RolloutJob"), RolloutTrial, __getattr__("RolloutImage"))
    elif name in _LAZY:
        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "API_VERSION",
    "CUSTOM_RESOURCES",
    "FINALIZER",
    "GROUP",
    "LABEL_AGENT",
    "LABEL_DATASET",
    "LABEL_JOB",
    "LABEL_TASK",
    "LABEL_TRIAL",
    "UNBUILT_IMAGE",
    "VERSION",
    "AgentSpec",
    "BuildContext",
    "Builder",
    "BuilderType",
    "Condition",
    "ConditionStatus",
    "DatasetRef",
    "EnvVar",
    "EnvVarSource",
    "HeaderVar",
    "ImagePhase",
    "ImageReason",
    "JobConditionReason",
    "JobConditionType",
    "JobPhase",
    "LocalObjectReference",
    "ModelSpec",
    "ObjectMeta",
    "PodOverrides",
    "PrinterColumn",
    "ResourceInfo",
    "RolloutImage",
    "RolloutImageSpec",
    "RolloutImageStatus",
    "RolloutJob",
    "RolloutJobSpec",
    "RolloutJobStatus",
    "RolloutTrial",
    "RolloutTrialSpec",
    "RolloutTrialStatus",
    "SecretKeySelector",
    "StorageSpec",
    "Toleration",
    "TrialConditionReason",
    "TrialConditionType",
    "TrialCounts",
    "TrialPhase",
    "TrialResources",
    "find_condition",
    "set_condition",
]
