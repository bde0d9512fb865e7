{{/*
Object names are fixed, not derived from the release name: the operator's messages name its
ClusterRoles (sunk-sandbox-operator-targets, -secret-reader) and its Lease, and the CRD and the
ClusterRoles are cluster-wide anyway (one installation per cluster).
*/}}
{{- define "ssb.name" -}}sunk-sandbox-operator{{- end -}}

{{- define "ssb.namespace" -}}{{ .Values.namespace.name }}{{- end -}}

{{/* What kustomize's `labels:` puts on every object of manifests/, plus Helm's own labels. */}}
{{- define "ssb.labels" -}}
app.kubernetes.io/name: sunk-sandbox-operator
app.kubernetes.io/part-of: sunk-sandbox-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The operator pods (a Deployment selector is immutable: never add a label here). */}}
{{- define "ssb.selector" -}}
app.kubernetes.io/name: sunk-sandbox-operator
app.kubernetes.io/component: operator
{{- end -}}

{{/* By digest when one is given and no tag is (a released chart pins its image), else by tag. */}}
{{- define "ssb.image" -}}
{{- if and .Values.image.digest (not .Values.image.tag) -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The operator's ServiceAccount as an RBAC subject. */}}
{{- define "ssb.subject" -}}
- kind: ServiceAccount
  name: sunk-sandbox-operator
  namespace: {{ include "ssb.namespace" . }}
{{- end -}}

{{- define "ssb.webhookService" -}}sunk-sandbox-operator-webhook{{- end -}}

{{/* tenancy.allowedReach as SSB_ALLOWED_REACH: `ns=a,b;other=c` (keys sorted). */}}
{{- define "ssb.reach" -}}
{{- $parts := list -}}
{{- range $ns, $targets := . -}}
{{- $parts = append $parts (printf "%s=%s" $ns (join "," $targets)) -}}
{{- end -}}
{{- join ";" $parts -}}
{{- end -}}
