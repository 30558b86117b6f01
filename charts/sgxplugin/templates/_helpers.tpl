{{- define "sgxplugin.selectorLabels" -}}
app.kubernetes.io/name: cloister-sgx-plugin
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "sgxplugin.labels" -}}
{{ include "sgxplugin.selectorLabels" . }}
app.kubernetes.io/component: device-plugin
app.kubernetes.io/part-of: cloister
{{- end }}
