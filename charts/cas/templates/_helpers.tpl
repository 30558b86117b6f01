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
{{/* The scheduled backup's objects: not CAS's selector, so its pods are
never taken for a replica. */}}
{{- define "cas.backupLabels" -}}
app.kubernetes.io/name: cloister-cas-backup
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: backup
app.kubernetes.io/part-of: cloister
app.kubernetes.io/version: {{ .Values.version | quote }}
{{- end }}
