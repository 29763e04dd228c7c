"""The custom resources: RolloutJob, RolloutTrial and RolloutImage (group rollout.dev, version
v1alpha1).

Models only; `rollout.api.crd` generates the CustomResourceDefinitions in crds/ from them.
"""

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
from rollout.api.resources.trial_resource import (
    RolloutTrial,
    RolloutTrialSpec,
    RolloutTrialStatus,
    TrialPhase,
    TrialResources,
)

CUSTOM_RESOURCES = (RolloutJob, RolloutTrial, RolloutImage)
"""The kinds `rollout.api.crd` writes a CustomResourceDefinition for."""

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
