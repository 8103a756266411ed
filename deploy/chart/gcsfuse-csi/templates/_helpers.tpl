{{/* The label every object of the driver carries. */}}
{{- define "gcsfuse-csi.labels" -}}
app.kubernetes.io/part-of: gcsfuse-csi
{{- end }}

{{/* image REF: repository:tag of one of .Values.images, pinned @digest when it has one
(the packaged release chart's, hack/release.sh). */}}
{{- define "gcsfuse-csi.image" -}}
{{ .repository }}:{{ .tag }}{{ with .digest }}@{{ . }}{{ end }}
{{- end }}

{{/* What both webhook entries share. */}}
{{- define "gcsfuse-csi.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
# Another webhook that adds containers after us gets us called again; our re-invocation
# leaves the sidecar of a pod we already injected in place and only re-checks the init
# containers (the native sidecar's GCSFUSE_INIT_CONTAINERS; a legacy pod whose new init
# container reads the bucket is refused). An unchanged pod gets no patch.
reinvocationPolicy: IfNeeded
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
clientConfig:
  {{- with .Values.webhook.tls.caBundle }}
  caBundle: {{ . }}
  {{- end }}
  service:
    name: gcsfuse-webhook
    namespace: {{ .Release.Namespace }}
    path: /inject
    port: 443
rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["pods"]
    scope: Namespaced
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: ["kube-system", {{ .Release.Namespace | quote }}]
{{- end }}

{{/*
gcsfuse-csi.nodeFederated: "true" when the node plugin federates every volume without an
identity of its own (node.wifProvider, or --wif-provider=VALUE among node.extraArgs, whose
schema takes only flags, so never the value apart), so that the webhook (--node-federated) refuses no hostNetwork pod
as one that would read as the node, and refuses a credential ConfigMap that gcsfuse would
not use; "" otherwise.
*/}}
{{- define "gcsfuse-csi.nodeFederated" -}}
{{- $federated := ne (.Values.node.wifProvider | default "") "" -}}
{{- range .Values.node.extraArgs -}}
{{- if and (hasPrefix "--wif-provider=" .) (ne . "--wif-provider=") -}}
{{- $federated = true -}}
{{- end -}}
{{- end -}}
{{- if $federated }}true{{ end -}}
{{- end -}}

{{/*
gcsfuse-csi.sharedFederated: "true" when the node plugin federates every shared volume
without an identity of its own (mounter.identityProvider, or nodeFederated), so that the
webhook refuses none for the mounter's Application Default Credentials; "" otherwise.
*/}}
{{- define "gcsfuse-csi.sharedFederated" -}}
{{- if or (ne (.Values.mounter.identityProvider | default "") "") (include "gcsfuse-csi.nodeFederated" .) }}true{{ end -}}
{{- end -}}
