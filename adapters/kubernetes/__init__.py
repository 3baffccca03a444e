"""The Kubernetes adapter: a thin generic client, watch sources that append observations, command executors.

* :mod:`.client` — :class:`KubeClient`, raw JSON verbs over a kubernetes-asyncio ``ApiClient`` (its auth, TLS
  and kubeconfig handling) without its model classes: tether only needs dicts, decoded by msgspec.
* :mod:`.watch` — :class:`WatchSource`, list + watch of one resource into the event log.
* :mod:`.executor` — :class:`KubeExecutor`, one ``apply_<command>`` method per Kubernetes command.
* :mod:`.leader` — Lease-based leader election.
* :mod:`.manifests` — the objects tether creates (DataSources) and the smallest valid test objects.
* :mod:`.webhook` — the admission webhook server (AdmissionReview v1 over HTTPS, answered from memory);
  :mod:`.webhook_certs` — its self-signed certificates and ``caBundle`` injection.
"""
