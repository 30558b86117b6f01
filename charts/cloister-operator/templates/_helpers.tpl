{{- define "operator.name" -}}cloister-operator{{- end }}
{{- define "operator.selectorLabels" -}}
app.kubernetes.io/name: cloister-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "operator.labels" -}}
{{ include "operator.selectorLabels" . }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: cloister
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{- define "operator.certSecret" -}}cloister-operator-webhook-cert{{- end }}
{{- define "operator.webhookService" -}}cloister-operator-webhook{{- end }}
{{- /* clientConfig of one webhook: the Service, or a URL beside the cluster */ -}}
{{- define "operator.clientConfig" -}}
clientConfig:
{{- if .root.Values.webhook.url }}
  url: {{ printf "%s%s" .root.Values.webhook.url .path | quote }}
{{- else }}
  service:
    name: {{ include "operator.webhookService" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path | quote }}
    port: 443
{{- end }}
{{- end }}
{{- define "operator.webhookAnnotations" -}}
{{- if .Values.webhook.certManager.enabled }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "operator.certSecret" . }}
{{- end }}
{{- end }}
