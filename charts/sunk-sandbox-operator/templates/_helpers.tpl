{{/*
Object names are fixed, not derived from the release name: the operator's messages and the doctor
name its ClusterRoles (sunk-sandbox-operator-targets, -secret-reader), its Lease and its
ServiceAccount, the kustomize install has the same names, and the CRD, the ClusterRoles and the
webhook configuration are cluster-wide anyway: one installation per cluster (a second release fails
on Helm's ownership check of the first one's ClusterRoles).
*/}}
{{- define "ssb.name" -}}sunk-sandbox-operator{{- end -}}

{{/* The operator's namespace: namespace.name, or the release's (`helm install -n NS --create-namespace`). */}}
{{- define "ssb.namespace" -}}{{ .Values.namespace.name | default .Release.Namespace }}{{- end -}}

{{/* What kustomize's `labels:` puts on every object of manifests/, plus Helm's own labels and commonLabels. */}}
{{- define "ssb.labels" -}}
app.kubernetes.io/name: sunk-sandbox-operator
app.kubernetes.io/part-of: sunk-sandbox-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The operator's state (the policy ownership records `ssb-policy-…`, one per binding, the previous
values its deletion restores) lives in its namespace. Moving the operator to another namespace would
leave them behind, so that a binding deleted later could not restore its runner's policy; when the
namespace was the release's own (the 0.1.0 chart's `namespace.create`), Helm would delete them.
So a release whose operator runs elsewhere (its ClusterRoleBinding's subject says where) while
records are there is refused, naming both ways on. `lookup` answers only against a cluster: `helm
template` and client-side dry runs skip this.
*/}}
{{- define "ssb.checkNamespaceMove" -}}
{{- $now := include "ssb.namespace" . -}}
{{- $crb := lookup "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" "" "sunk-sandbox-operator" -}}
{{- range ($crb.subjects | default list) -}}
{{- if and (eq .kind "ServiceAccount") (eq .name "sunk-sandbox-operator") (ne .namespace $now) -}}
{{- $was := .namespace -}}
{{- $records := list -}}
{{- range ((lookup "v1" "ConfigMap" $was "").items | default list) -}}
{{- if hasPrefix "ssb-policy-" .metadata.name -}}{{- $records = append $records .metadata.name -}}{{- end -}}
{{- end -}}
{{- if $records -}}
{{- fail (printf "the operator runs in namespace %s, which holds %d policy ownership record(s) (ConfigMaps ssb-policy-…, what deleting each binding restores); these values would move it to %s and leave them behind. Keep it there: --set namespace.name=%s (and --set namespace.create=true if this release created it, as the 0.1.0 chart did); or delete every binding first (kubectl delete ssb -A --all), then move (docs/install.md: Upgrading the chart from 0.1.0)" $was (len $records) $now $was) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* namespace.create makes a namespace of its own: never the release's, which Helm needs before rendering. */}}
{{- define "ssb.checkNamespace" -}}
{{- if and .Values.namespace.create (not .Values.namespace.name) -}}
{{- fail "namespace.create needs namespace.name (another namespace than the release's; for the release's own, use `helm install -n NS --create-namespace`)" -}}
{{- end -}}
{{- if and .Values.namespace.create (eq .Values.namespace.name .Release.Namespace) -}}
{{- fail (printf "namespace.create: %s is the release's namespace, which exists before the chart is applied (helm --create-namespace makes it); set namespace.create=false" .Release.Namespace) -}}
{{- end -}}
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
