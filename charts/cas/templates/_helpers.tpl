{{- define "cas.selectorLabels" -}}
app.kubernetes.io/name: cloister-cas
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "cas.labels" -}}
{{ include "cas.selectorLabels" . }}
app.kubernetes.io/component: attestation
app.kubernetes.io/part-of: cloister
app.kubernetes.io/version: {{ .Values.version | quote }}
{{- end }}
{{/* The DNS names clients reach CAS by, which its TLS certificate names. */}}
{{- define "cas.dnsNames" -}}
{{ .Values.name }},{{ .Values.name }}.{{ .Release.Namespace }},{{ .Values.name }}.{{ .Release.Namespace }}.svc,{{ .Values.name }}.{{ .Release.Namespace }}.svc.cluster.local
{{- with .Values.service.loadBalancerIP }},{{ . }}{{ end }}
{{- end }}
