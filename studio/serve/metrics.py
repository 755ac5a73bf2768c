"""Prometheus metrics of the speech service, on a registry of its own: requests by outcome, first-chunk and
total latency, RTF, active and queued takes, and the GPU's memory and utilisation (NVML, read when scraped)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)


class _GpuCollector:
    """GPU memory and utilisation per device, read from NVML at each scrape (nothing without a GPU)."""

    def collect(self):
        try:
            from studio.gpu.nvml import query_gpus

            gpus = query_gpus()
        except Exception:  # noqa: BLE001 - no NVIDIA GPU or driver: no GPU metrics
            return
        used = GaugeMetricFamily("cosyvoice_gpu_memory_used_bytes", "GPU memory in use", labels=["gpu"])
        total = GaugeMetricFamily("cosyvoice_gpu_memory_total_bytes", "GPU memory", labels=["gpu"])
        util = GaugeMetricFamily("cosyvoice_gpu_utilization_ratio", "GPU busy share", labels=["gpu"])
        for gpu in gpus:
            used.add_metric([str(gpu.index)], gpu.memory_used)
            total.add_metric([str(gpu.index)], gpu.memory_total)
            if gpu.utilization_percent is not None:
                util.add_metric([str(gpu.index)], gpu.utilization_percent / 100.0)
        yield from (used, total, util)


class Metrics:
    def __init__(self, service) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "cosyvoice_speech_requests", "Speech requests by outcome", ["outcome"], registry=self.registry
        )
        self.responses = Counter(
            "cosyvoice_http_responses",
            "HTTP answers by status code (refusals included)",
            ["status"],
            registry=self.registry,
        )
        self.first_chunk = Histogram(
            "cosyvoice_first_chunk_seconds",
            "Request to first audio chunk",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.total = Histogram(
            "cosyvoice_take_seconds", "Whole take", buckets=LATENCY_BUCKETS, registry=self.registry
        )
        self.rtf = Histogram(
            "cosyvoice_rtf", "Synthesis time / audio time", buckets=RTF_BUCKETS, registry=self.registry
        )
        active = Gauge("cosyvoice_active_takes", "Takes running", registry=self.registry)
        active.set_function(lambda: len(service.active))
        queued = Gauge("cosyvoice_queued_takes", "Takes waiting for GPU memory", registry=self.registry)
        queued.set_function(lambda: _queued(service))
        self.registry.register(_GpuCollector())

    def request(self, outcome: str) -> None:
        self.requests.labels(outcome).inc()

    def response(self, status: int) -> None:
        self.responses.labels(str(status)).inc()

    def take_done(self, first_chunk: float | None, total: float, rtf: float) -> None:
        if first_chunk is not None:
            self.first_chunk.observe(first_chunk)
        self.total.observe(total)
        self.rtf.observe(rtf)

    def text(self) -> bytes:
        return generate_latest(self.registry)


def _queued(service) -> int:
    gate = getattr(getattr(service.loaded, "model", None), "take_gate", None)
    return gate.waiting if gate is not None else 0
