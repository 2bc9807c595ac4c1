{{/*
The chart's helpers.  Objects are named after the release ("RELEASE-cnlabd"
unless the release is called cnlab) so that two releases in one cluster do
not collide on cluster-scoped names; the DeviceClass and the CRDs are the
exception (one per cluster: their names are their API's).
*/}}

{{- define "cnlab.fullname" -}}
{{- if eq .Release.Name "cnlab" -}}
cnlab
{{- else -}}
{{- printf "%s-cnlab" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cnlab.cnlabd" -}}
{{- printf "%s-cnlabd" (include "cnlab.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cnlab.agent" -}}
{{- printf "%s-agent" (include "cnlab.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The labels of every object; an object with a selector takes
cnlab.commonLabels and its selector, which holds the instance label (a
key twice in one map is a YAML error the API server refuses). */}}
{{- define "cnlab.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: cnlab
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "cnlab.labels" -}}
{{ include "cnlab.commonLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cnlab.cnlabd.selector" -}}
app.kubernetes.io/name: cnlabd
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cnlab.agent.selector" -}}
app.kubernetes.io/name: cnlab-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cnlab.draPlugin" -}}
{{- printf "%s-dra-plugin" (include "cnlab.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cnlab.draPlugin.selector" -}}
app.kubernetes.io/name: cnlab-dra-plugin
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cnlab.image" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{/* The restricted Pod Security level, for every container but the agent's. */}}
{{- define "cnlab.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
