"""Streaming speed-ups of the flow: incremental per-take state, the per-voice prompt cache, the batched solver."""
