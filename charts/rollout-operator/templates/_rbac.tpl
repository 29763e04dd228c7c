{{/* The operator's RBAC rules, shared by the ClusterRole and the per-namespace Roles. */}}

{{- define "rollout-operator.namespacedRules" -}}
- apiGroups: ["rollout.dev"]
  resources: ["rolloutjobs", "rollouttrials"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
# RolloutImages: made once per image hash, patched by kopf (its finalizer while one builds),
# deleted to build again an image that failed for an earlier job.
- apiGroups: ["rollout.dev"]
  resources: ["rolloutimages"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["rollout.dev"]
  resources: ["rolloutjobs/status", "rollouttrials/status", "rolloutimages/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["rollout.dev"]
  resources: ["rolloutjobs/finalizers", "rollouttrials/finalizers", "rolloutimages/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create"]
{{- end -}}

{{- define "rollout-operator.crdRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
{{- end -}}

{{/* Read-only access to namespaces. kopf lists and watches them even when it serves a list of
namespaces by name: to follow namespaces that come and go. Without it kopf retries the refused
list for about a minute, logging an ERROR each time, before it serves any job. Namespace objects
hold names, labels and annotations, nothing secret. */}}
{{- define "rollout-operator.namespaceRules" -}}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- end -}}
