"""Small seeded stand-ins for ``campplus.onnx`` and the speech tokenizer (``speech_tokenizer_v2.onnx`` or
``speech_tokenizer_v3.onnx``, which share one interface) with the official interfaces.

They are written as ONNX graphs directly (no exporter needed): the speaker model maps a mean-normalised
fbank ``input`` [B, T, 80] to an embedding [B, 192]; the tokenizer maps a Whisper log-mel ``feats``
[1, 128, T] and ``feats_length`` (int32 [1]) to ``indices`` [1, ceil(T/4)] with values in 0..6560.
Outputs depend on the audio, so different prompts give different tokens and embeddings.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

OPSET = 17
SPEECH_VOCAB = 6561
EMBEDDING_DIM = 192


def _initializer(name: str, array: np.ndarray):
    from onnx import numpy_helper

    return numpy_helper.from_array(array, name=name)


def _save(graph, path: Path) -> Path:
    import onnx
    from onnx import helper

    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cosyvoice-studio make-model"
    )
    model.ir_version = 8  # readable by every onnxruntime the studio supports
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


def write_campplus(path: Path, rng: np.random.Generator, hidden: int = 256) -> Path:
    """Speaker model: per-frame MLP, mean and std pooling over time, projection to 192 dims."""
    from onnx import TensorProto, helper

    w1 = (rng.standard_normal((80, hidden)) / np.sqrt(80)).astype(np.float32)
    b1 = np.zeros(hidden, np.float32)
    w2 = (rng.standard_normal((2 * hidden, EMBEDDING_DIM)) / np.sqrt(2 * hidden)).astype(np.float32)
    b2 = np.zeros(EMBEDDING_DIM, np.float32)
    nodes = [
        helper.make_node("MatMul", ["input", "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Tanh", ["h1"], ["h"]),
        helper.make_node("ReduceMean", ["h"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("Mul", ["h", "h"], ["h2"]),
        helper.make_node("ReduceMean", ["h2"], ["mean2"], axes=[1], keepdims=0),
        helper.make_node("Mul", ["mean", "mean"], ["mean_sq"]),
        helper.make_node("Sub", ["mean2", "mean_sq"], ["var"]),
        helper.make_node("Relu", ["var"], ["var_pos"]),
        helper.make_node("Sqrt", ["var_pos"], ["std"]),
        helper.make_node("Concat", ["mean", "std"], ["pooled"], axis=1),
        helper.make_node("MatMul", ["pooled", "w2"], ["e0"]),
        helper.make_node("Add", ["e0", "b2"], ["output"]),
    ]
    graph = helper.make_graph(
        nodes,
        "campplus",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["B", "T", 80])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["B", EMBEDDING_DIM])],
        [_initializer("w1", w1), _initializer("b1", b1), _initializer("w2", w2), _initializer("b2", b2)],
    )
    return _save(graph, path)


def write_speech_tokenizer(path: Path, rng: np.random.Generator) -> Path:
    """Speech tokenizer: 4-frame average pooling (ceil mode), projection to 6561 logits, argmax; the graph is
    named after the file (``speech_tokenizer_v2`` or ``speech_tokenizer_v3``)."""
    from onnx import TensorProto, helper

    weight = rng.standard_normal((128, SPEECH_VOCAB)).astype(np.float32)
    bias = np.zeros(SPEECH_VOCAB, np.float32)
    nodes = [
        helper.make_node("AveragePool", ["feats"], ["pooled"], kernel_shape=[4], strides=[4], ceil_mode=1),
        helper.make_node("Transpose", ["pooled"], ["frames"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["frames", "weight"], ["l0"]),
        helper.make_node("Add", ["l0", "bias"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["ids"], axis=2, keepdims=0),
        helper.make_node("Cast", ["ids"], ["indices"], to=TensorProto.INT32),
        # feats_length is part of the official interface; the stand-in reads the whole input
        helper.make_node("Identity", ["feats_length"], ["feats_length_unused"]),
    ]
    graph = helper.make_graph(
        nodes,
        path.stem,
        [
            helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, 128, "T"]),
            helper.make_tensor_value_info("feats_length", TensorProto.INT32, [1]),
        ],
        [helper.make_tensor_value_info("indices", TensorProto.INT32, [1, "T_tokens"])],
        [_initializer("weight", weight), _initializer("bias", bias)],
    )
    return _save(graph, path)
