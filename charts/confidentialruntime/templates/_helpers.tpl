{{- define "ccr.selectorLabels" -}}
app.kubernetes.io/name: cloister-node-installer
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "ccr.labels" -}}
{{ include "ccr.selectorLabels" . }}
app.kubernetes.io/component: confidential-runtime
app.kubernetes.io/part-of: cloister
app.kubernetes.io/version: {{ .Values.version | quote }}
{{- end }}
