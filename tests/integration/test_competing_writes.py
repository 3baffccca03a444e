"""CompetingWrites tells this process's writes from another writer's, and says so within its limits.

Unit tests on hand-made objects and a hand-driven clock (no API server): what counts as tether's fields, the
race between a write's watch event and its answer, the binding webhook's own changes, and the rate limits. The
daemon wiring (two daemons on one API server each reporting the other) is in ``test_two_writers.py``.
"""

from __future__ import annotations

from typing import Any

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.competing import CompetingWrites, owned_fields
from tether.core.keys import EXCLUDED_CLUSTERS_ANNOTATION
from tether.core.kube import KubeObject, trim


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def claim(rv: int, reason: str, *, name: str = "c") -> KubeObject:
    raw: dict[str, Any] = manifests.claim(name, namespace="ns", table="db.t")
    raw["metadata"].update(resourceVersion=str(rv), uid="u1")
    raw["status"] = {"phase": "Pending", "conditions": [{"type": "Bound", "status": "False", "reason": reason}]}
    return trim(raw)


def binding(rv: int, *, excluded: str = "", clusters: tuple[str, ...] = ()) -> KubeObject:
    raw = manifests.resource_binding("w", namespace="ns")
    raw["metadata"].update(resourceVersion=str(rv), uid="u2")
    if excluded:
        raw["metadata"]["annotations"] = {EXCLUDED_CLUSTERS_ANNOTATION: excluded, "someone.else/note": str(rv)}
    raw["spec"]["clusters"] = [{"name": c, "replicas": 1} for c in clusters]
    return trim(raw)


def detector(clock: Clock, **options: Any) -> tuple[CompetingWrites, list[str]]:
    counted: list[str] = []
    return CompetingWrites(count=counted.append, clock=clock, **options), counted


def test_a_change_this_process_wrote_is_its_own_whichever_arrives_first() -> None:
    writes, counted = detector(Clock())
    writes.observed(claim(1, "Resolving"))
    key = claim(1, "x").key
    writes.writing(key)  # the answer first, then the watch's echo
    writes.wrote(key, claim(2, "DataSourceNotFound"))
    writes.observed(claim(2, "DataSourceNotFound"))
    writes.writing(key)  # the watch's event first, while the write is under way
    writes.observed(claim(3, "Bound"))
    assert counted == []
    writes.wrote(key, claim(3, "Bound"))
    assert counted == [] and writes.foreign == 0


def test_another_writers_change_of_tethers_fields_counts_and_is_reported_within_limits() -> None:
    clock = Clock()
    writes, counted = detector(clock, interval=60.0, burst=2)
    writes.observed(claim(1, "Resolving"))
    writes.observed(claim(2, "Bound"))  # nobody here wrote that
    assert counted == ["DataSourceClaim"] and writes.reported == {claim(1, "x").key: clock.now}
    writes.observed(claim(3, "Resolving"))  # again, within the interval: counted, not reported again
    assert counted == ["DataSourceClaim"] * 2 and len(writes.recent) == 1
    for name in ("d", "e"):  # the burst: two reports per interval in all
        writes.observed(claim(4, "Resolving", name=name))
        writes.observed(claim(5, "Bound", name=name))
    assert len(counted) == 4 and len(writes.recent) == 2 and claim(1, "x", name="e").key not in writes.reported
    clock.now += 61
    writes.observed(claim(6, "Bound", name="e"))
    writes.observed(claim(7, "Resolving", name="e"))
    assert len(counted) == 5 and claim(1, "x", name="e").key in writes.reported


def test_a_change_under_way_with_a_write_is_judged_by_the_answer() -> None:
    writes, counted = detector(Clock())
    writes.observed(claim(1, "Resolving"))
    key = claim(1, "x").key
    writes.writing(key)
    writes.observed(claim(2, "Bound"))  # another writer's, seen while ours is under way
    assert counted == []
    writes.wrote(key, claim(3, "DataSourceNotFound"))
    assert counted == ["DataSourceClaim"]


def test_what_tether_does_not_own_is_not_watched() -> None:
    writes, counted = detector(Clock())
    writes.observed(binding(1, excluded="c3"))
    writes.observed(binding(2, excluded="c3", clusters=("c1",)))  # the scheduler; another's annotation
    assert counted == [] and owned_fields(binding(1, excluded="c3")) == owned_fields(binding(9, excluded="c3"))
    writes.observed(binding(3, excluded="c1,c2"))
    assert counted == ["ResourceBinding"]
    writes.observed(binding(2, excluded="c9"))  # older than what was seen: ignored
    assert counted == ["ResourceBinding"]


