{{/* The label every object of the driver carries. */}}
{{- define "gcsfuse-csi.labels" -}}
app.kubernetes.io/part-of: gcsfuse-csi
{{- end }}

{{/* image REF: repository:tag of one of .Values.images. */}}
{{- define "gcsfuse-csi.image" -}}
{{ .repository }}:{{ .tag }}
{{- end }}
