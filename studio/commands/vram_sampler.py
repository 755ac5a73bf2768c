"""GPU memory of a benchmark's process tree, sampled while it runs (NVML): `bench`'s peak VRAM per level."""

from __future__ import annotations

import os
import threading
from pathlib import Path


class VramSampler:
    """Samples GPU memory every 50 ms while a backend runs; ``peak`` in bytes (None without NVML).

    Takes the larger of two readings: what NVML attributes to this process and its children (vLLM's
    engine core), and how much the devices' used memory grew since the start (containers often hide
    per-process numbers).
    """

    def __init__(self) -> None:
        self.peak: int | None = None
        self.window_peak: int | None = None  # since the last `new_window()` (one concurrency level)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._baseline = 0

    @staticmethod
    def _pids() -> set[int]:
        pids = {os.getpid()}
        try:
            for entry in sorted(
                Path("/proc").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0
            ):
                if entry.name.isdigit():
                    parent = int((entry / "stat").read_text().rsplit(") ", 1)[-1].split()[1])
                    if parent in pids:
                        pids.add(int(entry.name))
        except (OSError, ValueError, IndexError):
            pass
        return pids

    def _reading(self, query_gpus) -> int:
        gpus = query_gpus()
        pids = self._pids()
        attributed = sum(mem for gpu in gpus for pid, mem in gpu.process_memory.items() if pid in pids)
        grown = sum(gpu.memory_used for gpu in gpus) - self._baseline
        return max(attributed, grown)

    def __enter__(self) -> VramSampler:
        try:
            from studio.gpu.nvml import query_gpus

            self._baseline = sum(gpu.memory_used for gpu in query_gpus())
        except Exception:  # noqa: BLE001 - no GPU or no NVML: peak stays None
            return self
        self.peak = 0
        self._thread = threading.Thread(
            target=self._loop, args=(query_gpus,), name="vram-sampler", daemon=True
        )
        self._thread.start()
        return self

    def _loop(self, query_gpus) -> None:
        while not self._stop.wait(0.05):
            try:
                reading = self._reading(query_gpus)
            except Exception:  # noqa: BLE001 - a failed reading is skipped
                continue
            self.peak = max(self.peak or 0, reading)
            self.window_peak = max(self.window_peak or 0, reading)

    def new_window(self) -> None:
        if self.peak is not None:
            self.window_peak = 0

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
