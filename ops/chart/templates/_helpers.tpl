{{/* Names. With a release called "tether" every object is plainly "tether..." (the CLI's defaults). */}}
{{- define "tether.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "tether" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tether" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tether.selectorLabels" -}}
app.kubernetes.io/name: tether
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tether.labels" -}}
{{ include "tether.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tether.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "tether.fullname" .) .Values.serviceAccount.name }}
{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{- define "tether.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- define "tether.webhookService" -}}{{ include "tether.fullname" . }}-webhook{{- end -}}
{{- define "tether.pushService" -}}{{ include "tether.fullname" . }}-push{{- end -}}
{{- define "tether.webhookConfiguration" -}}{{ include "tether.fullname" . }}-resourcebindings{{- end -}}
{{- define "tether.webhookSecret" -}}
{{- if eq .Values.webhooks.certificates.mode "secret" -}}{{ required "webhooks.certificates.secretName is required with mode secret" .Values.webhooks.certificates.secretName }}
{{- else -}}{{ include "tether.fullname" . }}-webhook-tls{{- end -}}
{{- end -}}

{{- define "tether.webhooksOn" -}}
{{- if or .Values.webhooks.binding.enabled .Values.webhooks.pod.enabled -}}true{{- end -}}
{{- end -}}

{{/* The leader-only Services: their EndpointSlices are written by the leader (tether run --leader-service). */}}
{{- define "tether.leaderServices" -}}
{{- $out := list -}}
{{- if .Values.push.enabled -}}{{- $out = append $out (include "tether.pushService" .) -}}{{- end -}}
{{- if include "tether.webhooksOn" . -}}{{- $out = append $out (include "tether.webhookService" .) -}}{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* Refuse combinations that cannot work, with a sentence saying what to change. */}}
{{- define "tether.validate" -}}
{{- $v := .Values -}}
{{- if and (gt (int $v.replicas) 1) (not $v.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: without a Lease every replica would act" -}}
{{- end -}}
{{- if not (has $v.log.type (list "sqlite" "kafka")) -}}
{{- fail (printf "log.type must be sqlite or kafka, not %q" $v.log.type) -}}
{{- end -}}
{{- if and (eq $v.log.type "kafka") (not (hasPrefix "kafka://" $v.log.kafka.url)) -}}
{{- fail "log.type kafka needs log.kafka.url: kafka://HOST:PORT/PREFIX" -}}
{{- end -}}
{{- if not (has $v.webhooks.certificates.mode (list "certManager" "selfSigned" "secret")) -}}
{{- fail (printf "webhooks.certificates.mode must be certManager, selfSigned or secret, not %q" $v.webhooks.certificates.mode) -}}
{{- end -}}
{{- if and $v.webhooks.pod.enabled (eq $v.webhooks.certificates.mode "selfSigned") -}}
{{- fail "the pod webhook needs a CA that does not change with the leader (the members' configurations are set by hand): webhooks.certificates.mode certManager or secret" -}}
{{- end -}}
{{- if and (include "tether.webhooksOn" .) (eq $v.webhooks.certificates.mode "selfSigned") (ne .Release.Namespace $v.karmada.namespace) -}}
{{- fail (printf "self-signed webhook certificates name the Service in karmada.namespace (%s): install the release in that namespace, or use certManager" $v.karmada.namespace) -}}
{{- end -}}
{{- if not (has $v.karmada.setup.mode (list "job" "print")) -}}
{{- fail (printf "karmada.setup.mode must be job or print, not %q" $v.karmada.setup.mode) -}}
{{- end -}}
{{- end -}}