def test_the_binding_webhooks_own_change_is_not_another_writers() -> None:
    clock = Clock()
    writes, counted = detector(clock, expect_window=30.0)
    writes.observed(binding(1, excluded="c3"))
    writes.expect(binding(1).key)  # the webhook patched an UPDATE (Karmada's detector re-applying the policy)
    writes.observed(binding(2, excluded="c1,c2"))
    assert counted == []
    writes.observed(binding(3, excluded="c3"))  # expected once only
    assert counted == ["ResourceBinding"]
    writes.expect(binding(1).key)
    clock.now += 31  # and only for a while
    writes.observed(binding(4, excluded="c1"))
    assert counted == ["ResourceBinding"] * 2


def data_source(rv: int, bound: int) -> KubeObject:
    raw: dict[str, Any] = {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSource",
                           "metadata": {"name": "amoro-table-db.t", "resourceVersion": str(rv), "uid": "u3"},
                           "spec": {"system": "amoro", "type": "table", "name": "db.t"},
                           "status": {"boundClaims": bound}}
    return trim(raw)


def test_a_shared_datasource_is_judged_only_once_this_process_wrote_it() -> None:
    """With --watch-namespace a DataSource is shared with the tethers of other namespaces: their writes of one this
    process never wrote are theirs to make (on a shared cluster, every other run's); once it wrote it, another's
    change of it is a competitor's again."""
    counted: list[str] = []
    writes = CompetingWrites(count=counted.append, shared_kinds=frozenset({"DataSource"}))
    for rv in range(1, 5):  # another namespace's tether writes it, again and again
        writes.observed(data_source(rv, bound=rv))
    assert counted == [] and writes.foreign == 0
    writes.writing(data_source(5, 5).key)
    writes.wrote(data_source(5, 5).key, data_source(5, bound=5))  # this process writes it
    writes.observed(data_source(5, bound=5))  # its own echo
    writes.observed(data_source(6, bound=9))  # then someone else's change
    assert counted == ["DataSource"]
    everything = CompetingWrites()  # without --watch-namespace: every DataSource is this tether's
    everything.observed(data_source(1, bound=1))
    everything.observed(data_source(2, bound=2))
    assert everything.foreign == 1


def test_a_deleted_object_is_forgotten() -> None:
    writes, counted = detector(Clock())
    writes.observed(claim(1, "Resolving"))
    writes.observed(claim(2, "Resolving"), True)
    writes.observed(claim(3, "Bound"))  # a new object of that name: its first sight
    assert counted == [] and writes.seen[claim(1, "x").key][0] == "3"


def test_past_its_bound_the_detector_forgets_the_object_seen_longest_ago() -> None:
    """Memory stays bounded on a cluster of any size: the least recently seen object is forgotten (and a change to
    it is then taken for a first sight, never reported), the others are still followed."""
    writes, counted = detector(Clock(), max_objects=2)
    for name in ("a", "b", "c"):
        writes.observed(claim(1, "Resolving", name=name))
    assert sorted(key.rsplit("/", 1)[1] for key in writes.seen) == ["b", "c"]
    writes.observed(claim(2, "Bound", name="a"))  # forgotten: a first sight again (and b goes)
    writes.observed(claim(2, "Bound", name="c"))  # still followed: someone else's change
    assert counted == ["DataSourceClaim"] and writes.foreign == 1


async def test_a_reported_change_is_also_an_event_and_a_failing_one_is_only_logged() -> None:
    emitted: list[str] = []

    async def emit(obj: KubeObject) -> None:
        emitted.append(obj.key)
        if obj.metadata.name == "refused":
            raise RuntimeError("events are forbidden")

    writes = CompetingWrites(emit=emit, clock=Clock())
    for name in ("c", "refused"):
        writes.observed(claim(1, "Resolving", name=name))
        writes.observed(claim(2, "Bound", name=name))  # someone else's change
    await writes.aclose()  # (waits for the Events under way; a failed one is not raised)
    assert [key.rsplit("/", 1)[1] for key in emitted] == ["c", "refused"] and writes.foreign == 2
