{{/* The operator's RBAC rules, shared by the ClusterRole and the per-namespace Roles. */}}

{{- define "rollout-operator.namespacedRules" -}}
- apiGroups: ["rollout.dev"]
  resources: ["rolloutjobs", "rollouttrials"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["rollout.dev"]
  resources: ["rolloutjobs/status", "rollouttrials/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["rollout.dev"]
  resources: ["rolloutjobs/finalizers", "rollouttrials/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}

{{- define "rollout-operator.crdRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
{{- end -}}
