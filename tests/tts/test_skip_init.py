"""Building the flow and HiFT without their random initialisation, the weights loaded over it."""

from __future__ import annotations

import threading

import torch

from studio.model_layout import FLOW_FILE, HIFT_FILE
from studio.tts.config import ModelConfig
from studio.tts.device.skip_init import no_random_init
from studio.tts.loader import (
    load_flow,
    load_hift,
    load_strict,
    read_folder_config,
    read_state_dict,
)


def _every_tensor(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters, buffers (persistent or not) and plain tensor attributes of every submodule."""
    found = {}
    for prefix, sub in module.named_modules():
        for name, value in vars(sub).items():
            if isinstance(value, torch.Tensor):
                found[f"{prefix}.{name}"] = value
        for name, value in list(sub.named_parameters(recurse=False)) + list(sub.named_buffers(recurse=False)):
            found[f"{prefix}.{name}"] = value
    return found


def _reference(config: ModelConfig, section: str, path, load) -> torch.nn.Module:
    module = config.build(section)  # the ordinary way: random init, then the weights copied over it
    load(module, read_state_dict(path))
    return module.eval()


def test_flow_and_hift_built_without_init_equal_the_ordinary_build(tiny_model_dir):
    from studio.tts.hift.model import load_hift_state_dict

    config = read_folder_config(tiny_model_dir)
    cpu = torch.device("cpu")
    pairs = [
        (load_flow(tiny_model_dir, config, cpu),
         _reference(config, "flow", tiny_model_dir / FLOW_FILE,
                    lambda m, s: load_strict(m, s, tiny_model_dir / FLOW_FILE))),
        (load_hift(tiny_model_dir, config, cpu),
         _reference(config, "hift", tiny_model_dir / HIFT_FILE, load_hift_state_dict)),
    ]  # fmt: skip
    for fast, ordinary in pairs:
        got, want = _every_tensor(fast), _every_tensor(ordinary)
        assert got.keys() == want.keys()
        for name, tensor in want.items():
            assert got[name].dtype == tensor.dtype, name
            assert torch.equal(got[name], tensor), name


def test_the_mode_skips_initialisers_and_fills_on_its_own_thread_only():
    other: dict[str, torch.Tensor] = {}
    inside, started = threading.Event(), threading.Event()

    def elsewhere():  # runs while the mode is active on the main thread
        inside.wait(10)
        other["init"] = torch.nn.init.ones_(torch.zeros(4))
        other["fill"] = torch.zeros(4).uniform_(1.0, 2.0)
        started.set()

    worker = threading.Thread(target=elsewhere)
    worker.start()
    with no_random_init():
        kept = torch.nn.init.kaiming_uniform_(torch.zeros(3, 3))
        filled = torch.zeros(8).normal_()
        layer = torch.nn.Linear(2, 2)
        noise = torch.randn(64, generator=torch.Generator().manual_seed(0))  # a factory: still drawn
        inside.set()
        assert started.wait(10)
    worker.join()
    assert torch.equal(kept, torch.zeros(3, 3)) and torch.equal(filled, torch.zeros(8))
    assert layer.weight.shape == (2, 2)
    assert torch.equal(noise, torch.randn(64, generator=torch.Generator().manual_seed(0)))
    assert torch.equal(other["init"], torch.ones(4))
    assert bool(((other["fill"] >= 1.0) & (other["fill"] < 2.0)).all())
    assert not torch.equal(torch.zeros(8).normal_(), torch.zeros(8))  # gone with the mode
