"""Scale-out on Ray Serve: the same API, one model per replica (one GPU each where there are GPUs), Ray's
routing and autoscaling in front. Each replica builds the app when Ray starts it (the builder runs there),
loads its model, and says who it is in ``X-Served-By``; ``/metrics`` answers every replica's metrics, each
labelled with its ``replica`` (`studio.serve.ray_metrics`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ReplicaSpec:
    """What every replica loads (picklable: Ray ships it to the replica processes)."""

    model_dir: str
    voices_dir: str
    backend: str = "pytorch"
    fp16: bool = True
    vram_budget_gb: float = 0.0
    api_key: str | None = None
    vllm_options: dict = field(default_factory=dict)
    asr_model: str = ""
    voice_aliases: dict = field(default_factory=dict)  # `serve --voice-alias`


def build_replica_app(spec: ReplicaSpec):
    """The ASGI app of one replica, its model loaded before it takes traffic."""
    import os
    import socket

    from studio.serve.app import create_app
    from studio.serve.ray_metrics import replica_metrics
    from studio.serve.service import SpeechService
    from studio.voices import VoiceLibrary

    service = SpeechService(
        spec.model_dir,
        VoiceLibrary(spec.voices_dir),
        backend=spec.backend,
        fp16=spec.fp16,
        vllm_options=spec.vllm_options,
        vram_budget_gb=spec.vram_budget_gb,
        asr_model=spec.asr_model,
        voice_aliases=spec.voice_aliases,
    )
    service.load()
    replica = f"{socket.gethostname()}:{os.getpid()}"  # as its X-Served-By says
    return create_app(service, spec.api_key, metrics_text=replica_metrics(service.metrics.text, replica))


def deployment(
    spec: ReplicaSpec, replicas: int | str = 1, gpus_per_replica: float = 0.0, max_ongoing: int = 64
):
    """The Ray Serve application: ``replicas`` copies (or "auto": Ray's autoscaling between 1 and 8)."""
    from ray import serve

    options: dict = {
        "ray_actor_options": {"num_gpus": gpus_per_replica, "num_cpus": 1},
        "max_ongoing_requests": max_ongoing,
    }
    if replicas == "auto":
        options["autoscaling_config"] = {"min_replicas": 1, "max_replicas": 8, "target_ongoing_requests": 8}
    else:
        options["num_replicas"] = int(replicas)
    replica = serve.ingress(lambda: build_replica_app(spec))()  # the builder runs on each replica
    return serve.deployment(replica, name="cosyvoice-speech", **options).bind()


def run(spec: ReplicaSpec, host: str, port: int, replicas: int | str, gpus_per_replica: float) -> None:
    """Start Ray (local unless RAY_ADDRESS names a cluster) and Serve, deploy, and block until interrupted."""
    import ray
    from ray import serve

    ray.init(ignore_reinit_error=True)
    serve.start(http_options={"host": host, "port": port})
    serve.run(deployment(spec, replicas, gpus_per_replica), name="cosyvoice", route_prefix="/", blocking=True)
