{{/* Chart name, or nameOverride. */}}
{{- define "epd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped name of the coordinator's objects: the release name when it already contains the chart name. */}}
{{- define "epd.fullname" -}}
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

{{/* Labels on every object. */}}
{{- define "epd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: epd-coordinator
app.kubernetes.io/version: {{ (default .Chart.AppVersion .Values.image.tag) | trunc 63 | quote }}
{{- end }}

{{/* Labels that pick the coordinator's pods. */}}
{{- define "epd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "epd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "epd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "epd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The coordinator's dynamic-metadata namespace: the extension policy, the access logs and the config must agree. */}}
{{- define "epd.metadataNamespace" -}}epd.coordinator{{- end }}

{{/* Beside, not inside, the config mount: a ConfigMap volume is read-only, so no mount point can be made in it. */}}
{{- define "epd.tlsDir" -}}/etc/epd-coordinator-tls{{- end }}

{{/* Where side calls re-enter Envoy: the internal gateway's Service, unless config.gateway.address says otherwise. */}}
{{- define "epd.gatewayAddress" -}}
{{- if .Values.config.gateway.address }}
{{- .Values.config.gateway.address }}
{{- else }}
{{- $i := .Values.gateways.internal }}
{{- printf "http://%s.%s.svc.cluster.local:%v" $i.serviceName (default .Release.Namespace $i.proxyNamespace) $i.port }}
{{- end }}
{{- end }}

{{/* coordinator.yaml: the user's config and pipeline over the values the chart owns. */}}
{{- define "epd.coordinatorConfig" -}}
{{- $server := dict "listen_addr" (printf "0.0.0.0:%v" .Values.service.grpcPort) "metadata_namespace" (include "epd.metadataNamespace" .) }}
{{- if .Values.metrics.enabled }}
{{- $_ := set $server "metrics_addr" (printf ":%v" .Values.metrics.port) }}
{{- else }}
{{- $_ := set $server "metrics_addr" "off" }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $_ := set $server "tls_cert_file" (printf "%s/tls.crt" (include "epd.tlsDir" .)) }}
{{- $_ := set $server "tls_key_file" (printf "%s/tls.key" (include "epd.tlsDir" .)) }}
{{- if .Values.tls.requireClientCertificate }}
{{- $_ := set $server "tls_client_ca_file" (printf "%s/ca.crt" (include "epd.tlsDir" .)) }}
{{- end }}
{{- end }}
{{- /* The service enforces the public route's allow-list too: a path opened here is open there. */}}
{{- $_ := set $server "allowed_paths" (include "epd.allowedPaths" . | fromYamlArray) }}
{{- $cfg := deepCopy (omit .Values.config "server" "gateway") }}
{{- $_ := set $cfg "server" (mergeOverwrite $server (deepCopy (default dict .Values.config.server))) }}
{{- $_ := set $cfg "gateway" (mergeOverwrite (deepCopy (default dict .Values.config.gateway)) (dict "address" (include "epd.gatewayAddress" .))) }}
{{- $_ := set $cfg "pipeline" .Values.pipeline }}
{{- toYaml $cfg }}
{{- end }}

{{/*
gateways.pathPolicy as the coordinator's server.allowed_paths: the exact paths, then each prefix as
/prefix/* (the trailing slash optional in the values, as for the route's PathPrefix).
*/}}
{{- define "epd.allowedPaths" -}}
{{- $pp := .Values.gateways.pathPolicy }}
{{- range concat (default list $pp.pipelinePaths) (default list $pp.decodePaths) }}
- {{ . | quote }}
{{- end }}
{{- range concat (default list $pp.servicePrefixes) (default list $pp.decodePrefixes) }}
- {{ printf "%s/*" (trimSuffix "/" .) | quote }}
{{- end }}
{{- end }}

{{/* Public route parents: the chart's Gateway, or gateways.public.parentRefs. */}}
{{- define "epd.publicParentRefs" -}}
{{- if .Values.gateways.create }}
- group: gateway.networking.k8s.io
  kind: Gateway
  name: {{ .Values.gateways.public.name }}
  sectionName: http
{{- else }}
{{- if not .Values.gateways.public.parentRefs }}{{ fail "gateways.public.parentRefs is required when gateways.create is false" }}{{ end }}
{{- toYaml .Values.gateways.public.parentRefs }}
{{- end }}
{{- end }}

{{- define "epd.internalParentRefs" -}}
{{- if .Values.gateways.create }}
- group: gateway.networking.k8s.io
  kind: Gateway
  name: {{ .Values.gateways.internal.name }}
  sectionName: side-calls
{{- else }}
{{- if not .Values.gateways.internal.parentRefs }}{{ fail "gateways.internal.parentRefs is required when gateways.create is false" }}{{ end }}
{{- toYaml .Values.gateways.internal.parentRefs }}
{{- end }}
{{- end }}

{{/*
Whole seconds of a Go duration written as Ns, Nm or NmMs (the forms the config docs use); -1 for
any other form, which the drain check then leaves alone.
*/}}
{{- define "epd.seconds" -}}
{{- $d := toString . }}
{{- if regexMatch "^[0-9]+s$" $d }}{{ trimSuffix "s" $d }}
{{- else if regexMatch "^[0-9]+m$" $d }}{{ mul (trimSuffix "m" $d | atoi) 60 }}
{{- else if regexMatch "^[0-9]+m[0-9]+s$" $d }}{{ $p := splitList "m" (trimSuffix "s" $d) }}{{ add (mul (atoi (index $p 0)) 60) (atoi (index $p 1)) }}
{{- else }}-1{{ end }}
{{- end }}

{{/* The kubelet kills the pod at the grace period: preStop and the drain must fit in it. */}}
{{- define "epd.checkDrain" -}}
{{- $drain := include "epd.seconds" (default "25s" .Values.config.server.shutdown_timeout) | atoi }}
{{- if ge $drain 0 }}
{{- $need := add .Values.preStopSleepSeconds $drain }}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $need) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must cover preStopSleepSeconds (%v) + config.server.shutdown_timeout (%v = %vs)" .Values.terminationGracePeriodSeconds .Values.preStopSleepSeconds .Values.config.server.shutdown_timeout $drain) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Gateway API matches for a list of exact paths and a list of path prefixes (gateways.pathPolicy). A
prefix's trailing slash is dropped: Gateway API's PathPrefix matches whole path segments, so
/v1/models/ becomes /v1/models and matches /v1/models and /v1/models/{id}, not /v1/modelsx.
*/}}
{{- define "epd.pathMatches" -}}
{{- range .exact }}
- path: { type: Exact, value: {{ . | quote }} }
{{- end }}
{{- range .prefixes }}
- path: { type: PathPrefix, value: {{ trimSuffix "/" . | quote }} }
{{- end }}
{{- end }}

{{/* The filters, backend and timeout of each allowed rule of the public route. */}}
{{- define "epd.servedRule" -}}
filters:
# Second line of defence; the authoritative removal is the ClientTrafficPolicy's early header mutation.
- type: RequestHeaderModifier
  requestHeaderModifier:
    remove:
      {{- toYaml .Values.gateways.routingHeaders | nindent 6 }}
{{- with .Values.gateways.internalResponseHeaders }}
# Coordinator/EPP-internal headers of the decode answer never reach the client.
- type: ResponseHeaderModifier
  responseHeaderModifier:
    remove:
      {{- toYaml . | nindent 6 }}
{{- end }}
backendRefs:
- group: inference.networking.k8s.io
  kind: InferencePool
  name: {{ required "inferencePool.name is required" .Values.inferencePool.name }}
timeouts:
  # The request timeout covers the whole streamed response; "0s" turns it off.
  request: 0s
{{- end }}
