"""Writes counted by the API server: ``apiserver_request_total`` read before and after, as an operator would.

tether's log counts the writes it made (each ``CommandSucceeded`` that was not a no-op); the API server counts
the requests it served. The two are read the same way on the emulator and on a real cluster (the emulator keeps
the counter with the real labels: ``adapters/sandbox/kube_emulator/metrics.py``), so a bench or a test can check
that they agree. The counter has no label for the client, so what another writer did in the same window is
subtracted from its own client counter (``rest_client_requests_total`` on its metrics port: karmada-scheduler's
on ``127.0.0.1:10351`` in ``../shared/realk8s``), and what the measuring client itself wrote is known to it.
"""

from __future__ import annotations

import collections
from typing import NamedTuple

import aiohttp
from kubernetes_asyncio import client
from prometheus_client.parser import text_string_to_metric_families

#: The verbs that write, as the API server names them.
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class Request(NamedTuple):
    verb: str
    group: str
    resource: str  # resource, or resource/subresource
    code: str


Counts = collections.Counter[Request]


def parse_request_total(text: str) -> Counts:
    """``apiserver_request_total`` from a Prometheus text exposition, summed over the labels not kept."""
    out: Counts = collections.Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":  # (the parser drops a counter's _total suffix)
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            resource = labels.get("resource", "")
            if not resource:
                continue
            sub = labels.get("subresource", "")
            out[Request(labels.get("verb", ""), labels.get("group", ""), f"{resource}/{sub}" if sub else resource,
                        labels.get("code", ""))] += int(sample.value)
    return out


async def request_totals(api: client.ApiClient) -> Counts:
    """The API server's ``apiserver_request_total`` now (``GET /metrics`` with the client's credentials)."""
    response = await api.call_api("/metrics", "GET", header_params={"Accept": "text/plain"},
                                  auth_settings=["BearerToken"], _preload_content=False, _request_timeout=30)
    try:
        text = (await response.read()).decode()
    finally:
        response.release()
    return parse_request_total(text)


def writes(before: Counts, after: Counts) -> collections.Counter[str]:
    """The successful writes between two readings, by ``"<resource> <VERB>"`` (group-qualified when not core)."""
    out: collections.Counter[str] = collections.Counter()
    for key, count in (after - before).items():
        if key.verb in WRITE_VERBS and key.code.startswith("2"):
            resource = f"{key.resource}.{key.group}" if key.group else key.resource
            out[f"{resource} {key.verb}"] += count
    return out


async def client_writes(url: str) -> int:
    """A component's successful writes so far, from its own ``rest_client_requests_total`` (client-go's)."""
    async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
        r.raise_for_status()
        text = await r.text()
    total = 0
    for family in text_string_to_metric_families(text):
        if family.name != "rest_client_requests":
            continue
        for sample in family.samples:
            if (sample.name.endswith("_total") and sample.labels.get("method") in WRITE_METHODS
                    and sample.labels.get("code", "").startswith("2")):
                total += int(sample.value)
    return total
