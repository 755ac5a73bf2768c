"""Cost per push of CosyVoice3's streaming vocoder against upstream's re-run, over one long take.

HiFT at cosyvoice3.yaml's sizes (512 channels) with random weights that reach every path (as the parity
tests make them) vocodes a take of --seconds of random mel pushed --chunk frames at a time (50: one 25-token
hop). For every push it times `CausalHiftStream.push` (wall and process CPU time: the second is steadier on a
shared machine); for every --rerun-every-th push (and the last) it also times upstream's way, `inference` over
all mel so far, and checks that the samples returned so far equal that re-run's. It also measures F0 predicted in float32 against float64 (upstream's) over the take, and what a stream
whose F0 were float32 would return against its float32 re-run.

Usage: python benchmarks/probes/cv3_hift_stream_cost.py [--seconds 60] [--chunk 50] [--channels 512]
       [--threads 1] [--rerun-every 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from studio.tts.cosyvoice3.hift import CausalConvRNNF0Predictor, CausalHiFTGenerator
from studio.tts.cosyvoice3.hift_stream import CausalHiftStream

FRAMES_PER_SECOND = 50


def build(channels: int, mel: torch.Tensor) -> CausalHiFTGenerator:
    torch.manual_seed(0)
    hift = CausalHiFTGenerator(
        base_channels=channels, f0_predictor=CausalConvRNNF0Predictor(cond_channels=channels)
    ).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in hift.named_parameters():
            if name.endswith("alpha"):
                parameter.uniform_(0.5, 1.5, generator=generator)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.02, generator=generator)
        hift.conv_post.bias[: hift.n_fft // 2 + 1] += 2.0
        classifier = hift.f0_predictor.classifier
        classifier.bias.zero_()
        f0 = hift.predict_f0(mel[:, :, :200])
        classifier.weight.mul_(150.0 / f0.pow(2).mean().sqrt())  # F0 of speech, voiced in part
    hift.fuse_weight_norm()
    return hift


def stream_cost(hift: CausalHiFTGenerator, mel: torch.Tensor, chunk: int, rerun_every: int) -> dict:
    stream = CausalHiftStream(hift)
    frames = mel.shape[2]
    pushes = -(-frames // chunk)
    rows, pieces = [], []
    for index in range(pushes):
        finalize = index == pushes - 1
        end = min(frames, (index + 1) * chunk)
        started, cpu_started = time.perf_counter(), time.process_time()
        pieces.append(stream.push(mel[:, :, index * chunk : end], finalize))
        row = {
            "push": index + 1,
            "frames_so_far": end,
            "stream_ms": 1e3 * (time.perf_counter() - started),
            "stream_cpu_ms": 1e3 * (time.process_time() - cpu_started),
            "network_frames": stream.last_network_frames,
            "f0_frames": stream.last_f0_frames,
            "state_bytes": stream.state_bytes,
        }
        if index % rerun_every == 0 or finalize:
            started, cpu_started = time.perf_counter(), time.process_time()
            rerun, _ = hift.inference(mel[:, :, :end], finalize=finalize)
            row["rerun_ms"] = 1e3 * (time.perf_counter() - started)
            row["rerun_cpu_ms"] = 1e3 * (time.process_time() - cpu_started)
            streamed = torch.cat(pieces, dim=1)
            assert streamed.shape == rerun.shape, (streamed.shape, rerun.shape)
            row["max_abs_error"] = float((streamed - rerun).abs().max()) if rerun.numel() else 0.0
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"look_back": stream.look_back, "pushes": rows}


def f0_precision(hift: CausalHiFTGenerator, mel: torch.Tensor) -> dict:
    """F0 from a float32 copy of the predictor against upstream's float64 prediction."""
    f64 = hift.predict_f0(mel)
    f32 = hift.f0_predictor.float()(mel).abs()
    hift.f0_predictor.double()
    voiced = f64 > hift.m_source.voiced_threshold
    relative = (f32.double() - f64.double()).abs()[voiced] / f64.double()[voiced]
    return {
        "f0_max_abs_hz": float((f32 - f64).abs().max()),
        "f0_max_relative_voiced": float(relative.max()),
        "f0_frames_bitwise_equal": float((f32 == f64).float().mean()),
    }


def float32_f0_stream_error(hift: CausalHiFTGenerator, mel: torch.Tensor, chunk: int) -> float:
    """Stream and final re-run with F0 predicted in float32 (not what the code does): their difference."""
    predictor = hift.f0_predictor

    def predict_f0_float32(speech_feat: torch.Tensor, finalize: bool = True) -> torch.Tensor:
        return predictor.float()(speech_feat.float(), finalize)

    hift.predict_f0 = predict_f0_float32
    try:
        stream = CausalHiftStream(hift)
        frames = mel.shape[2]
        pieces = [
            stream.push(mel[:, :, start : start + chunk], start + chunk >= frames)
            for start in range(0, frames, chunk)
        ]
        rerun, _ = hift.inference(mel, finalize=True)
        return float((torch.cat(pieces, dim=1) - rerun).abs().max())
    finally:
        del hift.predict_f0
        predictor.double()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--chunk", type=int, default=50)
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rerun-every", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    frames = int(args.seconds * FRAMES_PER_SECOND)
    mel = torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(3))
    hift = build(args.channels, mel)
    with torch.inference_mode():
        cost = stream_cost(hift, mel, args.chunk, args.rerun_every)
        precision = f0_precision(hift, mel)
        precision["stream_error_if_f0_were_float32"] = float32_f0_stream_error(hift, mel, args.chunk)
    rows = cost["pushes"]
    steady = [row["stream_ms"] for row in rows[1:-1]]
    steady_cpu = [row["stream_cpu_ms"] for row in rows[1:-1]]
    summary = {
        "seconds": args.seconds,
        "chunk_frames": args.chunk,
        "channels": args.channels,
        "threads": args.threads,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "look_back_frames": cost["look_back"],
        "stream_ms_first_last_median": [
            rows[0]["stream_ms"],
            rows[-1]["stream_ms"],
            statistics.median(steady),
        ],
        "stream_ms_first_and_second_half_median": [
            statistics.median(steady[: len(steady) // 2]),
            statistics.median(steady[len(steady) // 2 :]),
        ],
        "stream_cpu_ms_first_and_second_half_median": [
            statistics.median(steady_cpu[: len(steady_cpu) // 2]),
            statistics.median(steady_cpu[len(steady_cpu) // 2 :]),
        ],
        "stream_total_s": sum(row["stream_ms"] for row in rows) / 1e3,
        "rerun_ms_by_push": {row["push"]: row["rerun_ms"] for row in rows if "rerun_ms" in row},
        "rerun_cpu_ms_by_push": {row["push"]: row["rerun_cpu_ms"] for row in rows if "rerun_ms" in row},
        "network_frames_by_push": sorted({row["network_frames"] for row in rows}),
        "max_abs_error": max(row.get("max_abs_error", 0.0) for row in rows),
        **precision,
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"summary": summary, "pushes": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
