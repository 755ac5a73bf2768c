"""Several CosyVoice3 takes' streamed flow calls run as one: `mel_many`.

On a GPU, 16 takes each running its own 10 Euler steps x 22 DiT blocks per chunk are bound by kernel
launches and leave the matrix products small. `mel_many` runs the new frames of several takes through
each Euler step and block together (flow_solve.py says how), with each take's result as its own
`DiTFlowStream.mel` gives it, up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from studio.tts.cosyvoice3.flow_stream import DiTFlowStream, render_calls


def mel_many(items: Sequence[tuple[DiTFlowStream, torch.Tensor, bool]]) -> list[torch.Tensor]:
    """items: (stream, tokens [1, N], finalize) of distinct streams of one flow module and Euler step
    count -> each stream's `mel(tokens, finalize)` [1, 80, F] float32, computed together.

    Every call is checked before any runs: a bad one raises (ValueError, RuntimeError for a closed
    stream) and none runs."""
    if not items:
        return []
    streams = [stream for stream, _, _ in items]
    if len({id(stream) for stream in streams}) != len(streams):
        raise ValueError("mel_many takes one call per stream; a stream appears twice")
    first = streams[0]
    for stream in streams[1:]:
        if stream.flow is not first.flow or stream.n_timesteps != first.n_timesteps:
            raise ValueError(
                "mel_many runs takes of one flow and one Euler schedule together; got "
                f"{first.n_timesteps} and {stream.n_timesteps} steps"
                + ("" if stream.flow is first.flow else " of different flows")
            )
    calls = [stream.check(tokens, finalize) for stream, tokens, finalize in items]
    return render_calls(calls)
