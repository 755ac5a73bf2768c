"""The batched solve's causal convolutions as one GEMM over their windows, against cuDNN.

A first chunk ran 12,559 kernels on an H200 with cuDNN's convolutions: cuDNN ran each causal convolution in NHWC, with a
layout conversion of input, weight and output around it (939 kernels), and every LayerNorm after one copied its
transposed input. `batched_solve._conv` now gathers the windows in one copy and multiplies them in one GEMM, its
output laid out [rows, frames, channels]. This times one take's first chunk and 16 takes at once both ways on
the full-size fp16 model (the cuDNN way restored here for the comparison), counts the kernels, and gives the
distance between the two and to float32 weights.

Usage: python benchmarks/probes/conv_gemm_check.py --model /tmp/full [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from autocast_check import float32_take, measure
from flow_solver_check import relative, voice

from studio.model_layout import BLANKEN_DIR, YAML_FILE
from studio.tts.config import read_config
from studio.tts.flow.streaming import batched_solve
from studio.tts.loader import load_flow

GEMM = (batched_solve._conv, batched_solve._pointwise)


def cudnn_conv(layout, tails, io, conv, x):
    """The causal convolution through cuDNN (the runtime's way before the GEMM): F.conv1d over the tails and x."""
    c0, c1 = layout.conv[conv]
    full = torch.cat([tails[:, c0:c1, : layout.left].to(x.dtype), x], dim=2)
    out = F.conv1d(full, conv.weight, conv.bias)
    tails[:, c0:c1] = full.gather(2, io.tail_columns[:, None, :].expand(-1, c1 - c0, -1))
    return out


def use(mode: str) -> None:
    conv, pointwise = GEMM if mode == "gemm" else (cudnn_conv, lambda conv, x: conv(x))
    batched_solve._conv, batched_solve._pointwise = conv, pointwise


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--json")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of the script itself (float32)")
    args = parser.parse_args()
    device = torch.device(args.device)
    half = torch.float16 if device.type == "cuda" else torch.float32
    model = Path(args.model)
    config = read_config(model / YAML_FILE, {"qwen_pretrain_path": str(model / BLANKEN_DIR)})
    flow = load_flow(model, config, device).to(half)
    inputs = voice(1, device, half)
    gpu = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    report: dict = {"gpu": gpu, "torch": torch.__version__, "modes": {}}
    mels = {}
    for mode in ("cudnn", "gemm"):
        use(mode)
        graphs = device.type == "cuda"
        report["modes"][mode], mels[mode] = measure(flow, inputs, args.streams, "plain", graphs, untimed=2)
        print(mode, json.dumps(report["modes"][mode]), flush=True)
    use("gemm")
    reference = float32_take(model, config, device)
    report["relative_difference"] = {
        "gemm_vs_cudnn": relative(mels["gemm"], mels["cudnn"]),
        "cudnn_vs_float32": relative(mels["cudnn"], reference),
        "gemm_vs_float32": relative(mels["gemm"], reference),
    }
    print("relative difference of a whole take's mels:", json.dumps(report["relative_difference"]))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
