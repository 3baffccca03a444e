"""Hostile AdmissionReviews to both webhooks, over the real aiohttp server (HTTPS, in process).

Each request is a valid review bent out of shape, any JSON at all, a truncated body, a body nested deeper than
``MAX_JSON_DEPTH``, another kind or version, or bytes that are not JSON; it goes to the ResourceBinding webhook,
the pod webhook of the member ``m1``, or the pod webhook of a member tether does not know. Every answer is an
AdmissionReview (allowed, with a patch or not) or a 400/413 with a one-line reason, or a 503 where the webhook
may not answer (the failurePolicy applies) — never a 500, which would mean a handler raised. What the handlers
recorded is read back from the SQLite log (a record no reader can decode would stop the daemon at its next
start) and folded into the world, as the decider loop does.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests as m
from tether.adapters.kubernetes.binding_webhook import PATH as BINDING_PATH
from tether.adapters.kubernetes.binding_webhook import BindingWebhook
from tether.adapters.kubernetes.pod_webhook import PATH as POD_PATH
from tether.adapters.kubernetes.pod_webhook import PodWebhook
from tether.adapters.kubernetes.webhook import MAX_JSON_DEPTH, MAX_REVIEW_BYTES, WebhookServer
from tether.adapters.kubernetes.webhook_certs import ensure_self_signed
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.hostile import bent, fuzz_settings, json_values, nested
from tether.core.envelope import EventRecord
from tether.core.events import BindingAdmissionDecided, PodGateDecided
from tether.core.world import World
from tether.projections.step import step

from .worlds import GROUP_ANNOTATION, MEMBER, NS, world

PATHS = {"binding": BINDING_PATH, "pod": POD_PATH.replace("{cluster}", MEMBER),
         "stranger": POD_PATH.replace("{cluster}", "nobody")}


def review(obj: dict[str, Any], *, operation: str = "CREATE", uid: str = "uid-1") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": obj.get("kind")},
                        "operation": operation, "namespace": NS, "name": obj["metadata"].get("name", ""),
                        "object": obj, "oldObject": None, "dryRun": False,
                        "userInfo": {"username": "system:serviceaccount:ml:default"}}}


BINDING_REVIEW = review(m.resource_binding("w2", namespace=NS))
POD_REVIEW = review({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"generateName": "g-", "namespace": NS, "annotations": {GROUP_ANNOTATION: "g"}},
                     "spec": {"containers": [{"name": "c", "image": "x",
                                              "resources": {"requests": {"cpu": "1"}}}]}})


@dataclass
class Hooks:
    server: WebhookServer
    log: SqliteLog
    world: World
    http: aiohttp.ClientSession
    context: ssl.SSLContext
    seen: int = 0  # events read back so far

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        url = f"https://127.0.0.1:{self.server.port}{path}"
        async with self.http.post(url, data=body, ssl=self.context,
                                  headers={"Content-Type": "application/json"}) as response:
            return response.status, await response.read()

    async def fold_recorded(self) -> list[EventRecord]:
        """The events the handlers appended since the last call, read back and folded (module doc)."""
        records: list[EventRecord] = []
        async for batch in self.log.read("events", after={0: self.seen}):
            records += [r for r in batch if isinstance(r, EventRecord)]
        for record in records:
            step(self.world, record)
            self.seen = record.offset
        return records


@pytest.fixture
async def hooks(tmp_path: Path) -> AsyncIterator[Hooks]:
    cert, key, ca = ensure_self_signed(tmp_path / "certs", names=["127.0.0.1"])
    log = await SqliteLog.open(tmp_path / "tether.db", on_corrupt="raise")
    the_world = world().world

    async def append(records: Any) -> object:
        return await log.append("events", records)

    server = WebhookServer(handlers={BINDING_PATH: BindingWebhook(world=lambda: the_world, append=append),
                                     POD_PATH: PodWebhook(world=lambda: the_world, append=append)},
                           cert_file=str(cert), key_file=str(key), serving=lambda: (True, "current"),
                           host="127.0.0.1", port=0)
    await server.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield Hooks(server, log, the_world, http, ssl.create_default_context(cadata=ca.decode()))
    finally:
        await server.stop()
        await log.close()


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


valid_reviews = st.sampled_from([BINDING_REVIEW, POD_REVIEW])
bent_objects = st.sampled_from([BINDING_REVIEW, POD_REVIEW]).flatmap(  # a well-formed review of a bent object
    lambda r: st.tuples(bent(r["request"]["object"], max_changes=3), st.sampled_from(["CREATE", "UPDATE", "DELETE"]))
    .map(lambda obj_op: dumps({**r, "request": {**r["request"], "object": obj_op[0], "operation": obj_op[1]}})))
bodies = st.one_of(
    bent_objects,
    bent_objects,
    valid_reviews.flatmap(lambda r: bent(r, max_changes=3)).map(dumps),
    valid_reviews.flatmap(lambda r: bent(r, max_changes=2, keep=(("apiVersion",), ("kind",), ("request", "uid"))))
    .map(dumps),
    valid_reviews.map(dumps).flatmap(lambda raw: st.integers(0, len(raw)).map(lambda n: raw[:n])),  # truncated
    valid_reviews.flatmap(lambda r: st.sampled_from(["admission.k8s.io/v1beta1", "v1", "", "admission.k8s.io/v2"])
                          .map(lambda v: dumps({**r, "apiVersion": v}))),
    valid_reviews.map(lambda r: dumps({**r, "kind": "ConfigMap"})),
    valid_reviews.map(lambda r: json.dumps(r).replace('"spec"', '"deep": ' + nested(MAX_JSON_DEPTH).decode()
                                                      + ', "spec"', 1).encode()),
    json_values().map(dumps),
    st.binary(max_size=64),
)


def assert_answer(status: int, body: bytes, sent: bytes) -> None:
    assert status in (200, 400, 413, 503), (status, body[:300])
    if status != 200:
        assert body and b"\n" not in body.strip(), body[:300]
        return
    answer = json.loads(body)
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    response = answer["response"]
    assert response["uid"] == json.loads(sent)["request"]["uid"] and response["allowed"] is True
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"]))
        assert ops and all(op["op"] in ("add", "replace", "remove") and op["path"].startswith("/") for op in ops)


@fuzz_settings()
@given(body=bodies, target=st.sampled_from(["binding", "binding", "pod", "pod", "stranger"]))
@example(body=dumps({**BINDING_REVIEW, "request": {**BINDING_REVIEW["request"], "object": {  # (the request names the
    **BINDING_REVIEW["request"]["object"], "metadata": "nonsense"}}}), target="binding")  # namespace, not the object)
async def test_a_hostile_review_is_answered_never_a_500(hooks: Hooks, body: bytes, target: str) -> None:
    status, answer = await hooks.post(PATHS[target], body)
    event(f"{target} → {status}")  # (--hypothesis-show-statistics: what the examples reached)
    assert_answer(status, answer, body)
    if target == "stranger" and status not in (400, 413):
        assert status == 503 and b"not connected to a member cluster named 'nobody'" in answer
    recorded = await hooks.fold_recorded()  # decodable, foldable
    expected = {"binding": BindingAdmissionDecided, "pod": PodGateDecided}.get(target)
    if status == 200 and not json.loads(body)["request"].get("dryRun"):
        assert [type(r.event) for r in recorded] == [expected]
    else:
        assert recorded == []


async def test_the_bounds_and_the_kinds_are_answered_with_reasons(hooks: Hooks) -> None:
    status, body = await hooks.post(PATHS["binding"], b" " * (MAX_REVIEW_BYTES + 1))
    assert status == 413 and str(MAX_REVIEW_BYTES).encode() in body
    for depth in (100_000, 900):  # beyond the decoder's recursion, and within it
        status, body = await hooks.post(PATHS["binding"], b'{"request": {"uid": "u", "object": {"x": '
                                        + nested(depth) + b"}}}")
        assert status == 400 and f"nested deeper than {MAX_JSON_DEPTH}".encode() in body
    deep = dumps({**BINDING_REVIEW, "request": {**BINDING_REVIEW["request"], "object": {
        **BINDING_REVIEW["request"]["object"], "x": json.loads(nested(MAX_JSON_DEPTH))}}})
    status, body = await hooks.post(PATHS["binding"], deep)
    assert status == 400 and f"nested deeper than {MAX_JSON_DEPTH}".encode() in body
    for version, kind in (("admission.k8s.io/v1beta1", "AdmissionReview"), ("admission.k8s.io/v1", "Pod")):
        status, body = await hooks.post(PATHS["pod"], dumps({**POD_REVIEW, "apiVersion": version, "kind": kind}))
        assert status == 400 and f"got {version} {kind}".encode() in body
    status, body = await hooks.post(PATHS["pod"], dumps({**POD_REVIEW, "request": {**POD_REVIEW["request"],
                                                                                   "uid": ""}}))
    assert status == 400 and b"request.uid" in body
    status, body = await hooks.post(PATHS["pod"], dumps(POD_REVIEW))  # still serving, and still right
    assert status == 200 and "patch" in json.loads(body)["response"]
    assert [type(r.event) for r in await hooks.fold_recorded()] == [PodGateDecided]
