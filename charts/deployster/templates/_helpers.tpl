{{/* The release's full name, at most 63 characters. */}}
{{- define "deployster.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "deployster.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "deployster.labels" -}}
{{ include "deployster.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "deployster.serviceAccountName" -}}
{{- default (include "deployster.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
What the controller does with the API in the namespaces it watches: exactly
src/controller/rbac.rs's API_ACCESS with scope Watched (tests/apiserver/helm.rs holds them equal).
*/}}
{{- define "deployster.watchedRules" -}}
- apiGroups: ["deployster.io"]
  resources: ["manifests"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["deployster.io"]
  resources: ["manifests/status"]
  verbs: ["patch"]
- apiGroups: ["deployster.io"]
  resources: ["pipelines"]
  verbs: ["list", "watch"]
- apiGroups: ["deployster.io"]
  resources: ["pipelines/status"]
  verbs: ["patch"]
- apiGroups: ["deployster.io"]
  resources: ["manifestpreviews"]
  verbs: ["list", "watch", "delete"]
- apiGroups: ["deployster.io"]
  resources: ["manifestpreviews/status"]
  verbs: ["patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "list", "watch", "create", "update"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "impersonate"]
{{- end -}}

{{/* Running image types as Pods, in the watched namespaces: API_ACCESS with scope Pods. */}}
{{- define "deployster.podRules" -}}
- apiGroups: [""]
  resources: ["persistentvolumeclaims", "pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["patch", "delete"]
- apiGroups: [""]
  resources: ["pods/exec"]
  verbs: ["get", "create"]
{{- end -}}

{{/* The controller's image, which also carries the helper the Pods of image types run. */}}
{{- define "deployster.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Leader election, in the release's namespace: API_ACCESS with scope Lease. */}}
{{- define "deployster.leaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "create", "update", "delete"]
{{- end -}}

{{/* Refuses combinations the schema cannot express. */}}
{{- define "deployster.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: true (otherwise every replica reconciles every Manifest)" -}}
{{- end -}}
{{- if and .Values.sharding.enabled (not .Values.leaderElection.enabled) -}}
{{- fail "sharding.enabled needs leaderElection.enabled: true (replicas share the work through its Leases)" -}}
{{- end -}}
{{- range .Values.extraArgs -}}
{{- if or (eq . "--namespace") (hasPrefix "--namespace=" .) -}}
{{- fail "extraArgs: give namespaces in watchNamespaces, so that the chart's RBAC covers them" -}}
{{- end -}}
{{- if or (eq . "--lease-namespace") (hasPrefix "--lease-namespace=" .) -}}
{{- fail "extraArgs: the lease lives in the release's namespace, where the chart grants access to it" -}}
{{- end -}}
{{- end -}}
{{- /*
A Role in a namespace that does not exist cannot be created, and the controller would be
refused there: say which. `lookup` answers only when helm talks to a cluster (not for
`helm template`), which the release's own namespace tells.
*/ -}}
{{- if lookup "v1" "Namespace" "" .Release.Namespace -}}
{{- range .Values.watchNamespaces -}}
{{- if not (lookup "v1" "Namespace" "" .) -}}
{{- fail (printf "watchNamespaces: namespace %q does not exist; create it first (the chart gives the controller a Role in each watched namespace)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) -}}
{{- fail "metrics.serviceMonitor.enabled needs the Prometheus operator's monitoring.coreos.com/v1 ServiceMonitor API, which this cluster does not serve" -}}
{{- end -}}
{{- if and .Values.metrics.prometheusRule.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule")) -}}
{{- fail "metrics.prometheusRule.enabled needs the Prometheus operator's monitoring.coreos.com/v1 PrometheusRule API, which this cluster does not serve (the rules are also files/prometheus-rules.yaml of the chart, for a plain Prometheus)" -}}
{{- end -}}
{{- end -}}

{{/* A duration of the form Ns, Nm or Nh (values.schema.json allows no other), in seconds. */}}
{{- define "deployster.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "s" $d -}}{{ trimSuffix "s" $d | int }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else -}}{{ mul (trimSuffix "h" $d | int) 3600 }}
{{- end -}}
{{- end -}}
