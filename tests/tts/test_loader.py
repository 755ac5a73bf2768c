"""Loading a model folder: strict weights, clear errors naming the bad file, read-only folders."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import torch

from studio.tts.errors import MissingModelFileError, ModelFolderError
from studio.tts.loader import load_model_folder


def _linked_copy(source: Path, target: Path) -> Path:
    """A copy whose files are hard links (cheap); tests replace files rather than edit them in place."""
    shutil.copytree(source, target, copy_function=os.link)
    return target


def _replace(path: Path, data: bytes) -> None:
    path.unlink()  # break the hard link before writing
    path.write_bytes(data)


def test_tiny_folder_loads_strictly_in_float32(tiny_model_dir):
    loaded = load_model_folder(tiny_model_dir, device="cpu")
    for module in (loaded.llm, loaded.flow, loaded.hift):
        assert not module.training
        assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in module.parameters())
    assert loaded.config.sample_rate == 24000 and loaded.spk2info == {}
    assert loaded.fp16 is False
    assert loaded.llm.llm_decoder.out_features == 6561 + 3


def test_missing_files_are_named(tiny_model_dir, tmp_path):
    folder = _linked_copy(tiny_model_dir, tmp_path / "m")
    (folder / "flow.pt").unlink()
    (folder / "campplus.onnx").unlink()
    with pytest.raises(MissingModelFileError, match="flow.pt: missing") as info:
        load_model_folder(folder, device="cpu")
    assert "campplus.onnx" in str(info.value) and isinstance(info.value, FileNotFoundError)
    with pytest.raises(MissingModelFileError, match="model folder not found"):
        load_model_folder(tmp_path / "nowhere", device="cpu")


@pytest.mark.parametrize("name", ["llm.pt", "flow.pt", "hift.pt"])
def test_truncated_weights_are_named(tiny_model_dir, tmp_path, name):
    folder = _linked_copy(tiny_model_dir, tmp_path / "m")
    data = (tiny_model_dir / name).read_bytes()
    _replace(folder / name, data[: len(data) // 2])
    with pytest.raises(ModelFolderError, match=name.replace(".", r"\.") + ": cannot be read .*truncated"):
        load_model_folder(folder, device="cpu")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("CosyVoice-BlankEN/config.json", r"config\.json: is not a valid Qwen2 config\.json"),
        ("CosyVoice-BlankEN/vocab.json", r"vocab\.json: is not valid JSON"),
        ("CosyVoice-BlankEN/tokenizer_config.json", r"tokenizer_config\.json: is not valid JSON"),
        ("CosyVoice-BlankEN/merges.txt", r"CosyVoice-BlankEN: cannot be loaded as the Qwen2 tokenizer"),
        ("spk2info.pt", r"spk2info\.pt: cannot be read as saved voices .*truncated"),
    ],
)
def test_corrupt_backbone_config_tokenizer_and_voices_are_named(tiny_model_dir, tmp_path, name, message):
    folder = _linked_copy(tiny_model_dir, tmp_path / "m")
    if (folder / name).exists():
        (folder / name).unlink()
    (folder / name).write_bytes(b'{"truncated')
    with pytest.raises(ModelFolderError, match=message) as info:
        load_model_folder(folder, device="cpu")
    assert "weights_only" not in str(info.value)  # torch's advice to load unsafely never reaches the user


def test_mismatched_weights_list_keys_and_shapes(tiny_model_dir, tmp_path):
    folder = _linked_copy(tiny_model_dir, tmp_path / "m")
    state = torch.load(tiny_model_dir / "flow.pt", weights_only=True)
    state["encoder_proj.weight"] = torch.zeros(80, 256)
    del state["spk_embed_affine_layer.bias"]
    state["extra.weight"] = torch.zeros(1)
    (folder / "flow.pt").unlink()
    torch.save(state, folder / "flow.pt")
    with pytest.raises(ModelFolderError) as info:
        load_model_folder(folder, device="cpu")
    message = str(info.value)
    assert "flow.pt" in message and "spk_embed_affine_layer.bias" in message and "extra.weight" in message
    assert "encoder_proj.weight (80, 256) (expected (80, 512))" in message


def test_hift_from_other_dimensions_is_named(tiny_model_dir, tmp_path):
    folder = _linked_copy(tiny_model_dir, tmp_path / "m")
    state = torch.load(tiny_model_dir / "hift.pt", weights_only=True)
    state = {f"generator.{k}": v for k, v in state.items()}  # upstream's HiFiGan prefix is accepted...
    del state[next(iter(state))]  # ...but a missing key is not
    (folder / "hift.pt").unlink()
    torch.save(state, folder / "hift.pt")
    with pytest.raises(ModelFolderError, match=r"hift\.pt: does not match cosyvoice2.yaml"):
        load_model_folder(folder, device="cpu")


def test_yaml_that_disagrees_with_the_weights_is_reported(tiny_model_dir, tmp_path):
    folder = _linked_copy(tiny_model_dir, tmp_path / "m")
    yaml_text = (tiny_model_dir / "cosyvoice2.yaml").read_text()
    _replace(folder / "cosyvoice2.yaml", yaml_text.replace("num_blocks: 1", "num_blocks: 2").encode())
    with pytest.raises(
        ModelFolderError, match=r"flow\.pt: does not match .*missing key\(s\): encoder\.encoders\.1"
    ):
        load_model_folder(folder, device="cpu")


@pytest.mark.parametrize("name", ["campplus.onnx", "speech_tokenizer_v2.onnx"])
def test_corrupt_onnx_is_named(tiny_model_dir, tmp_path, name):
    folder = _linked_copy(tiny_model_dir, tmp_path / "m")
    _replace(folder / name, b"not an onnx model")
    with pytest.raises(ModelFolderError, match=name.replace(".", r"\.")):
        load_model_folder(folder, device="cpu")


def test_read_only_folder_synthesises_and_saves_voices_elsewhere(
    tiny_model_dir, tmp_path, monkeypatch, prompt_wav16k
):
    from studio.tts.cosyvoice2 import CosyVoice2, SynthesisSpec, voices_dir
    from studio.tts.loader import load_spk2info

    monkeypatch.setenv("STUDIO_DATA_DIR", str(tmp_path / "data"))
    folder = tmp_path / "readonly"
    shutil.copytree(tiny_model_dir, folder)  # real copies: chmod on hard links would change the cache
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    for path in [*folder.rglob("*"), folder]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        model = CosyVoice2(folder)
        out = list(
            model.synthesize(
                SynthesisSpec(
                    text="Hi.", mode="cross_lingual", prompt_wav=prompt_wav16k, seed=1, exact_speech_tokens=10
                )
            )
        )
        assert out[0]["tts_speech"].shape == (1, 10 * 960)
        model.add_zero_shot_spk("A prompt.", prompt_wav16k, "voice")
        saved = model.save_spkinfo()
        assert saved.is_file() and (tmp_path / "data") in saved.parents
        assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before  # nothing written in the folder
        assert "voice" in load_spk2info(voices_dir(folder) / "spk2info.pt")  # where a new instance looks
    finally:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_vllm_starts_on_a_weightless_skeleton_while_the_weights_load(tiny_model_dir):
    import threading

    from studio.tts.loader import LOAD_THREAD, load_model_folder_beside

    seen = {}

    def beside(skeleton, device):
        seen["skeleton"], seen["device"] = skeleton, device
        seen["loading"] = [t.name for t in threading.enumerate() if t.name == LOAD_THREAD]
        return "backend"

    parts, result = load_model_folder_beside(tiny_model_dir, device="cpu", beside=beside)
    skeleton = seen["skeleton"]
    assert result == "backend" and seen["device"] == torch.device("cpu") and seen["loading"] == [LOAD_THREAD]
    assert all(p.is_meta for p in skeleton.parameters()) and skeleton is not parts.llm
    assert skeleton.llm.model.config.to_dict() == parts.llm.llm.model.config.to_dict()
    assert list(skeleton.stop_token_ids) == list(parts.llm.stop_token_ids)
    assert not any(p.is_meta for p in parts.llm.parameters())
    assert parts.flow is not None and parts.hift is not None and parts.frontend is not None


def test_a_failure_beside_the_loading_waits_for_it_and_is_raised(tiny_model_dir):
    import threading

    from studio.tts.loader import LOAD_THREAD, load_model_folder_beside

    def beside(_skeleton, _device):
        raise RuntimeError("vLLM failed to start")

    for forks in (False, True):  # a start that fails before it forks must not leave the weights waiting
        with pytest.raises(RuntimeError, match="vLLM failed"):
            load_model_folder_beside(tiny_model_dir, device="cpu", beside=beside, beside_forks=forks)
        assert not [t for t in threading.enumerate() if t.name == LOAD_THREAD]


def _record_loads(monkeypatch) -> list[float]:
    import time

    from studio.tts.loader import beside as loader

    calls: list[float] = []
    real = loader.load_llm

    def recording(*args, **kwargs):
        calls.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(loader, "load_llm", recording)
    return calls


def test_when_vllm_forks_the_weights_load_only_after_the_fork(tiny_model_dir, monkeypatch):
    import multiprocessing
    import time

    from studio.tts.loader import load_model_folder_beside

    calls = _record_loads(monkeypatch)
    seen = {}

    def beside(_skeleton, _device):  # vLLM's start: the engine core is forked from this thread
        time.sleep(0.5)
        seen["loads_before_fork"] = list(calls)
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0,))
        seen["fork"] = time.monotonic()
        child.start()
        child.join()
        time.sleep(0.5)
        return "backend"

    parts, _ = load_model_folder_beside(tiny_model_dir, device="cpu", beside=beside, beside_forks=True)
    assert seen["loads_before_fork"] == [] and len(calls) == 1 and calls[0] > seen["fork"]
    assert parts.flow is not None


def test_a_fork_of_another_thread_does_not_let_the_weights_start(tiny_model_dir, monkeypatch):
    import os
    import threading
    import time

    from studio.tts.loader import load_model_folder_beside

    calls = _record_loads(monkeypatch)
    seen = {}

    def fork_elsewhere() -> None:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    def beside(_skeleton, _device):  # vLLM never forks from here (say it spawned): weights load after it
        other = threading.Thread(target=fork_elsewhere)
        other.start()
        other.join()
        time.sleep(0.3)
        seen["end"] = time.monotonic()
        seen["loads"] = list(calls)
        return "backend"

    load_model_folder_beside(tiny_model_dir, device="cpu", beside=beside, beside_forks=True)
    assert seen["loads"] == [] and len(calls) == 1 and calls[0] >= seen["end"]


def test_without_its_backbone_the_lm_keeps_its_embeddings_and_head(tiny_model_dir):
    from studio.tts.loader import load_llm, read_folder_config

    config = read_folder_config(tiny_model_dir)
    full = load_llm(tiny_model_dir, config, torch.device("cpu"))
    lean = load_llm(tiny_model_dir, config, torch.device("cpu"), backbone=False)
    assert len(lean.llm.model.model.layers) == 0 and len(full.llm.model.model.layers) > 0
    kept = lean.state_dict()
    assert kept and all(torch.equal(tensor, full.state_dict()[name]) for name, tensor in kept.items())
    text, speech = [1, 2, 3], [4, 5]
    assert torch.equal(
        lean.build_prompt_embeds(text, [7], speech), full.build_prompt_embeds(text, [7], speech)
    )
