{{- define "las.selectorLabels" -}}
app.kubernetes.io/name: cloister-las
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "las.labels" -}}
{{ include "las.selectorLabels" . }}
app.kubernetes.io/component: local-attestation
app.kubernetes.io/part-of: cloister
app.kubernetes.io/version: {{ .Values.version | quote }}
{{- end }}
