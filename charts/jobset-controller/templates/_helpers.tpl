{{- /*
Object names are upstream's chart's (charts/jobset of sigs.k8s.io/jobset) for the same release
name and values, so a release installed from either chart can be upgraded to the other: helm then
patches the same objects instead of deleting them and creating new ones, and whatever refers to
them by name (bindings, a ServiceMonitor, a NetworkPolicy, scripts) keeps working. That is why
the base name is "jobset", not this chart's name, and why the Deployment's selector carries the
same three labels (a selector cannot change on an existing Deployment).
*/ -}}
{{- define "jobset.name" -}}
{{- default "jobset" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The release name alone when it already contains the base name, else release-name. */ -}}
{{- define "jobset.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "jobset.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "jobset.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- /* The Deployment, its ServiceAccount, its ClusterRole and binding: <fullname>-controller. */ -}}
{{- define "jobset.controllerName" -}}
{{- printf "%s-controller" (include "jobset.fullname" .) -}}
{{- end -}}

{{- define "jobset.labels" -}}
app.kubernetes.io/name: {{ include "jobset.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "jobset.selectorLabels" -}}
app.kubernetes.io/name: {{ include "jobset.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The controller's pods: the Deployment's selector, and what the metrics Service, the
ServiceMonitor, the PodDisruptionBudget and the NetworkPolicy select. */ -}}
{{- define "jobset.controllerSelectorLabels" -}}
{{ include "jobset.selectorLabels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "jobset.controllerLabels" -}}
{{ include "jobset.labels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "jobset.webhookLabels" -}}
{{ include "jobset.labels" . }}
app.kubernetes.io/component: webhook
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

{{- /* The webhook Service, the Secret holding its certificate, the metrics Service and the
metrics certificate's Secret. */ -}}
{{- define "jobset.webhookServiceName" -}}
{{- printf "%s-webhook-service" (include "jobset.fullname" .) -}}
{{- end -}}

{{- define "jobset.webhookSecretName" -}}
{{- printf "%s-webhook-server-cert" (include "jobset.fullname" .) -}}
{{- end -}}

{{- define "jobset.metricsServiceName" -}}
{{- printf "%s-metrics-service" (include "jobset.fullname" .) -}}
{{- end -}}

{{- define "jobset.metricsSecretName" -}}
{{- printf "%s-metrics-server-cert" (include "jobset.fullname" .) -}}
{{- end -}}

{{- /* cert-manager's objects are named after the base name, not the fullname (as upstream's). */ -}}
{{- define "jobset.issuerName" -}}
{{- printf "%s-self-signed-issuer" (include "jobset.name" .) -}}
{{- end -}}

{{- define "jobset.certificateName" -}}
{{- printf "%s-cert" (include "jobset.name" .) -}}
{{- end -}}

{{- define "jobset.metricsCertificateName" -}}
{{- printf "%s-metrics-cert" (include "jobset.name" .) -}}
{{- end -}}

{{- define "jobset.clusterDomain" -}}
{{- .Values.kubernetesClusterDomain | default "cluster.local" -}}
{{- end -}}
