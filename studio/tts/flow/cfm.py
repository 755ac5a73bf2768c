"""Conditional flow matching: integrates the estimator's velocity field from fixed noise to a mel.

Reproduces upstream `CausalConditionalCFM` at inference: Euler steps on a cosine time schedule with
classifier-free guidance, starting from a fixed noise buffer (seed 0) so synthesis is deterministic.
Unlike upstream, building it leaves the global random state untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

NOISE_FRAMES = 50 * 300  # upstream's fixed noise covers 300 s of 50 Hz mel frames
MEL_BINS = 80


def _param(params: Any, name: str, default: Any = None) -> Any:
    if isinstance(params, Mapping):
        return params.get(name, default)
    return getattr(params, name, default)


class CausalConditionalCFM(nn.Module):
    """Flow-matching sampler around an estimator (the yaml's `decoder`); keys live under `estimator.`."""

    def __init__(
        self,
        in_channels: int,
        cfm_params: Mapping[str, Any] | Any,
        n_spks: int = 1,
        spk_emb_dim: int = 64,
        estimator: nn.Module | None = None,
    ):
        super().__init__()
        if estimator is None:
            raise ValueError("CausalConditionalCFM needs an estimator module")
        self.n_feats = in_channels
        self.n_spks = n_spks
        self.spk_emb_dim = spk_emb_dim
        self.t_scheduler = _param(cfm_params, "t_scheduler", "cosine")
        self.inference_cfg_rate = float(_param(cfm_params, "inference_cfg_rate", 0.7))
        self.sigma_min = float(_param(cfm_params, "sigma_min", 1e-4))
        solver = _param(cfm_params, "solver", "euler")
        if solver != "euler":
            raise ValueError(f"CausalConditionalCFM: solver {solver!r} is not supported (only 'euler')")
        self.estimator = estimator
        noise = torch.randn([1, MEL_BINS, NOISE_FRAMES], generator=torch.Generator().manual_seed(0))
        self.register_buffer("rand_noise", noise, persistent=False)
        # A callable with the estimator's signature that replays it as CUDA graphs (flow/graphs.py); the
        # loader attaches it on CUDA. The model itself never imports a speed-up.
        self.graphs = None

    def time_span(self, n_timesteps: int, like: torch.Tensor) -> torch.Tensor:
        t_span = torch.linspace(0, 1, n_timesteps + 1, device=like.device, dtype=like.dtype)
        if self.t_scheduler == "cosine":
            t_span = 1 - torch.cos(t_span * 0.5 * torch.pi)
        return t_span

    @torch.inference_mode()
    def forward(
        self,
        mu: torch.Tensor,
        mask: torch.Tensor,
        n_timesteps: int,
        temperature: float = 1.0,
        spks: torch.Tensor | None = None,
        cond: torch.Tensor | None = None,
        streaming: bool = False,
    ) -> tuple[torch.Tensor, None]:
        """mu, cond [1, 80, T]; mask [1, 1, T]; spks [1, 80] -> (mel [1, 80, T] float32, None)."""
        frames = mu.size(2)
        if frames > NOISE_FRAMES:
            raise ValueError(
                f"flow input of {frames} mel frames is longer than the supported "
                f"{NOISE_FRAMES} ({NOISE_FRAMES // 50} s)"
            )
        z = self.rand_noise[:, :, :frames].to(device=mu.device, dtype=mu.dtype) * temperature
        return self.solve_euler(z, self.time_span(n_timesteps, mu), mu, mask, spks, cond, streaming), None

    def solve_euler(
        self,
        x: torch.Tensor,
        t_span: torch.Tensor,
        mu: torch.Tensor,
        mask: torch.Tensor,
        spks: torch.Tensor | None,
        cond: torch.Tensor | None,
        streaming: bool = False,
    ) -> torch.Tensor:
        """Fixed-step Euler with classifier-free guidance: conditional and unconditional rows in one batch."""
        batch, channels, frames = x.shape
        t, dt = t_span[0].unsqueeze(0), t_span[1] - t_span[0]
        mask_in = torch.cat([mask, mask], dim=0).to(x.dtype)
        mu_in = torch.cat([mu, torch.zeros_like(mu)], dim=0)
        spks_in = torch.zeros([2 * batch, channels], device=x.device, dtype=x.dtype)
        if spks is not None:
            spks_in[:batch] = spks
        cond_in = torch.zeros([2 * batch, channels, frames], device=x.device, dtype=x.dtype)
        if cond is not None:
            cond_in[:batch] = cond
        rate = self.inference_cfg_rate
        estimator = self.graphs if self.graphs is not None else self.estimator
        for step in range(1, len(t_span)):
            x_in = torch.cat([x, x], dim=0)
            t_in = t.expand(2 * batch)
            velocity = estimator(x_in, mask_in, mu_in, t_in, spks_in, cond_in, streaming=streaming)
            guided, unconditional = velocity[:batch], velocity[batch:]
            x = x + dt * ((1.0 + rate) * guided - rate * unconditional)
            t = t + dt
            if step < len(t_span) - 1:
                dt = t_span[step + 1] - t
        return x.float()
