"""The sandbox: stand-ins for the outside world, for the demo and the tests — never on ``tether run``'s path.

* :mod:`.kube_emulator` — a Kubernetes API server emulator (with a Karmada scheduler stand-in and a pod binder);
* :mod:`.catalog` — an Iceberg REST catalog on Amoro's paths, with fault injection;
* :mod:`.demo` — the demo's world and story; :mod:`.demo_command` — ``tether demo``, which runs it.
"""
