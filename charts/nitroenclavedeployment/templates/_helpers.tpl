{{- define "ned.selectorLabels" -}}
app.kubernetes.io/name: cloister-enclave
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "ned.labels" -}}
{{ include "ned.selectorLabels" . }}
app.kubernetes.io/component: enclave
app.kubernetes.io/part-of: cloister
app.kubernetes.io/version: {{ .Values.version | quote }}
{{- end }}
