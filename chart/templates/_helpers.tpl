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

{{- define "social-posts.postgresqlHeadlessName" -}}
{{- printf "%s-hl" (include "social-posts.postgresqlFullname" . | trunc 60 | trimSuffix "-") }}
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
Image reference of the API: repository:tag, pinned by digest when one is given (skaffold passes it
separately, because a locally loaded image has none).
*/}}
{{- define "social-posts.image" -}}
{{- include "social-posts.imageRef" (dict "repository" .Values.image.repository "tag" (.Values.image.tag | default .Chart.AppVersion) "digest" .Values.image.digest "ctx" .) }}
{{- end }}

{{/*
CloudNativePG: the Cluster's name (its Services are <name>-rw/-ro/-r, its Secrets <name>-app and
<name>-ca) and the Pooler's, which must differ from every Cluster's and from those Services.
*/}}
{{- define "social-posts.cnpgClusterName" -}}
{{- default (printf "%s-db" (include "social-posts.fullname" .)) .Values.cnpg.cluster.name | trunc 50 | trimSuffix "-" }}
{{- end }}

{{- define "social-posts.cnpgPoolerName" -}}
{{- default (printf "%s-pooler-rw" (include "social-posts.cnpgClusterName" .)) .Values.cnpg.pooler.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Reads on standbys (cnpg.reads): "true" when the pods get a read endpoint, which needs a standby.
The ro Pooler's name must differ from the Cluster's, its Services and the rw Pooler's.
*/}}
{{- define "social-posts.cnpgReads" -}}
{{- if and .Values.cnpg.enabled .Values.cnpg.reads.enabled (gt (int .Values.cnpg.cluster.instances) 1) }}true{{ end }}
{{- end }}

{{- define "social-posts.cnpgReadPooler" -}}
{{- if and (include "social-posts.cnpgReads" .) .Values.cnpg.reads.pooler.enabled }}true{{ end }}
{{- end }}

