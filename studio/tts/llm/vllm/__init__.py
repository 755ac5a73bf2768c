"""The LM on vLLM: model class, plugin registration, weight export, RAS logits processor, token backend.

The only place in the runtime that imports vllm."""
