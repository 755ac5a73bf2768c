"""Build modules without their random initialisation, for weights that are loaded over it at once.

Constructing the flow (112 M parameters) spends most of its time drawing random numbers that the state dict
then replaces. ``no_random_init()`` is a torch function mode, active on the calling thread only, under which
the ``torch.nn.init`` functions and the tensors' in-place random fills return their tensor untouched: the
parameters keep whatever memory they were given, and everything else a constructor computes (positional
tables, fixed noise drawn by a factory such as ``torch.randn``) is computed as always. Use it only where a
strict `load_state_dict` follows, so that no parameter or persistent buffer keeps uninitialised memory.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_INIT_FUNCTIONS = frozenset(
    getattr(torch.nn.init, name)
    for name in (
        "uniform_",
        "normal_",
        "trunc_normal_",
        "constant_",
        "ones_",
        "zeros_",
        "eye_",
        "dirac_",
        "xavier_uniform_",
        "xavier_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "orthogonal_",
        "sparse_",
    )
)
_FILLS = frozenset(
    getattr(torch.Tensor, name)
    for name in ("uniform_", "normal_", "exponential_", "geometric_", "log_normal_", "cauchy_", "random_")
)


class no_random_init(TorchFunctionMode):  # noqa: N801 - used as a context manager, like torch.no_grad
    """Skip the initialisers and the in-place random fills of the tensors built on this thread."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _INIT_FUNCTIONS or func in _FILLS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))
