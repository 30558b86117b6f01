{{- define "vault.selectorLabels" -}}
app.kubernetes.io/name: cloister-vault
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "vault.labels" -}}
{{ include "vault.selectorLabels" . }}
app.kubernetes.io/component: secrets
app.kubernetes.io/part-of: cloister
app.kubernetes.io/version: {{ .Values.version | quote }}
{{- end }}
{{/* The headless Service that names each replica for raft and the operator. */}}
{{- define "vault.internal" -}}
{{ .Values.name }}-internal
{{- end }}
