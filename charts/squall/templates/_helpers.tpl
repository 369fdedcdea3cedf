{{/* The chart name, cut to 63 characters. */}}
{{- define "squall.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name of every namespaced object, of the webhook configurations and the release flag. */}}
{{- define "squall.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "squall.selectorLabels" -}}
app.kubernetes.io/name: {{ include "squall.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "squall.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "squall.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "squall.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "squall.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Service in front of the webhook server; its DNS names go into the certificate. */}}
{{- define "squall.webhookService" -}}
{{- printf "%s-webhook" (include "squall.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Service in front of the admin port (metrics scrapers). */}}
{{- define "squall.metricsService" -}}
{{- printf "%s-metrics" (include "squall.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* external mode: the Secret with the serving certificate. */}}
{{- define "squall.certSecret" -}}
{{- default (printf "%s-webhook-cert" (include "squall.fullname" .)) .Values.certificates.secretName }}
{{- end }}

{{/* The operator's own identity; its RoleSet writes skip the RoleSet webhooks. */}}
{{- define "squall.operatorUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "squall.serviceAccountName" .) }}
{{- end }}

{{/* Extra serving-certificate names: the configured ones plus the host of webhook.url. */}}
{{- define "squall.extraSANs" -}}
{{- $sans := .Values.certificates.extraSANs }}
{{- if .Values.webhook.url }}
{{- $sans = append $sans (urlParse .Values.webhook.url).hostname }}
{{- end }}
{{- join "," (uniq $sans) }}
{{- end }}

{{- /* What the controllers read and write in the namespaces they serve (docs/architecture.md#the-process). The shared
e2e operator runs under the chart's ServiceAccount, so a missing rule fails the suite. */}}
{{- define "squall.workloadRules" -}}
- apiGroups: ["orchestration.aibrix.ai"]
  resources: ["stormservices"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["orchestration.aibrix.ai"]
  resources: ["rolesets", "podsets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["orchestration.aibrix.ai"]
  resources: ["stormservices/status", "rolesets/status", "podsets/status"]
  verbs: ["patch"]
# Children carry blockOwnerDeletion: with OwnerReferencesPermissionEnforcement the creator
# needs update on the owner's finalizers.
- apiGroups: ["orchestration.aibrix.ai"]
  resources: ["stormservices/finalizers", "rolesets/finalizers", "podsets/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["apps"]
  resources: ["controllerrevisions"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# The gang schedulers' PodGroups, made only when their CRD is served; owner references
# remove them with their RoleSet or PodSet.
- apiGroups: ["scheduling.x-k8s.io", "scheduling.volcano.sh", "scheduling.godel.kubewharf.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "watch", "create", "patch"]
{{- end }}
