{{- define "nitroplugin.selectorLabels" -}}
app.kubernetes.io/name: cloister-nitro-plugin
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "nitroplugin.labels" -}}
{{ include "nitroplugin.selectorLabels" . }}
app.kubernetes.io/component: device-plugin
app.kubernetes.io/part-of: cloister
{{- end }}
