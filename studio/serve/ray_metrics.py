"""``/metrics`` under Ray Serve: every replica's metrics in every scrape, each sample labelled with its
``replica`` (the ``X-Served-By`` of the process), whichever replica Ray routes the scrape to. Each replica
pushes its exposition text to one small named actor every `PUSH_S` seconds and when it is scraped; a scrape
answers the latest text of every replica heard from in the last `STALE_S` seconds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("studio.serve")

HUB_NAME, HUB_NAMESPACE = "cosyvoice-metrics", "cosyvoice"
PUSH_S = 5.0  # how old another replica's counters may be in a scrape
STALE_S = 60.0  # a replica silent this long is gone (stopped, scaled down, crashed)


class MetricsHub:
    """The latest exposition text of each replica (a Ray actor; plain Python, so it is testable alone)."""

    def __init__(self) -> None:
        self.texts: dict[str, tuple[float, bytes]] = {}

    def put(self, replica: str, text: bytes) -> None:
        self.texts[replica] = (time.time(), text)

    def latest(self) -> dict[str, bytes]:
        now = time.time()
        self.texts = {r: (when, text) for r, (when, text) in self.texts.items() if now - when < STALE_S}
        return {replica: text for replica, (_when, text) in self.texts.items()}


def hub():
    """The hub actor, made by the first process that asks (it needs no CPU of its own)."""
    import ray

    actor = ray.remote(num_cpus=0)(MetricsHub)
    return actor.options(name=HUB_NAME, namespace=HUB_NAMESPACE, get_if_exists=True).remote()


def merge(texts: dict[str, bytes]) -> bytes:
    """One exposition of several replicas' texts, every sample labelled with its replica."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample

    families: dict[str, object] = {}
    for replica, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text.decode()):
            merged = families.setdefault(family.name, family)
            labelled = [
                Sample(s.name, {**s.labels, "replica": replica}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            ]
            if merged is family:
                family.samples = labelled
            else:
                merged.samples.extend(labelled)

    class _Merged:
        def collect(self):
            return list(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged())
    return generate_latest(registry)


def replica_metrics(own: Callable[[], bytes], replica: str) -> Callable[[], bytes]:
    """The ``metrics_text`` of a replica's app: starts its pusher, answers every replica's metrics (only its
    own, unlabelled, when the hub cannot be reached)."""
    import ray

    state: dict = {"hub": None}

    def push() -> dict[str, bytes] | None:
        try:
            state["hub"] = state["hub"] or hub()
            ray.get(state["hub"].put.remote(replica, own()), timeout=10)
            return ray.get(state["hub"].latest.remote(), timeout=10)
        except Exception as exc:  # noqa: BLE001 - the hub died with its owner: made again next time
            log.warning("replica metrics could not reach the hub: %s", exc)
            state["hub"] = None
            return None

    def pusher() -> None:
        while True:
            push()
            time.sleep(PUSH_S)

    threading.Thread(target=pusher, name="metrics-push", daemon=True).start()

    def text() -> bytes:
        texts = push()
        return merge(texts) if texts else own()

    return text
