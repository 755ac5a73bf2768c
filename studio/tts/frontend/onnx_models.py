"""The two ONNX models of a model folder, run by onnxruntime on the CPU.

`SpeakerEmbedder` (campplus.onnx): input `input` float32 [B, T, 80] mean-normalised Kaldi fbank -> [B, 192].
`SpeechTokenizer` (CosyVoice2's speech_tokenizer_v2.onnx, CosyVoice3's speech_tokenizer_v3.onnx): a Whisper
log-mel float32 [1, 128, T] and its length int32 [1] -> speech tokens [1, ceil(T / 4)] (25 Hz). Both
versions take the same inputs; as upstream, they are fed by position (v2 names them `feats` and
`feats_length`, its output `indices`). A missing, broken or mismatched file raises `OnnxModelError` naming
the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from studio.tts.frontend.features import kaldi_fbank, whisper_log_mel

SPEAKER_EMBEDDING_DIM = 192


class OnnxModelError(ValueError):
    """An ONNX file that is missing, unreadable, or does not have the official inputs and outputs."""


def _session(path: Path, threads: int | None):
    """A CPU session. The studio installs onnxruntime's CPU wheel (its GPU wheel would replace it, not sit
    beside it), and these models run once per new prompt voice (features are cached by content): tens of ms."""
    import onnxruntime

    if not path.is_file():
        raise OnnxModelError(f"{path}: file not found")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    providers = ["CPUExecutionProvider"]
    try:
        return onnxruntime.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as error:  # onnxruntime raises its own exception types for bad protobufs and graphs
        raise OnnxModelError(f"{path}: not a loadable ONNX model ({error})") from error


def _check_io(path: Path, session, inputs: dict[str, int], output: str, what: str) -> None:
    found = {i.name: i for i in session.get_inputs()}
    for name, rank in inputs.items():
        if name not in found or len(found[name].shape) != rank:
            described = {n: list(i.shape) for n, i in found.items()}
            raise OnnxModelError(
                f"{path}: expected a {what} with input '{name}' of rank {rank}, found {described}"
            )
    outputs = [o.name for o in session.get_outputs()]
    if output not in outputs:
        raise OnnxModelError(f"{path}: expected a {what} with output '{output}', found {outputs}")


class SpeakerEmbedder:
    """campplus speaker embedding of 16 kHz audio (upstream's `_extract_spk_embedding`)."""

    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        self.path = Path(path)
        self._session = _session(self.path, threads)
        _check_io(
            self.path,
            self._session,
            {"input": 3},
            self._session.get_outputs()[0].name,
            "campplus speaker model",
        )

    def run(self, fbank: torch.Tensor) -> torch.Tensor:
        """Mean-normalised fbank [T, 80] -> embedding [1, 192] float32 (CPU)."""
        feats = fbank.detach().float().cpu().numpy()[None]
        embedding = self._session.run(None, {"input": feats})[0]
        embedding = torch.from_numpy(np.asarray(embedding, dtype=np.float32)).reshape(1, -1)
        if embedding.shape[1] != SPEAKER_EMBEDDING_DIM:
            raise OnnxModelError(f"{self.path}: produced a {embedding.shape[1]}-d embedding, expected 192")
        return embedding

    def embed(self, wav16k: torch.Tensor) -> torch.Tensor:
        """16 kHz waveform -> speaker embedding [1, 192]."""
        fbank = kaldi_fbank(wav16k)
        return self.run(fbank - fbank.mean(dim=0, keepdim=True))


class SpeechTokenizer:
    """The speech tokenizer: 25 Hz speech tokens of 16 kHz audio (upstream's `_extract_speech_token`)."""

    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        self.path = Path(path)
        self._session = _session(self.path, threads)
        inputs = self._session.get_inputs()
        if len(inputs) != 2 or len(inputs[0].shape) != 3 or len(inputs[1].shape) != 1:
            described = {i.name: list(i.shape) for i in inputs}
            raise OnnxModelError(
                f"{self.path}: expected a speech tokenizer with two inputs, the log-mel 'feats' of rank 3 "
                f"and its length 'feats_length' of rank 1, found {described}"
            )
        self._feats, self._feats_length = inputs[0].name, inputs[1].name
        self._output = self._session.get_outputs()[0].name

    def run(self, log_mel: torch.Tensor) -> torch.Tensor:
        """Whisper log-mel [128, T] -> speech tokens [1, N] int32 (CPU)."""
        if log_mel.dim() != 2 or log_mel.shape[0] != 128:
            raise ValueError(f"SpeechTokenizer expects a [128, T] log-mel, got {tuple(log_mel.shape)}")
        feats = log_mel.detach().float().cpu().numpy()[None]
        length = np.array([feats.shape[2]], dtype=np.int32)
        indices = self._session.run([self._output], {self._feats: feats, self._feats_length: length})[0]
        return torch.from_numpy(np.asarray(indices).astype(np.int32).reshape(1, -1))

    def tokenize(self, wav16k: torch.Tensor) -> torch.Tensor:
        """16 kHz waveform -> speech tokens [1, N] int32."""
        return self.run(whisper_log_mel(wav16k))
