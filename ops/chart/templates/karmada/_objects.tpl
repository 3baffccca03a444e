{{/*
What goes on KARMADA's API server (not the host cluster): tether's namespace, CRDs, ServiceAccount, RBAC, the
webhook configuration and the ConfigMaps tether reads there. Applied by the setup Job (karmada.setup.mode job) or
printed for an administrator (mode print). tests/ops/test_chart.py checks the RBAC against the API calls in the
code: exactly what tether calls, nothing more.

"tether.karmadaObjects" is everything; "tether.karmadaRemovable" what an uninstall deletes (not CRDs — deleting
them deletes every claim and DataSource — nor namespaces or ConfigMaps, which hold other people's things).
*/}}
{{- define "tether.karmadaSubjects" -}}
- kind: ServiceAccount
  name: {{ .Values.karmada.serviceAccount.name }}
  namespace: {{ .Values.karmada.namespace }}
{{- with .Values.karmada.extraSubjects }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "tether.karmadaRemovable" -}}
{{- $fullname := include "tether.fullname" . -}}
{{- $v := .Values -}}
{{- $ns := $v.karmada.namespace -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $v.karmada.serviceAccount.name }}
  namespace: {{ $ns }}
  labels:
    app.kubernetes.io/name: tether
{{- if $v.karmada.serviceAccount.tokenSecret }}
---
# A long-lived token for tether's own kubeconfig on Karmada (docs/install.md, least privilege).
apiVersion: v1
kind: Secret
type: kubernetes.io/service-account-token
metadata:
  name: {{ $v.karmada.serviceAccount.name }}-token
  namespace: {{ $ns }}
  annotations:
    kubernetes.io/service-account.name: {{ $v.karmada.serviceAccount.name }}
  labels:
    app.kubernetes.io/name: tether
{{- end }}
---
# Only what tether calls (tests/ops/test_chart.py keeps this in step with adapters/kubernetes/*.py):
#   watch.py     list+watch: claims, datasources, resourcebindings, clusters; the plugin ConfigMap (by name)
#   executor.py  get+patch claims (finalizers), patch claims/status; get+create+patch+delete datasources, patch
#                datasources/status; get+patch resourcebindings; create+get+patch events
#   admission    queues, priorityclasses, deployments, volcano jobs (read), queues/status (patch), create queues
#   webhook_certs.py  get+patch mutatingwebhookconfigurations (caBundle)
# No update on any claim, DataSource or binding (patches with a resourceVersion precondition), no Pods or workloads
# written, no Secret outside karmada-cluster.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $fullname }}
  labels:
    app.kubernetes.io/name: tether
rules:
  - apiGroups: ["datadependency.volcano.sh"]
    resources: ["datasourceclaims"]
    verbs: ["get", "list", "watch", "patch"]
  - apiGroups: ["datadependency.volcano.sh"]
    resources: ["datasourceclaims/status"]
    verbs: ["patch"]
  - apiGroups: ["datadependency.volcano.sh"]
    resources: ["datasources"]
    verbs: ["get", "list", "watch", "create", "patch", "delete"]
  - apiGroups: ["datadependency.volcano.sh"]
    resources: ["datasources/status"]
    verbs: ["patch"]
  - apiGroups: ["work.karmada.io"]
    resources: ["resourcebindings"]
    verbs: ["get", "list", "watch", "patch"]
  - apiGroups: ["cluster.karmada.io"]
    resources: ["clusters"]
    verbs: ["list", "watch"]
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create", "get", "patch"]
  {{- if $v.admission.enabled }}
  - apiGroups: ["scheduling.volcano.sh"]
    resources: ["queues"]
    verbs: ["get", "list", "watch", "create"]
  - apiGroups: ["scheduling.volcano.sh"]
    resources: ["queues/status"]
    verbs: ["patch"]
  - apiGroups: ["scheduling.k8s.io"]
    resources: ["priorityclasses"]
    verbs: ["list", "watch"]
  - apiGroups: ["apps"]
    resources: ["deployments"]
    verbs: ["list", "watch"]
  {{- if $v.admission.volcanoJobs }}
  - apiGroups: ["batch.volcano.sh"]
    resources: ["jobs"]
    verbs: ["list", "watch"]
  {{- end }}
  {{- end }}
  {{- if and $v.webhooks.binding.enabled (not $v.webhooks.certificates.caBundle) }}
  - apiGroups: ["admissionregistration.k8s.io"]
    resources: ["mutatingwebhookconfigurations"]
    resourceNames: [{{ include "tether.webhookConfiguration" . | quote }}]
    verbs: ["get", "patch"]
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $fullname }}
  labels:
    app.kubernetes.io/name: tether
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $fullname }}
subjects:
  {{- include "tether.karmadaSubjects" . | nindent 2 }}
---
# The plugin ConfigMap only: a list/watch restricted by resourceNames is allowed when the request carries the
# matching fieldSelector metadata.name=..., which is how tether watches it.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}-plugin-config
  namespace: {{ $v.pluginConfig.namespace }}
  labels:
    app.kubernetes.io/name: tether
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: [{{ $v.pluginConfig.name | quote }}]
    verbs: ["list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}-plugin-config
  namespace: {{ $v.pluginConfig.namespace }}
  labels:
    app.kubernetes.io/name: tether
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}-plugin-config
subjects:
  {{- include "tether.karmadaSubjects" . | nindent 2 }}
{{- if $v.leaderElection.enabled }}
---
# Leader election: get the Lease, create it the first time, update (replace) it to renew or take over.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}-leader-election
  namespace: {{ $ns }}
  labels:
    app.kubernetes.io/name: tether
