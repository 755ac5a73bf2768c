"""Scale-out on Ray Serve (issue 15, item 3): two replicas of the tiny model behind Ray's proxy on this CPU
(Ray runs locally) both answer the same API, each naming itself in X-Served-By."""

from __future__ import annotations

import io
import threading

import pytest
import soundfile as sf

from studio.runtime.warmup import synthetic_voice
from tests.serve.conftest import free_port

KEY = "ray-key"


def test_two_replicas_both_answer_the_speech_api(tiny_model_dir, tmp_path):
    ray = pytest.importorskip("ray")
    serve = pytest.importorskip("ray.serve")
    import httpx

    from studio.serve.ray_app import ReplicaSpec, deployment

    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        spec = ReplicaSpec(str(tiny_model_dir), str(tmp_path / "voices"), backend="pytorch", api_key=KEY)
        serve.run(deployment(spec, replicas=2), name="cosyvoice", route_prefix="/")
        base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {KEY}"}
        audio = io.BytesIO()
        sf.write(audio, 0.4 * synthetic_voice(16000, 3.0), 16000, format="WAV")
        made = httpx.post(f"{base}/v1/voices", headers=auth, timeout=120, data={"name": "Narrator",
                          "transcript": "A calm voice."}, files={"audio": ("n.wav", audio.getvalue())})  # fmt: skip
        assert made.status_code == 201, made.text
        served, codes = [], []

        def one(index: int) -> None:
            answer = httpx.post(f"{base}/v1/audio/speech", headers=auth, timeout=300,
                                json={"input": f"Replica test {index}.", "voice": "narrator", "seed": index})  # fmt: skip
            codes.append(answer.status_code)
            served.append(answer.headers.get("x-served-by"))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert codes == [200] * 8 and len(set(served)) == 2  # both replicas took requests
        assert httpx.get(f"{base}/health").json()["state"] == "ready"
        _every_scrape_counts_both_replicas(base, auth, set(served))
        assert httpx.get(f"{base}/v1/voices").status_code == 401  # the key holds behind Ray's proxy too
    finally:
        serve.shutdown()
        ray.shutdown()


def _every_scrape_counts_both_replicas(base: str, auth: dict, replicas: set[str]) -> None:
    """Whichever replica answers /metrics, it counts every replica's takes, each labelled with its replica."""
    import time

    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    def ok_takes() -> dict[str, float]:
        text = httpx.get(f"{base}/metrics", headers=auth, timeout=60).text
        return {
            s.labels["replica"]: s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "cosyvoice_speech_requests_total" and s.labels.get("outcome") == "ok"
        }

    deadline = time.monotonic() + 30
    while sum(ok_takes().values()) < 8 and time.monotonic() < deadline:
        time.sleep(1)
    for _ in range(4):  # Ray routes each scrape to either replica
        counted = ok_takes()
        assert set(counted) == replicas and sum(counted.values()) == 8, counted
