"""Our CosyVoice2 runtime (PyTorch, vLLM). Never imports Qt."""
