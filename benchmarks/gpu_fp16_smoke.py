"""GPU smoke check of the runtime's model path in float32 and fp16 (no frontend: torch + transformers only).

Loads a model folder's LM, flow and HiFT with the studio loader, decodes a fixed number of speech tokens
on the PyTorch backend and renders them streamed and offline; prints timings and sanity checks.

    python benchmarks/gpu_fp16_smoke.py MODEL_DIR [--tokens 100]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--tokens", type=int, default=100)
    args = parser.parse_args()

    from studio.model_layout import BLANKEN_DIR, YAML_FILE
    from studio.tts.config import read_config
    from studio.tts.llm.torch_backend import TorchTokenBackend
    from studio.tts.loader import load_flow, load_hift, load_llm
    from studio.tts.token2wav import Token2WavStream

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    config = read_config(
        args.model_dir / YAML_FILE, {"qwen_pretrain_path": str(args.model_dir / BLANKEN_DIR)}
    )
    llm = load_llm(args.model_dir, config, device)
    flow = load_flow(args.model_dir, config, device)
    hift = load_hift(args.model_dir, config, device)
    generator = torch.Generator().manual_seed(0)
    prompt_token = torch.randint(0, 6561, (1, 50), generator=generator, dtype=torch.int32)
    prompt_feat = torch.randn(1, 100, 80, generator=generator) - 6
    embedding = torch.randn(1, 192, generator=generator)
    for fp16 in (False, True) if device.type == "cuda" else (False,):
        if fp16:
            llm.half()
            flow.half()
        backend = TorchTokenBackend(llm)
        with torch.inference_mode():
            embeds = llm.build_prompt_embeds([1, 2, 3, 4], [], prompt_token.reshape(-1))[0]
        started = time.perf_counter()
        tokens = list(
            backend.generate(
                embeds,
                min_len=args.tokens,
                max_len=args.tokens,
                sampling=llm.sampling,
                seed=0,
                cancel=threading.Event(),
                ignore_stop=True,
            )
        )
        llm_seconds = time.perf_counter() - started
        for streaming in (False, True):
            stream = Token2WavStream(
                flow,
                hift,
                prompt_token,
                prompt_feat,
                embedding,
                streaming=streaming,
                generator=torch.Generator(device=device).manual_seed(0),
                fp16=fp16,
            )
            started = time.perf_counter()
            pieces = []
            while stream.ready(len(tokens)):
                pieces.append(stream.chunk(tokens)[0])
            pieces.append(stream.finish(tokens)[0])
            if device.type == "cuda":
                torch.cuda.synchronize()
            speech = torch.cat(pieces, dim=1)
            seconds = time.perf_counter() - started
            print(
                f"fp16={fp16} streaming={streaming}: {len(tokens)} tokens, llm {llm_seconds:.2f} s, "
                f"token2wav {seconds:.2f} s in {len(pieces)} chunks, samples {speech.shape[1]} "
                f"(expected {len(tokens) * 960}), dtype {speech.dtype}, finite {bool(torch.isfinite(speech).all())}, "
                f"peak {speech.abs().max():.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
