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

{{/* The bridge's RBAC rules in the namespaces it serves (a ClusterRole's when it serves the whole
cluster). What it does and nothing more: it watches RolloutTrials and claims one by patching an
annotation on it (kopf patches its own progress annotations the same way); it writes their
status; kopf posts handler progress and errors as core events (as for the operator, no
events.k8s.io); it reads, by name, the Secrets a trial's agent env `secretKeyRef`s point to, as a
kubelet resolves them for a trial Pod: `get` only, so it can list no Secret it was not pointed
at. No Pods, no RolloutJobs, no create or delete of anything, no Leases (kopf runs standalone:
no peering). */}}
{{- define "rollout-operator.bridgeRules" -}}
- apiGroups: ["rollout.dev"]
  resources: ["rollouttrials"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["rollout.dev"]
  resources: ["rollouttrials/status"]
  verbs: ["get", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end -}}

{{/* The cluster-scoped reads kopf needs to start serving the bridge, as few as it can do with.
CRDs: kopf lists and watches them to follow the resources it serves (no `get`: kopf never reads
one by name). Without it, kopf logs an ERROR for each refused request and retries for about a
minute before it serves anything. */}}
{{- define "rollout-operator.bridgeCrdRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["list", "watch"]
{{- end -}}

{{/* Namespaces, list and watch: kopf follows them when it serves a list of namespaces (not when
it serves the whole cluster), so only the namespaced install grants this. */}}
{{- define "rollout-operator.bridgeNamespaceRules" -}}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end -}}
