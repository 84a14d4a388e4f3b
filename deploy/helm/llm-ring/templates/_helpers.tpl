{{/* Labels of every object: those of deploy/k8s, plus Helm's own. */}}
{{- define "llm-ring.labels" -}}
app.kubernetes.io/name: router
app.kubernetes.io/part-of: llm-ring
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The router pods' selector (as deploy/k8s: one release per namespace). */}}
{{- define "llm-ring.selector" -}}
app.kubernetes.io/name: router
{{- end -}}

{{/* router.yaml: .Values.config with its strings passed through tpl. */}}
{{- define "llm-ring.config" -}}
{{ tpl (toYaml .Values.config) . }}
{{- end -}}
