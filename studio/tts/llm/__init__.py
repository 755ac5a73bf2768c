"""The speech-token language model: Qwen2LM, its token backends (PyTorch here, vLLM in `vllm/`), RAS sampling."""