{{- define "social-posts.cnpgReadPoolerName" -}}
{{- default (printf "%s-pooler-ro" (include "social-posts.cnpgClusterName" .)) .Values.cnpg.reads.pooler.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The read endpoint (DB_READ_HOSTNAME): the ro Pooler, or the Cluster's -ro Service (ready standbys). */}}
{{- define "social-posts.dbReadHost" -}}
{{- if include "social-posts.cnpgReadPooler" . }}{{ include "social-posts.cnpgReadPoolerName" . }}{{ else }}{{ include "social-posts.cnpgClusterName" . }}-ro{{ end }}
{{- end }}

{{/* Connections per pod to the read endpoint (DB_READ_POOL_MAX). */}}
{{- define "social-posts.dbReadPoolMax" -}}
{{- default .Values.database.poolMax .Values.cnpg.reads.poolMax }}
{{- end }}

{{/*
Backups (backup.enabled): the ObjectStore of the release, and the folder (the plugin's serverName)
the Cluster archives to, its own name unless backup.serverName says otherwise.
*/}}
{{- define "social-posts.backupObjectStoreName" -}}
{{- default (printf "%s-backup" (include "social-posts.fullname" .)) .Values.backup.objectStore.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "social-posts.backupServerName" -}}
{{- default (include "social-posts.cnpgClusterName" .) .Values.backup.serverName }}
{{- end }}

{{/*
The basic-auth Secret with the database owner's password: the operator's (bootstrap.initdb.secret)
or the one CloudNativePG generates, <cluster>-app.
*/}}
{{- define "social-posts.cnpgAppSecret" -}}
{{- default (printf "%s-app" (include "social-posts.cnpgClusterName" .)) .Values.cnpg.cluster.appSecret }}
{{- end }}

{{/* Where the cluster CA's certificate (ca.crt only, never ca.key) is mounted in the API pods. */}}
{{- define "social-posts.cnpgCaFile" -}}
/etc/social-posts/db-ca/ca.crt
{{- end }}

{{/*
The database the service connects to: the CloudNativePG Pooler (or the Cluster's -rw Service), the
in-chart PostgreSQL or the external one.
*/}}
{{- define "social-posts.dbHost" -}}
{{- if .Values.cnpg.enabled }}
{{- if .Values.cnpg.pooler.enabled }}{{ include "social-posts.cnpgPoolerName" . }}{{ else }}{{ include "social-posts.cnpgClusterName" . }}-rw{{ end }}
{{- else if .Values.postgresql.enabled }}
{{- include "social-posts.postgresqlFullname" . }}
{{- else }}
{{- required "database.host is required when neither cnpg.enabled nor postgresql.enabled (an unset DB_HOSTNAME would make the service use its embedded, non-persistent database)" .Values.database.host }}
{{- end }}
{{- end }}

{{- define "social-posts.dbPort" -}}
{{- if or .Values.cnpg.enabled .Values.postgresql.enabled }}5432{{ else }}{{ .Values.database.port }}{{ end }}
{{- end }}

{{- define "social-posts.dbName" -}}
{{- if .Values.cnpg.enabled }}{{ .Values.cnpg.cluster.database }}{{ else if .Values.postgresql.enabled }}{{ .Values.postgresql.database }}{{ else }}{{ .Values.database.name }}{{ end }}
{{- end }}

{{- define "social-posts.dbUser" -}}
{{- if .Values.cnpg.enabled }}{{ .Values.cnpg.cluster.owner }}{{ else if .Values.postgresql.enabled }}{{ .Values.postgresql.user }}{{ else }}{{ .Values.database.user }}{{ end }}
{{- end }}

{{- define "social-posts.dbSsl" -}}
{{- if .Values.cnpg.enabled }}true{{ else if .Values.postgresql.enabled }}false{{ else }}{{ .Values.database.ssl }}{{ end }}
{{- end }}

{{/*
Replicas that run at the most: the autoscaler's ceiling, or the fixed count.
*/}}
{{- define "social-posts.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.maxReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
PgBouncer's server connections per pooler instance: given, or the steady fleet's pools
(minimum replicas x poolMax) spread over the pooler's instances. More clients than that queue in
the pooler (transaction mode) instead of opening server connections.
*/}}
{{- define "social-posts.cnpgDefaultPoolSize" -}}
{{- if .Values.cnpg.pooler.defaultPoolSize }}{{ .Values.cnpg.pooler.defaultPoolSize }}{{ else }}
{{- $fleet := mul (int (include "social-posts.minReplicas" .)) (int .Values.database.poolMax) }}
{{- $instances := int .Values.cnpg.pooler.instances }}
{{- div (add $fleet (sub $instances 1)) $instances }}
{{- end }}
{{- end }}

{{/* The ro Pooler's server connections per instance: given, or the steady fleet's read pools spread over its instances. */}}
{{- define "social-posts.cnpgReadPoolSize" -}}
{{- if .Values.cnpg.reads.pooler.defaultPoolSize }}{{ .Values.cnpg.reads.pooler.defaultPoolSize }}{{ else }}
{{- $fleet := mul (int (include "social-posts.minReplicas" .)) (int (include "social-posts.dbReadPoolMax" .)) }}
{{- $instances := int .Values.cnpg.reads.pooler.instances }}
{{- div (add $fleet (sub $instances 1)) $instances }}
{{- end }}
{{- end }}

{{/*
The read budget, checked at render like the write one. Every pod the Deployment may run at once
opens up to the read pool's connections (no migration, no probe: readiness never asks a standby).
They must fit one ro PgBouncer's max_client_conn, or, without the ro Pooler, one standby's
max_connections less 3 (the -ro Service may lead every connection to the same standby). Behind the
ro Pooler, all its server pools may land on one standby too.
*/}}
{{- define "social-posts.validateReadBudget" -}}
{{- if include "social-posts.cnpgReads" . }}
{{- $replicas := int (include "social-posts.maxReplicas" .) }}
{{- $poolMax := int (include "social-posts.dbReadPoolMax" .) }}
{{- $clients := mul (add $replicas 1) $poolMax }}
{{- $how := printf "(%d replicas at most + 1 surge) x (read pool %d) = %d connections" $replicas $poolMax (int $clients) }}
{{- $maxConnections := int .Values.cnpg.cluster.maxConnections }}
{{- if include "social-posts.cnpgReadPooler" . }}
{{- $maxClientConn := int .Values.cnpg.reads.pooler.maxClientConn }}
{{- if gt (int $clients) $maxClientConn }}
{{- fail (printf "read connection budget: %s exceed cnpg.reads.pooler.maxClientConn %d; lower cnpg.reads.poolMax or the replicas, or raise cnpg.reads.pooler.maxClientConn" $how $maxClientConn) }}
{{- end }}
{{- $poolSize := int (include "social-posts.cnpgReadPoolSize" .) }}
{{- $servers := mul (int .Values.cnpg.reads.pooler.instances) $poolSize }}
{{- if gt (int $servers) (sub $maxConnections 10) }}
{{- fail (printf "read connection budget: cnpg.reads.pooler.instances %d x default_pool_size %d = %d server connections, which may all reach one standby, exceed cnpg.cluster.maxConnections %d less 10 (3 superuser-reserved, 7 for the operator and you); lower cnpg.reads.pooler.defaultPoolSize or raise cnpg.cluster.maxConnections" (int .Values.cnpg.reads.pooler.instances) $poolSize (int $servers) $maxConnections) }}
{{- end }}
{{- else if gt (int $clients) (sub $maxConnections 3) }}
{{- fail (printf "read connection budget: %s, which may all reach one standby, exceed cnpg.cluster.maxConnections %d less 3 superuser-reserved; lower cnpg.reads.poolMax or the replicas, or turn cnpg.reads.pooler on" $how $maxConnections) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The connection budget, checked at render. Every pod the Deployment may run at once (the most
replicas plus the rollout's surge of one) opens up to poolMax connections plus one more: for the
migrations at start, then (once those have closed it) for the readiness probe. They must fit what answers them: PgBouncer's max_client_conn per pooler instance (the
Service may send every client to one instance), or the server's max_connections less its 3
superuser-reserved ones. Behind the pooler, its server pools must fit the cluster as well.
*/}}
{{- define "social-posts.validateConnectionBudget" -}}
{{- $replicas := int (include "social-posts.maxReplicas" .) }}
{{- $clients := mul (add $replicas 1) (add (int .Values.database.poolMax) 1) }}
{{- $how := printf "(%d replicas at most + 1 surge) x (database.poolMax %d + 1 migration connection) = %d connections" $replicas (int .Values.database.poolMax) (int $clients) }}
{{- $hint := "lower database.poolMax or the replicas, or raise the limit" }}
{{- if and .Values.cnpg.enabled .Values.cnpg.pooler.enabled }}
{{- if gt (int $clients) (int .Values.cnpg.pooler.maxClientConn) }}
{{- fail (printf "connection budget: %s exceed cnpg.pooler.maxClientConn %d; %s" $how (int .Values.cnpg.pooler.maxClientConn) $hint) }}
{{- end }}
{{- $poolSize := int (include "social-posts.cnpgDefaultPoolSize" .) }}
{{- $servers := mul (int .Values.cnpg.pooler.instances) $poolSize }}
{{- $room := sub (int .Values.cnpg.cluster.maxConnections) 10 }}
{{- if gt (int $servers) (int $room) }}
{{- fail (printf "connection budget: cnpg.pooler.instances %d x default_pool_size %d = %d server connections exceed cnpg.cluster.maxConnections %d less 10 (3 superuser-reserved, 7 for the operator and you); lower cnpg.pooler.defaultPoolSize or raise cnpg.cluster.maxConnections" (int .Values.cnpg.pooler.instances) $poolSize (int $servers) (int .Values.cnpg.cluster.maxConnections)) }}
{{- end }}
{{- else }}
{{- $limit := ternary (int .Values.cnpg.cluster.maxConnections) (int .Values.database.maxConnections) .Values.cnpg.enabled }}
{{- $name := ternary "cnpg.cluster.maxConnections" "database.maxConnections" .Values.cnpg.enabled }}
{{- if gt (int $clients) (sub $limit 3) }}
{{- fail (printf "connection budget: %s exceed %s %d less 3 superuser-reserved; %s, or put a pooler in front" $how $name $limit $hint) }}
{{- end }}
{{- end }}
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
{{- /* The longest a request waits for its answer: its database budget plus the cancel grace. */}}
{{- $answerMs := add (int64 .Values.database.statementTimeoutMs) 500 }}
{{- if le (mul (int64 .Values.config.shutdownTimeoutSeconds) 1000) $answerMs }}
{{- fail (printf "config.shutdownTimeoutSeconds (%d s) must exceed database.statementTimeoutMs + 0.5 s cancel grace (%d ms): the drain would close the socket of a request whose write may still commit, and the client would see an error for it" (int .Values.config.shutdownTimeoutSeconds) (int $answerMs)) }}
{{- end }}
{{- $proxyReads := list }}
{{- if .Values.gateway.enabled }}
{{- $proxyReads = append $proxyReads (dict "name" "gateway.timeouts.readSeconds" "seconds" (int .Values.gateway.timeouts.readSeconds)) }}
{{- end }}
{{- if .Values.ingress.enabled }}
{{- $proxyReads = append $proxyReads (dict "name" "ingress.proxyReadTimeout" "seconds" (int .Values.ingress.proxyReadTimeout)) }}
{{- end }}
{{- range $proxyRead := $proxyReads }}
{{- if le (mul (int64 $proxyRead.seconds) 1000) $answerMs }}
{{- fail (printf "%s (%d s) must exceed database.statementTimeoutMs + 0.5 s cancel grace (%d ms): the proxy would answer 504 while a write may still commit; raise %s or lower database.statementTimeoutMs" $proxyRead.name (int $proxyRead.seconds) (int $answerMs) $proxyRead.name) }}
{{- end }}
{{- end }}
{{- $startBudget := add (int .Values.database.startupWaitSeconds) (div (add (int64 .Values.database.migrationTimeoutMs) 999) 1000) }}
{{- $probeWindow := add (int (.Values.startupProbe.initialDelaySeconds | default 0)) (mul (int (.Values.startupProbe.periodSeconds | default 10)) (int (.Values.startupProbe.failureThreshold | default 3))) }}
{{- if lt (int $probeWindow) (int $startBudget) }}
{{- fail (printf "startupProbe allows %d s (initialDelaySeconds + periodSeconds x failureThreshold) but a start may take database.startupWaitSeconds + database.migrationTimeoutMs = %d s: the kubelet would kill a pod still waiting for its database or migrating; raise startupProbe.failureThreshold to at least %d or lower those budgets" (int $probeWindow) (int $startBudget) (int (div (add (sub (int $startBudget) (int (.Values.startupProbe.initialDelaySeconds | default 0))) (sub (int (.Values.startupProbe.periodSeconds | default 10)) 1)) (int (.Values.startupProbe.periodSeconds | default 10))))) }}
{{- end }}
{{- if eq (int .Values.metrics.port) (int .Values.containerPort) }}
{{- fail "metrics.port must differ from containerPort: metrics have a listener of their own, which the Ingress never reaches" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) }}
{{- fail "autoscaling.maxReplicas must be at least autoscaling.minReplicas" }}
{{- end }}
{{- if and .Values.cnpg.enabled .Values.postgresql.enabled }}
{{- fail "cnpg.enabled and postgresql.enabled both choose the database: keep one (CloudNativePG for production, the in-chart PostgreSQL for development)" }}
{{- end }}
{{- if and .Values.cnpg.enabled .Values.database.host }}
{{- fail "database.host names an external PostgreSQL while cnpg.enabled makes one: unset database.host or turn cnpg off" }}
{{- end }}
{{- if .Values.cnpg.enabled }}
{{- if eq (include "social-posts.cnpgPoolerName" .) (include "social-posts.cnpgClusterName" .) }}
{{- fail "cnpg.pooler.name must differ from the Cluster's name (CloudNativePG refuses a Pooler named like a Cluster)" }}
{{- end }}
{{- if include "social-posts.cnpgReadPooler" . }}
{{- $readPooler := include "social-posts.cnpgReadPoolerName" . }}
{{- if or (eq $readPooler (include "social-posts.cnpgClusterName" .)) (eq $readPooler (include "social-posts.cnpgPoolerName" .)) }}
{{- fail "cnpg.reads.pooler.name must differ from the Cluster's name and the rw Pooler's (cnpg.pooler.name): each Pooler is a Service of its own" }}
{{- end }}
{{- end }}
{{- if and (or .Values.cnpg.pooler.enabled (include "social-posts.cnpgReadPooler" .)) .Values.database.preparedStatements (eq (int .Values.cnpg.pooler.maxPreparedStatements) 0) }}
{{- fail "database.preparedStatements is true but cnpg.pooler.maxPreparedStatements is 0: PgBouncer would not track them in transaction mode; set one of them" }}
{{- end }}
{{- end }}
{{- include "social-posts.validateBackup" . }}
{{- range $key := list "max_client_conn" "default_pool_size" "max_prepared_statements" }}
{{- if hasKey $.Values.cnpg.pooler.parameters $key }}
{{- fail (printf "cnpg.pooler.parameters.%s: set it with its own value (cnpg.pooler.maxClientConn, defaultPoolSize, maxPreparedStatements), which the connection budget checks" $key) }}
{{- end }}
{{- end }}
{{- /* PostgreSQL's spellings of off; local returns before any standby has the commit. */}}
{{- $syncCommit := lower (toString (get .Values.cnpg.cluster.parameters "synchronous_commit" | default "on")) }}
{{- if and .Values.cnpg.enabled (has $syncCommit (list "off" "false" "no" "0")) }}
{{- fail (printf "cnpg.cluster.parameters.synchronous_commit %q acknowledges a commit before the primary's disk has it, so a crash loses it; leave it unset (on), or remote_write or remote_apply" $syncCommit) }}
{{- end }}
{{- /* With preferred durability too: while a standby is there, local skips the wait for it, and the service refuses to start. */}}
{{- if and .Values.cnpg.enabled (eq $syncCommit "local") (gt (int .Values.cnpg.cluster.instances) 1) }}
{{- fail "cnpg.cluster.parameters.synchronous_commit \"local\" acknowledges a commit before a standby has it, so a failover loses it, and the service does not start with it; leave it unset (on), or remote_write or remote_apply" }}
{{- end }}
{{- if hasKey .Values.cnpg.cluster.parameters "max_connections" }}
{{- fail "cnpg.cluster.parameters.max_connections: set cnpg.cluster.maxConnections, which the connection budget checks" }}
{{- end }}
{{- include "social-posts.validateConnectionBudget" . }}
{{- include "social-posts.validateReadBudget" . }}
{{- end }}

{{/*
Backups and recovery across values: what the plugin's CRD or CloudNativePG would refuse later, or
what would silently archive nowhere or over the archive a recovery reads.
*/}}
{{- define "social-posts.validateBackup" -}}
{{- $backup := .Values.backup }}
{{- $store := $backup.objectStore }}
{{- if and $backup.enabled (not .Values.cnpg.enabled) }}
{{- fail "backup.enabled needs cnpg.enabled: the backups are CloudNativePG's (the Barman Cloud plugin); the in-chart PostgreSQL has none and an external one is backed up by its provider" }}
{{- end }}
{{- if and $backup.recovery.enabled (not $backup.enabled) }}
{{- fail "backup.recovery.enabled needs backup.enabled: the Cluster recovers through the release's ObjectStore (backup.objectStore) and archives into it again" }}
{{- end }}
{{- if $backup.enabled }}
{{- if not $store.destinationPath }}
{{- fail "backup.objectStore.destinationPath is required when backup.enabled: the bucket and folder the WAL and base backups go to (e.g. s3://my-bucket/social-posts), one per environment" }}
{{- end }}
{{- $schemes := dict "s3" "s3://" "google" "gs://" "azure" "http" }}
{{- if not (hasPrefix (get $schemes $store.provider) $store.destinationPath) }}
{{- fail (printf "backup.objectStore.destinationPath %q does not suit provider %s (it must start with %s)" $store.destinationPath $store.provider (get $schemes $store.provider)) }}
{{- end }}
{{- $identity := dict "s3" $store.s3.inheritFromIAMRole "azure" $store.azure.inheritFromAzureAD "google" $store.google.gkeEnvironment }}
{{- if and (not (get $identity $store.provider)) (not $store.existingSecret) }}
{{- fail (printf "backup.objectStore.existingSecret is required for provider %s unless workload identity is on (s3.inheritFromIAMRole, azure.inheritFromAzureAD or google.gkeEnvironment): the plugin needs credentials for %s" $store.provider $store.destinationPath) }}
{{- end }}
{{- if and (eq $store.provider "azure") (not $store.azure.inheritFromAzureAD) (not $store.azure.connectionStringKey) (not $store.azure.storageKeyKey) (not $store.azure.storageSasTokenKey) }}
{{- fail "backup.objectStore.azure: set connectionStringKey, storageKeyKey or storageSasTokenKey (the keys of existingSecret the plugin authenticates with)" }}
{{- end }}
{{- end }}
{{- $clusterAccount := .Values.cnpg.cluster.serviceAccount.annotations | default dict }}
{{- if and .Values.cnpg.enabled (hasKey $clusterAccount "azure.workload.identity/client-id") (ne (toString (get (.Values.cnpg.cluster.inheritedLabels | default dict) "azure.workload.identity/use")) "true") }}
{{- fail "cnpg.cluster.serviceAccount.annotations names azure.workload.identity/client-id but cnpg.cluster.inheritedLabels lacks azure.workload.identity/use: \"true\": Azure's webhook gives the identity only to pods with that label (chart/README.md, \"Workload identity\")" }}
{{- end }}
{{- /* lookup answers on helm install and upgrade (and template --dry-run=server); plain helm template sees no Cluster. */}}
{{- $live := lookup "postgresql.cnpg.io/v1" "Cluster" .Release.Namespace (include "social-posts.cnpgClusterName" .) }}
{{- $archivingNow := false }}
{{- range (dig "spec" "plugins" list ($live | default dict)) }}
{{- if and (eq (get . "name") "barman-cloud.cloudnative-pg.io") (get . "isWALArchiver") }}{{ $archivingNow = true }}{{ end }}
{{- end }}
{{- if and $archivingNow (not (and .Values.cnpg.enabled $backup.enabled $backup.walArchiving)) (not $backup.allowArchivingToStop) }}
{{- fail (printf "this upgrade stops the WAL archiving Cluster %q does now (backup.enabled, backup.walArchiving or cnpg.enabled is off): point-in-time recovery would end here. Keep them on, or take a base backup and set backup.allowArchivingToStop=true for this upgrade (chart/README.md, \"Rolling back\")" (include "social-posts.cnpgClusterName" .)) }}
{{- end }}
{{- if $backup.recovery.enabled }}
{{- if not $backup.recovery.sourceServerName }}
{{- fail "backup.recovery.sourceServerName is required when backup.recovery.enabled: the folder of the cluster to recover from (the lost Cluster's name, or its backup.serverName)" }}
{{- end }}
{{- if eq $backup.recovery.sourceServerName (include "social-posts.cnpgClusterName" .) }}
{{- fail (printf "backup.recovery.sourceServerName %q is the Cluster's own name: CloudNativePG recovers only into a new Cluster, so set cnpg.cluster.name to a new name (chart/README.md, \"Recovering to a point in time\")" $backup.recovery.sourceServerName) }}
{{- end }}
{{- if eq $backup.recovery.sourceServerName (include "social-posts.backupServerName" .) }}
{{- fail (printf "backup.recovery.sourceServerName %q is also the folder the recovered Cluster would archive to: give the new Cluster a new name (cnpg.cluster.name) so it never writes over the archive it recovers from" $backup.recovery.sourceServerName) }}
{{- end }}
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
The request id on the Gateway path: NGINX Gateway Fabric passes a client's X-Request-ID on as
sent, so the routes set it to nginx's own $request_id (the value may name an nginx variable:
internal/controller/nginx/config/validation/http_filters.go, ValidateFilterHeaderValue, and
servers.go, generateProxySetHeaders, nginx/nginx-gateway-fabric v2.6.7, commit
5e34a17a8f7787e90f41d1af91258a556f0795b4). Envoy generates its own at the edge already.
*/}}
{{- define "social-posts.gatewayRequestIdFilter" -}}
{{- if eq .Values.gateway.rateLimit.implementation "nginx-gateway-fabric" -}}
filters:
  - type: RequestHeaderModifier
    requestHeaderModifier:
      set:
        - name: X-Request-ID
          value: $request_id
{{- end }}
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

