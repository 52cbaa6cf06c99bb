{{- define "jobset.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "jobset.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s" (include "jobset.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "jobset.labels" -}}
app.kubernetes.io/name: {{ include "jobset.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "jobset.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jobset.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The ServiceAccounts kube-prometheus runs Prometheus and its operator as. */ -}}
{{- define "jobset.prometheusAccounts" -}}
- kind: ServiceAccount
  name: prometheus-k8s
  namespace: {{ .Values.prometheus.prometheusNamespace }}
- kind: ServiceAccount
  name: prometheus-operator
  namespace: {{ .Values.prometheus.prometheusNamespace }}
{{- end -}}

{{/* The webhook Service and the Secret holding its certificate (upstream's Helm names). */}}
{{- define "jobset.webhookServiceName" -}}
{{- printf "%s-webhook-service" (include "jobset.fullname" .) -}}
{{- end -}}

{{- define "jobset.webhookSecretName" -}}
{{- printf "%s-webhook-server-cert" (include "jobset.fullname" .) -}}
{{- end -}}
