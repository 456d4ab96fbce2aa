{{/*
The name every object starts with, fixed: one release per cluster (the
DaemonSet's host paths are per node), and the alerts select the job
iptables-alerter-metrics, the Service's name.
*/}}
{{- define "ipta.name" -}}
iptables-alerter
{{- end -}}

{{/*
The pod selector, as in the kustomize base. A DaemonSet's selector cannot
change, so it holds nothing that varies between releases or versions.
*/}}
{{- define "ipta.selector" -}}
app.kubernetes.io/name: iptables-alerter
{{- end -}}

{{- define "ipta.labels" -}}
{{ include "ipta.selector" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/*
The image by tag, never latest, and by digest: image.digest when given,
else the one make release recorded in Chart.yaml's iptables-alerter.io/image,
as long as the repository is that image's and the tag the chart's own (a
digest is of one image: another repository or tag is not it). Read from the
chart, not its values: an upgrade with --reuse-values renders the new chart
with the old release's values.
*/}}
{{- define "ipta.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag: latest is refused; set the version to run (every node must run the same build)" -}}
{{- end -}}
{{- $digest := .Values.image.digest -}}
{{- $released := splitList "@" (index .Chart.Annotations "iptables-alerter.io/image" | default "") -}}
{{- if and (not $digest) (eq (len $released) 2) (eq $tag .Chart.AppVersion) (eq (first $released) .Values.image.repository) -}}
{{- $digest = last $released -}}
{{- end -}}
{{- if $digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag $digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* "true" when the forwarder serves the metrics over TLS. */}}
{{- define "ipta.secure" -}}
{{- if or .Values.metrics.secure.enabled .Values.openshift.enabled -}}
{{- if not .Values.forward.enabled -}}
{{- fail "metrics.secure (and openshift) need forward.enabled: the forwarder serves the metrics over TLS" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{- define "ipta.hooksDir" -}}
{{- if .Values.hook.hooksDir -}}
{{- .Values.hook.hooksDir -}}
{{- else if .Values.openshift.enabled -}}
/etc/containers/oci/hooks.d
{{- else -}}
/usr/share/containers/oci/hooks.d
{{- end -}}
{{- end -}}

{{/*
"true" where the agent's AppArmor profile is set by the securityContext
field (Kubernetes 1.30+); on 1.29 the pod's annotation does it. Neither
under openshift.enabled: RHCOS has no AppArmor.
*/}}
{{- define "ipta.appArmorField" -}}
{{- if and (not .Values.openshift.enabled) (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}

{{- define "ipta.priorityClass" -}}
{{- default (include "ipta.name" .) .Values.priorityClass.name -}}
{{- end -}}

{{/* The name the serving certificate is for: the Service's DNS name. */}}
{{- define "ipta.serverName" -}}
{{- printf "%s-metrics.%s.svc" (include "ipta.name" .) .Release.Namespace -}}
{{- end -}}

{{/* Whether any container serves metrics the Service can name. */}}
{{- define "ipta.metrics" -}}
{{- if or .Values.agent.enabled .Values.forward.enabled -}}true{{- end -}}
{{- end -}}

{{/*
"true" when the API server serves the Prometheus Operator's kind (given as
monitoring.coreos.com/v1/Kind), or metrics.forceMonitoringAPI says to
render it anyway: without the CRDs, `helm install` of such an object fails
("no matches for kind") and so the whole release would.
*/}}
{{- define "ipta.monitoringAPI" -}}
{{- if or .root.Values.metrics.forceMonitoringAPI (.root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind)) -}}true{{- end -}}
{{- end -}}

{{/* The chart's labels and the user's additionalLabels (never overriding ours). */}}
{{- define "ipta.monitoringLabels" -}}
{{- $labels := include "ipta.labels" .root | fromYaml -}}
{{- toYaml (merge $labels (.extra | default dict)) -}}
{{- end -}}
