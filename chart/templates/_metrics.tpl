{{/*
Helpers of prometheusrule.yaml and dashboard-configmap.yaml.
*/}}

{{/*
The labels and annotations of one alert. Call with (dict "root" $ "name" <alert> "config" <its values>
"summary" <text> "description" <text>); summary and description may use Prometheus' template
syntax ({{ $labels.pod }}, {{ $value }}). The runbook is the alert's section of chart/README.md
("Alerts and runbooks"): its heading is the alert's name, so the anchor is the name in lower case.
*/}}
{{- define "social-posts.alertMeta" -}}
{{- $rule := .root.Values.metrics.prometheusRule }}
{{- $anchor := lower .name -}}
labels:
  severity: {{ .config.severity | quote }}
  {{- with $rule.alertLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  summary: {{ .summary | quote }}
  description: {{ .description | quote }}
  runbook: {{ printf "chart/README.md#%s" $anchor | quote }}
  {{- with $rule.runbookBaseUrl }}
  runbook_url: {{ printf "%s#%s" . $anchor | quote }}
  {{- end }}
{{- end }}
