"""Shared test set-up: offscreen Qt, warnings from our package as errors, the tiny model cache."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
