"""Where the studio's engine runs: a process of this computer (the default) or a speech server
(``cosyvoice-studio serve``) named in Settings -> Engine location; the client and GPU source for each."""

from __future__ import annotations

from studio.settings import Settings


def is_remote(settings: Settings) -> bool:
    return bool(settings.engine_url)


def engine_client(settings: Settings):
    """A RemoteEngineClient for a server; None for this computer (the bridge makes its own client)."""
    if not is_remote(settings):
        return None
    from studio.engine.remote_client import RemoteEngineClient

    return RemoteEngineClient(settings.engine_url, settings.engine_key)


def gpu_query(settings: Settings):
    """What the GPU panel reads: the server's /metrics, or this computer's NVML (None: the default)."""
    if not is_remote(settings):
        return None
    from studio.engine.remote_client import remote_gpu_query

    return remote_gpu_query(settings.engine_url, settings.engine_key)


def move_engine(window, old: Settings, new: Settings) -> None:
    """When the engine's place changed, the window's bridge and GPU panel follow from the next start."""
    if (old.engine_url, old.engine_key) == (new.engine_url, new.engine_key):
        return
    from studio.gpu.nvml import query_gpus

    window.bridge.use_client(engine_client(new))
    window.gpu_panel._query = gpu_query(new) or query_gpus