{{/*
An image reference from a dict: repository, tag, digest (optional) and the root context (ctx) for
global.imageRegistry, which replaces the registry host of every image the chart runs (a repository
whose first segment has no dot, colon or "localhost" is Docker Hub's: "postgres" becomes
"<registry>/library/postgres", as pull-through mirrors and Harbor proxy caches serve it).
*/}}
{{- define "social-posts.imageRef" -}}
{{- $repository := .repository }}
{{- with (.ctx.Values.global).imageRegistry }}
{{- $parts := splitList "/" $repository }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repository = join "/" (rest $parts) }}
{{- else if eq (len $parts) 1 }}
{{- $repository = printf "library/%s" $repository }}
{{- end }}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}
{{- end }}
{{- $ref := printf "%s:%s" $repository .tag }}
{{- with .digest }}
{{- $ref = printf "%s@%s" $ref . }}
{{- end }}
{{- $ref }}
{{- end }}

{{/*
imagePullSecrets of every pod the chart makes (API, dev PostgreSQL, test): the chart's and
global.imagePullSecrets, each name once.
*/}}
{{- define "social-posts.imagePullSecrets" -}}
{{- $names := list }}
{{- range (concat .Values.imagePullSecrets ((.Values.global).imagePullSecrets | default list)) }}
{{- $names = append $names .name }}
{{- end }}
{{- with ($names | uniq) }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Environment variables the chart itself sets in the API container: extraEnvVars may not name them
(an entry there would silently override the value the chart documents and checks).
*/}}
{{- define "social-posts.validateExtraEnvVars" -}}
{{- $managed := keys ((include (print .Template.BasePath "/configmap.yaml") . | fromYaml).data) }}
{{- $managed = concat $managed (list "SECRET_KEY" "SECRET_KEYS_ACCEPTED" "DB_PASSWORD") }}
{{- if .Values.tracing.enabled }}
{{- $managed = concat $managed (list "K8S_POD_NAME" "OTEL_RESOURCE_ATTRIBUTES") }}
{{- end }}
{{- range .Values.extraEnvVars }}
{{- if has .name $managed }}
{{- fail (printf "extraEnvVars: %s is set by the chart; use its value in values.yaml instead (see chart/README.md, Values)" .name) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
OTEL_RESOURCE_ATTRIBUTES: the chart's own (the image's version as its tag says, namespace, the
release's Deployment, the pod by $(K8S_POD_NAME), which Kubernetes expands; none of them holds a
character to encode) and
tracing.resourceAttributes, each value percent-encoded as the variable requires.
*/}}
{{- define "social-posts.otelResourceAttributes" -}}
{{- $pairs := list
  (printf "service.version=%s" (.Values.image.tag | default .Chart.AppVersion))
  (printf "k8s.namespace.name=%s" .Release.Namespace)
  (printf "k8s.deployment.name=%s" (include "social-posts.fullname" .))
  "k8s.pod.name=$(K8S_POD_NAME)" -}}
{{- range $key, $value := .Values.tracing.resourceAttributes }}
{{- $pairs = append $pairs (printf "%s=%s" $key (urlquery $value | replace "+" "%20")) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
