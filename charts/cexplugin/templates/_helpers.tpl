{{- define "cexplugin.selectorLabels" -}}
app.kubernetes.io/name: cloister-cex-plugin
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "cexplugin.labels" -}}
{{ include "cexplugin.selectorLabels" . }}
app.kubernetes.io/component: device-plugin
app.kubernetes.io/part-of: cloister
{{- end }}
