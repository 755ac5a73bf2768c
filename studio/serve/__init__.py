"""Serve mode: an OpenAI-compatible speech API (``/v1/audio/speech``), the studio's voice library over HTTP,
health and Prometheus metrics, on the same runtime the studio's engine runs (`studio.runtime.runner`)."""
