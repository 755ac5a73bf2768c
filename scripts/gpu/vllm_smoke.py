"""Quick vLLM-path check on any machine: greedy tokens equal the PyTorch path's (float32), RAS seeds repeat.

Usage: python scripts/gpu/vllm_smoke.py   (tiny random LM; prints one line per check; exits 1 on a failure)
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "vllm"))


def main() -> int:
    import torch
    from random_lm import TINY_QWEN2, build_lm, write_llm_pt

    from studio.tts.llm.sampling import RasSampling
    from studio.tts.llm.torch_backend import TorchTokenBackend
    from studio.tts.llm.vllm.backend import create_vllm_backend

    device = "cuda" if torch.cuda.is_available() else "cpu"
    lm = build_lm(TINY_QWEN2, device=device)
    work = Path(tempfile.mkdtemp(prefix="vllm-smoke-"))
    write_llm_pt(lm, work)
    backend = create_vllm_backend(
        lm,
        work,
        dtype="float32",
        max_model_len=1024,
        max_num_seqs=8,
        max_num_batched_tokens=1024,
        gpu_memory_utilization=0.1,
    )
    prompt = lm.build_prompt_embeds([5, 6, 7, 8, 9], [1, 2], [10, 20, 30])[0].detach()
    cancel = threading.Event()
    kw = dict(min_len=5, max_len=60, seed=3, cancel=cancel)
    greedy = list(backend.generate(prompt, sampling=RasSampling(top_k=1), **kw))
    reference = list(TorchTokenBackend(lm).generate(prompt, sampling=RasSampling(top_k=1), **kw))
    ras = [list(backend.generate(prompt, sampling=RasSampling(), **kw)) for _ in range(2)]
    backend.close()
    checks = {
        "greedy equals PyTorch": greedy == reference,
        "RAS repeats with a seed": ras[0] == ras[1],
        "tokens produced": len(greedy) >= 5,
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'} {name}")
    if not checks["greedy equals PyTorch"]:
        print("vllm ", greedy, "\ntorch", reference)
        print(
            f"first difference at token {first_difference(greedy, reference)}; PyTorch's top-2 log-prob gap "
            f"there: {top2_gap(lm, prompt, reference, first_difference(greedy, reference)):.2e}"
        )
    return 0 if all(checks.values()) else 1


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def top2_gap(lm, prompt, tokens: list[int], step: int) -> float:
    """How close to a tie the PyTorch path's choice was at `step` (a near-tie flips on kernel rounding)."""
    import torch

    from studio.tts.llm.torch_backend import TorchDecodeSession

    session = TorchDecodeSession(lm, prompt)
    for token in tokens[:step]:
        session.logp()
        session.feed(token)
    top = torch.topk(session.logp(), 2).values
    return float(top[0] - top[1])


if __name__ == "__main__":
    sys.exit(main())
