{{/*
Names, labels and the settings several templates share. Kept here so that the Deployment's
environment, the RBAC and the Secrets can never disagree about a name.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "rollout-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>" (just the release name when it already holds the chart name), at most
63 characters: the prefix of every resource name. */}}
{{- define "rollout-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<suffix>", at most 63 characters. Call with (list $ "suffix"). */}}
{{- define "rollout-operator.suffixed" -}}
{{- $root := index . 0 -}}
{{- $suffix := index . 1 -}}
{{- printf "%s-%s" (include "rollout-operator.fullname" $root | trunc (int (sub 62 (len $suffix)))) $suffix | trimSuffix "-" -}}
{{- end -}}

{{- define "rollout-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. Call with (list $ "component"). */}}
{{- define "rollout-operator.labels" -}}
{{- $root := index . 0 -}}
helm.sh/chart: {{ include "rollout-operator.chart" $root }}
{{ include "rollout-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/part-of: rollout
{{- end -}}

{{/* Labels that select one component's Pods. Call with (list $ "component"). */}}
{{- define "rollout-operator.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "rollout-operator.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* The operator's ServiceAccount. */}}
{{- define "rollout-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "rollout-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The trial Pods' ServiceAccount (no permissions); empty when the chart makes none. */}}
{{- define "rollout-operator.trialServiceAccountName" -}}
{{- if .Values.trialPods.serviceAccount.create -}}
{{- default (include "rollout-operator.suffixed" (list . "trial")) .Values.trialPods.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* "true" when the operator watches the whole cluster, "false" for a list of namespaces. */}}
{{- define "rollout-operator.clusterWide" -}}
{{- if .Values.watchNamespaces -}}false{{- else -}}true{{- end -}}
{{- end -}}

{{/* A values list of namespace names, checked, each once, as JSON. Call with
(list "watchNamespaces" .Values.watchNamespaces). */}}
{{- define "rollout-operator.namespaceList" -}}
{{- $field := index . 0 -}}
{{- $value := index . 1 -}}
{{- $namespaces := list -}}
{{- if not (kindIs "slice" $value) -}}
{{- fail (printf "%s must be a list of namespace names, not %v" $field $value) -}}
{{- else -}}
{{- range $value -}}
{{- if not (and (kindIs "string" .) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .)) -}}
{{- fail (printf "%s: %v is not a namespace name" $field .) -}}
{{- end -}}
{{- end -}}
{{- $namespaces = uniq $value -}}
{{- end -}}
{{- toJson $namespaces -}}
{{- end -}}

{{/* The watched namespaces (JSON list); empty for the whole cluster. */}}
{{- define "rollout-operator.watchNamespaces" -}}
{{- include "rollout-operator.namespaceList" (list "watchNamespaces" .Values.watchNamespaces) -}}
{{- end -}}

{{/* Namespaces where trials may run and so need the trial ServiceAccount and the chart's storage
Secret: the release namespace, the watched namespaces and trialNamespaces, each once. JSON list. */}}
{{- define "rollout-operator.trialNamespaces" -}}
{{- $namespaces := list .Release.Namespace -}}
{{- $namespaces = concat $namespaces (include "rollout-operator.watchNamespaces" . | fromJsonArray) -}}
{{- $namespaces = concat $namespaces (include "rollout-operator.namespaceList" (list "trialNamespaces" .Values.trialNamespaces) | fromJsonArray) -}}
{{- toJson (uniq $namespaces) -}}
{{- end -}}

{{- define "rollout-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "rollout-operator.runnerImage" -}}
{{- printf "%s:%s" .Values.runner.image.repository (default .Chart.AppVersion .Values.runner.image.tag) -}}
{{- end -}}

{{- define "rollout-operator.minioName" -}}
{{- include "rollout-operator.suffixed" (list . "minio") -}}
{{- end -}}

{{/* "true" when the chart makes the storage credentials Secret itself (inline credentials, or
MinIO without an existing Secret). */}}
{{- define "rollout-operator.chartMakesStorageSecret" -}}
{{- $c := .Values.storage.credentials -}}
{{- if and (not $c.existingSecret) (or $c.accessKeyId $c.secretAccessKey .Values.minio.enabled) -}}
true
{{- end -}}
{{- end -}}

{{/* The storage credentials Secret (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); empty when the
ambient credentials chain is used. */}}
{{- define "rollout-operator.storageSecretName" -}}
{{- if .Values.storage.credentials.existingSecret -}}
{{- .Values.storage.credentials.existingSecret -}}
{{- else if include "rollout-operator.chartMakesStorageSecret" . -}}
{{- include "rollout-operator.suffixed" (list . "storage") -}}
{{- end -}}
{{- end -}}

{{/* The storage endpoint: storage.endpoint, else the in-cluster MinIO when it is on. */}}
{{- define "rollout-operator.storageEndpoint" -}}
{{- if .Values.storage.endpoint -}}
{{- .Values.storage.endpoint -}}
{{- else if .Values.minio.enabled -}}
{{- printf "http://%s.%s.svc:9000" (include "rollout-operator.minioName" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* Trial Pod defaults as the operator reads them (ROLLOUT_DEFAULT_POD_OVERRIDES): the camelCase
fields of a RolloutJob's spec.pod, empty ones left out. */}}
{{- define "rollout-operator.defaultPodOverrides" -}}
{{- $t := .Values.trialPods -}}
{{- $overrides := dict -}}
{{- with $t.nodeSelector }}{{ $_ := set $overrides "nodeSelector" . }}{{ end -}}
{{- with $t.tolerations }}{{ $_ := set $overrides "tolerations" . }}{{ end -}}
{{- with $t.runtimeClassName }}{{ $_ := set $overrides "runtimeClassName" . }}{{ end -}}
{{- with $t.priorityClassName }}{{ $_ := set $overrides "priorityClassName" . }}{{ end -}}
{{- with $t.imagePullSecrets }}{{ $_ := set $overrides "imagePullSecrets" . }}{{ end -}}
{{- toJson $overrides -}}
{{- end -}}

{{/* Restricted Pod Security for every Pod of the chart: non-root (uid 65532), RuntimeDefault
seccomp, fsGroup so that mounted Secrets and emptyDirs are readable. */}}
{{- define "rollout-operator.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Restricted Pod Security for every container: no privilege escalation, no capabilities,
read-only root filesystem (writable paths are emptyDirs). */}}
{{- define "rollout-operator.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
An env value (or command/args item) as the kubelet must see it to pass it on unchanged: the
kubelet expands `$(NAME)` and turns `$$` into `$` in those fields, so every `$` is doubled.
Usage: value: {{ include "rollout-operator.literal" .Values.storage.prefix }} (quoted here).
*/}}
{{- define "rollout-operator.literal" -}}
{{- . | toString | replace "$" "$$" | quote -}}
{{- end }}

{{/* Where the storage credentials Secret is mounted in a container that reads it as files
(ROLLOUT_STORAGE_CREDENTIALS_DIR). */}}
{{- define "rollout-operator.storageCredentialsDir" -}}
/var/run/secrets/rollout/storage
{{- end -}}

{{/* The object storage settings of a process that reads and writes the bucket itself, as env
items (ROLLOUT_STORAGE_*): bucket, prefix, endpoint, region, path style and, when there is a
credentials Secret, the directory it is mounted in (`storageCredentialsMount`). The same values
as the operator's Deployment sets inline (which could include this too); the operator adds
ROLLOUT_STORAGE_CREDENTIALS_SECRET, the Secret it gives trial Pods. */}}
{{- define "rollout-operator.storageEnv" -}}
- name: ROLLOUT_STORAGE_BUCKET
  value: {{ include "rollout-operator.literal" (required "storage.bucket is required" .Values.storage.bucket) }}
- name: ROLLOUT_STORAGE_PREFIX
  value: {{ include "rollout-operator.literal" .Values.storage.prefix }}
- name: ROLLOUT_STORAGE_ENDPOINT
  value: {{ include "rollout-operator.literal" (include "rollout-operator.storageEndpoint" .) }}
- name: ROLLOUT_STORAGE_REGION
  value: {{ include "rollout-operator.literal" .Values.storage.region }}
- name: ROLLOUT_STORAGE_PATH_STYLE
  value: {{ include "rollout-operator.literal" (or .Values.storage.pathStyle .Values.minio.enabled | toString) }}
{{- if include "rollout-operator.storageSecretName" . }}
- name: ROLLOUT_STORAGE_CREDENTIALS_DIR
  value: {{ include "rollout-operator.storageCredentialsDir" . }}
{{- end }}
{{- end -}}

{{/* The volumeMounts item of the storage credentials Secret; empty without one. */}}
{{- define "rollout-operator.storageCredentialsMount" -}}
{{- if include "rollout-operator.storageSecretName" . -}}
- name: storage-credentials
  mountPath: {{ include "rollout-operator.storageCredentialsDir" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{/* The volumes item of the storage credentials Secret; empty without one. */}}
{{- define "rollout-operator.storageCredentialsVolume" -}}
{{- with include "rollout-operator.storageSecretName" . -}}
- name: storage-credentials
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end -}}
{{- end -}}

{{/* The bridge's name: its Deployment, ServiceAccount, RBAC and its identity as a claimer of
trials (ROLLOUT_BRIDGE_IDENTITY), which must not change across restarts. */}}
{{- define "rollout-operator.bridgeName" -}}
{{- include "rollout-operator.suffixed" (list . "bridge") -}}
{{- end -}}

{{/* The bridge's image: bridge.image, each field defaulting to the operator's image's. */}}
{{- define "rollout-operator.bridgeImage" -}}
{{- $image := .Values.bridge.image -}}
{{- printf "%s:%s" (default .Values.image.repository $image.repository) (default (default .Chart.AppVersion .Values.image.tag) $image.tag) -}}
{{- end -}}

{{/* bridge.limits, checked, as ROLLOUT_BRIDGE_LIMITS reads it: "provider=N,..." by provider
name. A map of provider names to whole numbers, 1 or more, at least one provider. */}}
{{- define "rollout-operator.bridgeLimits" -}}
{{- $limits := .Values.bridge.limits -}}
{{- if not (and (kindIs "map" $limits) $limits) -}}
{{- fail (printf "bridge.limits must be a map of provider name to the trials run at once, such as {docker: 16}, not %v" $limits) -}}
{{- end -}}
{{- $items := list -}}
{{- range $provider, $limit := $limits -}}
{{- if not (regexMatch "^[a-z][a-z0-9-]*$" $provider) -}}
{{- fail (printf "bridge.limits: %v is not a provider name" $provider) -}}
{{- end -}}
{{- if not (and (or (kindIs "float64" $limit) (kindIs "int64" $limit) (kindIs "int" $limit)) (eq (float64 $limit) (float64 (int64 $limit))) (ge (float64 $limit) 1.0)) -}}
{{- fail (printf "bridge.limits.%s: %v (%s) is not a whole number, 1 or more" $provider $limit (kindOf $limit)) -}}
{{- end -}}
{{- $items = append $items (printf "%s=%d" $provider (int64 $limit)) -}}
{{- end -}}
{{- join "," $items -}}
{{- end -}}
