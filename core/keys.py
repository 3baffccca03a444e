"""Every annotation key, label key, finalizer and scheduling-gate name tether's code reads or writes, defined once.

Every other module — the deciders, the fold, the executors, the webhooks, the sandbox, the test machinery, the
benches — imports them from here: ``tests/test_keys.py`` fails on a key written as a literal anywhere else, so two
modules cannot drift apart on a name (as ``tether.dev/admission`` once was defined twice, and the placement gate and
annotation each on their own). Grouped by who owns the name; tether's own are under :data:`TETHER_KEY_PREFIXES`.
"""

from __future__ import annotations

# --- tether's own, on Volcano Global's names (a cluster running Volcano Global's controller can switch to tether) ---

#: On a DataSourceClaim while tether serves it: released once no DataSource lists the claim.
CLAIM_FINALIZER = "datadependency.volcano.sh/finalizer"
#: On a DataSource while tether serves it: released once no claim refers to it.
DATASOURCE_FINALIZER = "datadependency.volcano.sh/datasource-finalizer"
#: ``"true"`` on a ResourceBinding whose placement carries tether's exclusions (the gate annotation).
PLACEMENT_INJECTED_ANNOTATION = "datadependency.volcano.sh/placement-injected"
#: The clusters tether added to a binding's exclusions (sorted, comma-joined): what it strips, and nothing else.
EXCLUDED_CLUSTERS_ANNOTATION = "datadependency.volcano.sh/excluded-clusters"

# --- tether's own -----------------------------------------------------------------------------------------------

#: tether's additions per affinity term (a JSON object), on a binding whose placement has ``clusterAffinities``.
ADDED_BY_TERM_ANNOTATION = "tether.dev/added-exclusions"
#: tether's share of a binding placed by locality tiers (a JSON object): the user's own cluster affinity it replaced,
#: a digest of the ``clusterAffinities`` it wrote (a detector revert shows as a mismatch), and what it left out.
LOCALITY_TIERS_ANNOTATION = "tether.dev/locality-tiers"
#: On a DataSourceClaim: the Fluid Dataset (``[namespace/]name``) its data is loaded into, for a claim stored under a
#: CRD without ``spec.dataset`` (Volcano Global's prunes it); ``spec.dataset`` wins when both say one.
DATASET_ANNOTATION = "tether.dev/dataset"
#: The state of each admission check of a queue-managed binding (a JSON object: check → state, reason).
ADMISSION_CHECKS_ANNOTATION = "tether.dev/admission-checks"
#: On a DataSource: the catalog location its locality was computed from.
LOCATION_ANNOTATION = "tether.dev/data-location"
#: Admission's mark, on two kinds: on a ResourceBinding the reason it is held (set by the binding webhook when it
#: suspends, then by the admission decider); on a pod gated by the pod webhook the uid of the AdmissionReview that
#: gated it (the key of its ``PodGateDecided``).
ADMISSION_ANNOTATION = "tether.dev/admission"
#: On a binding tether resumed: the whole request it admitted.
ADMITTED_REQUEST_ANNOTATION = "tether.dev/admitted-request"
#: On an admitted binding whose request grew past what its queue admitted.
OVERRUN_ANNOTATION = "tether.dev/admission-overrun"
#: On a binding released at its hold's bound without the data constraint; removed once the placement is on it.
RELEASED_ANNOTATION = "tether.dev/admission-released"
#: On a binding queue admission evicted: the binding (``namespace/name``) it made room for. It waits until that one
#: is admitted, and the annotation goes when it is admitted again.
EVICTED_FOR_ANNOTATION = "tether.dev/evicted-for"
#: The scheduling gate tether's pod webhook adds and the pod-placement decider removes.
PLACEMENT_GATE = "tether.dev/placement"
#: On a pod tether released: what decided its placement. The same name as the gate it replaces, on purpose: a pod
#: carries one or the other.
PLACEMENT_ANNOTATION = PLACEMENT_GATE
#: On a namespace of a member cluster: its pods go through tether's pod webhook.
POD_PLACEMENT_LABEL = "tether.dev/pod-placement"

#: The prefixes of the keys tether owns (another writer changing one of them is a competing writer).
TETHER_KEY_PREFIXES = ("tether.dev/", "datadependency.volcano.sh/")

# --- Volcano ----------------------------------------------------------------------------------------------------

#: A workload's queue, as a pod template's label or annotation (Volcano Global's first choice).
QUEUE_NAME_KEY = "volcano.sh/queue-name"
#: A workload's queue, as an annotation of the pod template or the workload.
SCHEDULING_QUEUE_NAME_KEY = "scheduling.volcano.sh/queue-name"
VOLCANO_JOB_NAME_LABEL = "volcano.sh/job-name"
VOLCANO_TASK_SPEC_LABEL = "volcano.sh/task-spec"

# --- Godel and Fluid --------------------------------------------------------------------------------------------

#: The pod annotation that makes a pod a member of a Godel PodGroup (in the pod's namespace).
POD_GROUP_ANNOTATION = "godel.bytedance.com/pod-group-name"
#: On a Fluid operation's pod: the node labels its placement records, besides the standard ones.
FLUID_LABELS_ANNOTATION = "affinity.dataflow.fluid.io/labels"

# --- Karmada ----------------------------------------------------------------------------------------------------

#: The label Karmada's detector puts on a ResourceBinding of a PropagationPolicy (and of a ClusterPropagationPolicy).
PERMANENT_ID_LABEL = "propagationpolicy.karmada.io/permanent-id"
CLUSTER_PERMANENT_ID_LABEL = "clusterpropagationpolicy.karmada.io/permanent-id"
POLICY_NAME_LABEL = "propagationpolicy.karmada.io/name"
BINDING_MANAGED_BY_LABEL = "binding.karmada.io/managed-by"
#: Karmada's copy of the placement it applied to a binding.
APPLIED_PLACEMENT_ANNOTATION = "policy.karmada.io/applied-placement"
KARMADA_REGION_LABEL = "topology.karmada.io/region"

# --- Kubernetes -------------------------------------------------------------------------------------------------

HOSTNAME_LABEL = "kubernetes.io/hostname"
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ROLE_LABEL = "kubernetes.io/role"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
ENDPOINTSLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
#: kubectl's copy of the applied object: dropped from every snapshot tether records (it repeats the spec).
LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"

# --- the sandbox and the test machinery -------------------------------------------------------------------------

#: A finalizer the tests hold objects with (the emulator's test environment knows it).
TEST_FINALIZER = "test.tether.io/hold"
#: The prefix of the NoSchedule taint key of a test environment's Nodes (a random suffix per environment).
TEST_TAINT_PREFIX = "test.tether.io/node-"
#: The prefix of a test member's rack label (a random suffix per member).
TEST_RACK_LABEL_PREFIX = "test.tether.io/rack-"
#: The rack label of the synthetic logs' member nodes.
RACK_LABEL = "topology.tether.dev/rack"
