{{/*
Expand the name of the chart.
*/}}
{{- define "social-posts.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "social-posts.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "social-posts.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "social-posts.labels" -}}
helm.sh/chart: {{ include "social-posts.chart" . }}
{{ include "social-posts.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: social-posts
{{- end }}

{{/*
Selector labels
*/}}
{{- define "social-posts.selectorLabels" -}}
app.kubernetes.io/name: {{ include "social-posts.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "social-posts.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "social-posts.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Labels of the API pods: selector labels plus a component, so the in-chart PostgreSQL
(component "database") never matches the API's selectors.
*/}}
{{- define "social-posts.apiSelectorLabels" -}}
{{ include "social-posts.selectorLabels" . }}
app.kubernetes.io/component: api
{{- end }}

{{- define "social-posts.postgresqlSelectorLabels" -}}
{{ include "social-posts.selectorLabels" . }}
app.kubernetes.io/component: database
{{- end }}

{{- define "social-posts.postgresqlFullname" -}}
{{- printf "%s-postgresql" (include "social-posts.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Pods with this label may reach the API directly when the NetworkPolicy is on (the helm test pod has it).
*/}}
{{- define "social-posts.clientLabel" -}}
{{ include "social-posts.fullname" . }}-client
{{- end }}

{{/*
Name of the Secret holding SECRET_KEY and DB_PASSWORD: the operator's or the chart's.
*/}}
{{- define "social-posts.secretName" -}}
{{- default (include "social-posts.fullname" .) .Values.secret.existingSecret }}
{{- end }}

{{/*
Image reference: repository:tag, pinned by digest when one is given (skaffold passes it separately,
because a locally loaded image has none).
*/}}
{{- define "social-posts.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- if .Values.image.digest }}
{{- $ref = printf "%s@%s" $ref .Values.image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/*
Database connection as the service sees it: the in-chart PostgreSQL or the external one.
*/}}
{{- define "social-posts.dbHost" -}}
{{- if .Values.postgresql.enabled }}
{{- include "social-posts.postgresqlFullname" . }}
{{- else }}
{{- required "database.host is required when postgresql.enabled is false (an unset DB_HOSTNAME would make the service use its embedded, non-persistent database)" .Values.database.host }}
{{- end }}
{{- end }}

{{- define "social-posts.dbPort" -}}
{{- if .Values.postgresql.enabled }}5432{{ else }}{{ .Values.database.port }}{{ end }}
{{- end }}

{{- define "social-posts.dbName" -}}
{{- if .Values.postgresql.enabled }}{{ .Values.postgresql.database }}{{ else }}{{ .Values.database.name }}{{ end }}
{{- end }}

{{- define "social-posts.dbUser" -}}
{{- if .Values.postgresql.enabled }}{{ .Values.postgresql.user }}{{ else }}{{ .Values.database.user }}{{ end }}
{{- end }}

{{/*
Replicas that run at the least: decides whether a PodDisruptionBudget makes sense.
*/}}
{{- define "social-posts.minReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.minReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
Guards across values, which values.schema.json cannot express.
*/}}
{{- define "social-posts.validate" -}}
{{- $drain := add .Values.config.shutdownDelaySeconds .Values.config.shutdownTimeoutSeconds }}
{{- if le (int .Values.terminationGracePeriodSeconds) (int $drain) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed config.shutdownDelaySeconds + config.shutdownTimeoutSeconds (%d), or Kubernetes kills pods mid-drain" (int .Values.terminationGracePeriodSeconds) (int $drain)) }}
{{- end }}
{{- if eq (int .Values.metrics.port) (int .Values.containerPort) }}
{{- fail "metrics.port must differ from containerPort: metrics have a listener of their own, which the Ingress never reaches" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) }}
{{- fail "autoscaling.maxReplicas must be at least autoscaling.minReplicas" }}
{{- end }}
{{- end }}

{{/*
The Gateway the HTTPRoutes attach to (gateway.parentRef); an empty namespace means the release's.
*/}}
{{- define "social-posts.gatewayParentRefs" -}}
- group: gateway.networking.k8s.io
  kind: Gateway
  name: {{ required "gateway.parentRef.name is required when gateway.enabled (the existing Gateway the routes attach to)" .Values.gateway.parentRef.name }}
  {{- with .Values.gateway.parentRef.namespace }}
  namespace: {{ . }}
  {{- end }}
  {{- with .Values.gateway.parentRef.sectionName }}
  sectionName: {{ . }}
  {{- end }}
{{- end }}

{{/*
The API Service as the routes' backend.
*/}}
{{- define "social-posts.gatewayBackendRefs" -}}
- group: ""
  kind: Service
  name: {{ include "social-posts.fullname" . }}
  port: {{ .Values.service.port }}
{{- end }}

{{/*
HTTPRoute timeouts for implementations that honour them. NGINX Gateway Fabric 2.6.7 ignores
them (internal/controller/state/graph/httproute.go, checkForUnsupportedHTTPFields, commit
5e34a17a8f7787e90f41d1af91258a556f0795b4), so it gets a ProxySettingsPolicy instead.
*/}}
{{- define "social-posts.gatewayRouteTimeouts" -}}
{{- if ne .Values.gateway.rateLimit.implementation "nginx-gateway-fabric" -}}
timeouts:
  backendRequest: {{ printf "%ds" (int .Values.gateway.timeouts.readSeconds) }}
{{- end }}
{{- end }}
