"""Temporary GPU check (H2): TorchTokenBackend in fp32/fp16/bf16 on CUDA, features on CUDA. Not a test."""

import threading
import time

import torch
from transformers import Qwen2Config

from studio.tts.features import flow_mel, kaldi_fbank
from studio.tts.llm import Qwen2Encoder, Qwen2LM, TorchTokenBackend
from studio.tts.sampling import RasSampling

print(torch.__version__, __import__("transformers").__version__, torch.cuda.get_device_name())


def build(full: bool):
    torch.manual_seed(0)
    if full:
        cfg = Qwen2Config(hidden_size=896, num_attention_heads=14, num_key_value_heads=2, num_hidden_layers=24,
                          intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
                          rope_theta=1000000.0, tie_word_embeddings=True, rms_norm_eps=1e-6)
        hidden = 896
    else:
        cfg = Qwen2Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                          intermediate_size=256, vocab_size=600)
        hidden = 128
    with torch.device("cuda"):
        lm = Qwen2LM(hidden, hidden, 6561, Qwen2Encoder(config=cfg), RasSampling()).eval()
    return lm


def run(lm, dtype, n, seed=1, sampling=RasSampling()):
    lm = lm.to(dtype)
    embeds = lm.build_prompt_embeds(list(range(1, 40)), [3, 4, 5], list(range(100, 250)))[0]
    backend = TorchTokenBackend(lm)
    torch.cuda.synchronize()
    t = time.perf_counter()
    toks = list(backend.generate(embeds, min_len=0, max_len=n, sampling=sampling, seed=seed,
                                 cancel=threading.Event(), ignore_stop=True))
    torch.cuda.synchronize()
    return toks, (time.perf_counter() - t) / n


tiny = build(False)
g32, _ = run(tiny, torch.float32, 30, sampling=RasSampling(top_k=1))
for dtype in (torch.float16, torch.bfloat16):
    a, _ = run(tiny, dtype, 30)
    b, _ = run(tiny, dtype, 30)
    g, _ = run(tiny, dtype, 30, sampling=RasSampling(top_k=1))
    agree = sum(x == y for x, y in zip(g, g32)) / len(g)
    print(dtype, "seeded repeat equal:", a == b, "greedy agreement with fp32:", agree, "len", len(a))
tiny = tiny.float()

full = build(True)
for dtype in (torch.bfloat16, torch.float16):
    run(full, dtype, 10)
    toks, per = run(full, dtype, 200)
    print("full-size", dtype, f"{per * 1000:.2f} ms/token over 200 tokens, all < 6561:", max(toks) < 6561)

wav = torch.randn(16000 * 3) * 0.1
cpu, gpu = kaldi_fbank(wav), kaldi_fbank(wav.cuda())
print("fbank cuda rel err", float((gpu.cpu() - cpu).norm() / cpu.norm()))
wav24 = torch.randn(24000 * 3) * 0.1
try:
    cpu, gpu = flow_mel(wav24), flow_mel(wav24.cuda())
    print("flow_mel cuda rel err", float((gpu.cpu() - cpu).norm() / cpu.norm()))
except ImportError as e:
    print("no librosa", e)