rules:
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: ["tether-leader"]
    verbs: ["get", "update"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}-leader-election
  namespace: {{ $ns }}
  labels:
    app.kubernetes.io/name: tether
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}-leader-election
subjects:
  {{- include "tether.karmadaSubjects" . | nindent 2 }}
{{- end }}
{{- if $v.members.fromKarmada }}
---
# --members-from-karmada: each Karmada Cluster's spec.secretRef, read (get only) in Karmada's cluster-secret
# namespace — no list, no watch, no Secret anywhere else.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}-member-secrets
  namespace: karmada-cluster
  labels:
    app.kubernetes.io/name: tether
rules:
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}-member-secrets
  namespace: karmada-cluster
  labels:
    app.kubernetes.io/name: tether
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}-member-secrets
subjects:
  {{- include "tether.karmadaSubjects" . | nindent 2 }}
{{- end }}
{{- if $v.admission.enabled }}
---
# The admission ConfigMap only (plugin tiers, queue-managed kinds), watched by name like the plugin ConfigMap.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $fullname }}-admission-config
  namespace: {{ $ns }}
  labels:
    app.kubernetes.io/name: tether
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: [{{ $v.admission.configMap.name | quote }}]
    verbs: ["list", "watch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $fullname }}-admission-config
  namespace: {{ $ns }}
  labels:
    app.kubernetes.io/name: tether
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $fullname }}-admission-config
subjects:
  {{- include "tether.karmadaSubjects" . | nindent 2 }}
{{- end }}
{{- if $v.webhooks.binding.enabled }}
---
# The ResourceBinding webhook. caBundle: given (webhooks.certificates.caBundle), or injected by the leader (its
# CA: cert-manager's ca.crt or its self-signed one) — left out here so that re-applying never erases it.
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: {{ include "tether.webhookConfiguration" . }}
  labels:
    app.kubernetes.io/name: tether
webhooks:
  - name: resourcebindings.tether.dev
    admissionReviewVersions: ["v1"]
    sideEffects: NoneOnDryRun        # each decision is appended to tether's log, except for dry runs
    failurePolicy: {{ $v.webhooks.binding.failurePolicy }}
    timeoutSeconds: {{ $v.webhooks.binding.timeoutSeconds }}
    matchPolicy: Equivalent
    reinvocationPolicy: IfNeeded     # another webhook changing placement after tether's gets tether again
    clientConfig:
      {{- if $v.webhooks.binding.url }}
      url: {{ $v.webhooks.binding.url }}
      {{- else }}
      service:   # resolved through the host cluster's DNS by a Karmada API server running there
        name: {{ include "tether.webhookService" . }}
        namespace: {{ .Release.Namespace }}
        path: /mutate/resourcebindings
        port: {{ $v.webhooks.service.port }}
      {{- end }}
      {{- with $v.webhooks.certificates.caBundle }}
      caBundle: {{ . }}
      {{- end }}
    rules:
      - operations: ["CREATE", "UPDATE"]
        apiGroups: ["work.karmada.io"]
        apiVersions: ["v1alpha2"]
        resources: ["resourcebindings"]
        scope: Namespaced
    # Karmada's own namespaces and tether's are left alone: a broken webhook must never block the control plane.
    namespaceSelector:
      matchExpressions:
        - key: kubernetes.io/metadata.name
          operator: NotIn
          values: {{ toJson (uniq (append $v.webhooks.binding.excludeNamespaces $ns)) }}
{{- end }}
{{- end -}}

{{- define "tether.karmadaObjects" -}}
{{- $v := .Values -}}
{{- $ns := $v.karmada.namespace -}}
apiVersion: v1
kind: Namespace
metadata:
  name: {{ $ns }}
  labels:
    app.kubernetes.io/name: tether
{{- if ne $v.pluginConfig.namespace $ns }}
---
apiVersion: v1
kind: Namespace
metadata:
  name: {{ $v.pluginConfig.namespace }}
{{- end }}
{{- if $v.karmada.crds.install }}
{{- range $path, $_ := .Files.Glob "files/crds/*.yaml" }}
---
{{ $.Files.Get $path }}
{{- end }}
{{- end }}
---
{{ include "tether.karmadaRemovable" . }}
{{- if $v.pluginConfig.create }}
---
# Volcano Global's data-source plugin ConfigMap: one key per plugin, a JSON document each.
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $v.pluginConfig.name }}
  namespace: {{ $v.pluginConfig.namespace }}
  labels:
    app.kubernetes.io/name: tether
data:
  {{- range $name, $plugin := $v.pluginConfig.plugins }}
  {{ $name }}: {{ toJson $plugin | quote }}
  {{- end }}
{{- end }}
{{- if and $v.admission.enabled $v.admission.configMap.create }}
---
# Queue admission's configuration: volcano-scheduler.conf (Volcano's tiers), queue-managed (kinds, namespaces).
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $v.admission.configMap.name }}
  namespace: {{ $ns }}
  labels:
    app.kubernetes.io/name: tether
data:
  {{- toYaml $v.admission.configMap.data | nindent 2 }}
{{- end }}
{{- end -}}
