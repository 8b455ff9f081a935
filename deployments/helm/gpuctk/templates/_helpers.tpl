{{/* The image, tag defaulting to the chart's appVersion. */}}
{{- define "gpuctk.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The ConfigMap the pods read: config.name's, else the chart's. */}}
{{- define "gpuctk.configMap" -}}
{{ .Values.config.name | default "gpuctk-config" }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "gpuctk.labels" -}}
app.kubernetes.io/part-of: gpuctk
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Node selection and tolerations, the same for both DaemonSets. */}}
{{- define "gpuctk.placement" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* "true" when the plugin follows each node's nvidia.com/device-plugin.config
label: config.perNode, or config.map with several configs to choose from. */}}
{{- define "gpuctk.perNode" -}}
{{- if or .Values.config.perNode (gt (len .Values.config.map) 1) }}true{{ end -}}
{{- end -}}
