"""Per-voice cache of the streaming flow's prompt state, so a second take with a voice skips its prompt frames.

In streaming mode the flow's state for the prompt's leading frames (encoder keys/values and conv context,
and per Euler step every estimator block's keys/values and causal-conv tails) is fixed by the prompt: its
tokens, its mel (`cond`), the speaker embedding, the noise buffer indexed by absolute frame, and the flow's
weights, since later frames never reach earlier ones. Only the frames before the last commit boundary that
lies at least `pre_lookahead_len` tokens inside the prompt qualify (`IncrementalFlow.prompt_boundary`): the
prompt's last partial chunk attends to target frames, and its last tokens look ahead into the target.

`PromptFlowCache` keeps such snapshots in an LRU bounded by bytes (full model: about 2.3 MB per mel frame
in float16, so 10 s of prompt costs about 1.1 GB; a quarter of that when takes keep attention inputs). A request restores a snapshot by reference; its buffers
are copied on the first write (`KVBuffer.shared`), so concurrent requests never write into cached tensors.
Entries assume the flow's weights stay as they were when computed: call `clear()` after changing them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from studio.recent import RecentlyUsedBytes
from studio.tts.device.cuda_graphs import autocast_dtype
from studio.tts.device.prompt_caches import CachePerDevice, contents_digest, module_number
from studio.tts.flow.streaming.batched_solve import EstimatorState
from studio.tts.flow.streaming.cached_encoder import KVBuffer
from studio.tts.flow.streaming.incremental import IncrementalFlow


@dataclass(frozen=True)
class PromptSnapshot:
    """An `IncrementalFlow`'s committed state after the prompt's reusable tokens (tensors never written)."""

    committed: tuple[int, ...]
    token_store: dict
    encoder_store: dict
    estimator: EstimatorState  # K/V rows [0, 2 * boundary) and the conv tails there
    nbytes: int


def _freeze(store: dict, rows: int) -> tuple[dict, int]:
    """Compact copies of a store's state at its mark: K/V rows [0, rows) and the tails kept at the mark.

    Pops the ``("mark", owner)`` tails from the live store; the tails at the request's own commit are not
    taken (they belong to a later position).
    """
    frozen, nbytes, tails = {}, 0, 0
    for key in list(store):
        value = store[key]
        if isinstance(value, KVBuffer):
            value = KVBuffer(value.k[:, :, :rows].clone(), value.v[:, :, :rows].clone())
            nbytes += value.k.nbytes + value.v.nbytes
        elif isinstance(key, tuple) and key[0] == "mark":
            key, value = key[1], store.pop(key)  # already a copy (`Window.causal`)
            nbytes, tails = nbytes + value.nbytes, tails + 1
        elif isinstance(key, tuple) and key[0] == "positions":
            value = value.clone()  # the relative-position table: depends on the weights only
            nbytes += value.nbytes
        else:
            continue
        frozen[key] = value
    owners = sum(1 for key in store if not isinstance(key, tuple) and not isinstance(store[key], KVBuffer))
    if tails != owners:
        raise RuntimeError(f"prompt cache: {tails} causal tails kept at the mark, {owners} expected")
    return frozen, nbytes


def _frozen_bytes(store: dict, rows: int) -> int:
    """What `_freeze(store, rows)` would keep, in bytes, without copying anything."""
    total = 0
    for key, value in store.items():
        if isinstance(value, KVBuffer):
            total += 2 * value.k[:, :, :rows].nbytes
        elif isinstance(key, tuple) and key[0] in ("mark", "positions"):
            total += value.nbytes
    return total


def _thaw(store: dict) -> dict:
    """A request's own store over the snapshot's tensors: K/V buffers copy on write, tails are only read."""
    return {
        key: KVBuffer(value.k, value.v, shared=True) if isinstance(value, KVBuffer) else value
        for key, value in store.items()
    }


def _freeze_estimator(state: EstimatorState, rows: int) -> EstimatorState:
    """The estimator state at its mark: K/V rows [0, rows) and the tails kept at the mark (taken from it)."""
    if state.mark_tails is None or max(state.length, state.written) < rows:
        raise RuntimeError("prompt cache: the estimator state was not kept at the prompt boundary")
    kv = state.prefix(rows) if rows else None
    frozen = EstimatorState(
        length=rows, written=rows, tails=state.mark_tails, base=kv, base_length=rows, inputs=state.inputs
    )
    state.mark_tails = None
    return frozen


def _frozen_estimator_bytes(state: EstimatorState, rows: int) -> int:
    """What `_freeze_estimator(state, rows)` would keep, in bytes, without copying anything."""
    source = state.pages[0] if state.pages else state.base
    kv = 0 if source is None else source[:, :, :, :, :, :1].nbytes * rows
    return kv + (0 if state.mark_tails is None else state.mark_tails.nbytes)


def snapshot(flow: IncrementalFlow, boundary: int) -> PromptSnapshot:
    """Freeze `flow`'s state after `boundary` tokens: its last call ran with ``mark == boundary``."""
    ratio = flow.flow.token_mel_ratio
    token_store, a = _freeze(flow.token_store, boundary)
    encoder_store, b = _freeze(flow.encoder_store, boundary * ratio)
    estimator = _freeze_estimator(flow.estimator_state, boundary * ratio)
    committed = tuple(flow.prompt_ids[:boundary])
    held = estimator.nbytes + (0 if estimator.base is None else estimator.base.nbytes)
    return PromptSnapshot(committed, token_store, encoder_store, estimator, a + b + held)


def restore(flow: IncrementalFlow, snap: PromptSnapshot) -> None:
    """Make `flow` continue from `snap` as if it had computed the prompt's frames itself."""
    flow.committed = list(snap.committed)
    flow.token_store = _thaw(snap.token_store)
    flow.encoder_store = _thaw(snap.encoder_store)
    cached = snap.estimator  # its rows are shared, read in place by every take of the voice
    flow.estimator_state = EstimatorState(
        length=cached.length,
        written=cached.length,
        tails=cached.tails,
        base=cached.base,
        base_length=cached.length,
        fp8=flow.state_fp8,
        inputs=cached.inputs,
    )
    flow.valid = True
    flow.restored = snap


def prompt_key(flow: IncrementalFlow, n_timesteps: int) -> tuple:
    """What the prompt state depends on: flow module, device, compute dtype, steps, and the prompt itself."""
    module = flow.flow
    device = module.input_embedding.weight.device
    dtype = module.spk_embed_affine_layer.weight.dtype
    compute = (str(dtype), str(autocast_dtype(device.type)))
    ids = torch.tensor(flow.prompt_ids, dtype=torch.int64)
    prompt = contents_digest(ids, flow.prompt_feat, flow.embedding)
    # a request that recomputes its encoder keeps no encoder state: its snapshots hold the estimator's only
    kept = (flow.recompute_encoder, flow.state_inputs)  # which states its snapshots hold
    return (module_number(module), str(device), compute, n_timesteps, prompt, *kept)


class PromptFlowCache(RecentlyUsedBytes[PromptSnapshot]):
    """Thread-safe LRU of `PromptSnapshot`s bounded by `max_bytes`; counts hits, misses and evictions."""

    def start(self, flow: IncrementalFlow, n_timesteps: int) -> tuple | None:
        """Before `flow`'s first call: restore its prompt's snapshot on a hit (returns None); on a miss return
        the key to `store` the state under once the call has run with ``mark = prompt_boundary()``.

        Prompts shorter than one chunk plus the lookahead have nothing reusable (None).
        """
        if flow.prompt_boundary() == 0 or flow.committed:
            return None
        key = prompt_key(flow, n_timesteps)
        snap = self.get(key)
        if snap is None:
            return key
        restore(flow, snap)
        if flow.pin_prompt and self.pin(key):
            flow.pinned = (self, key)
        return None

    @torch.inference_mode()
    def store(self, key: tuple, flow: IncrementalFlow) -> bool:
        """Snapshot the prompt state `flow` kept at its mark during the call just made, and `put` it."""
        if not flow.valid or not flow.kept_mark():
            return False  # the call failed or never reached the mark: nothing consistent to keep
        boundary = flow.prompt_boundary()
        rows = boundary * flow.flow.token_mel_ratio
        stores = [(flow.token_store, boundary), (flow.encoder_store, rows)]
        estimator = flow.estimator_state
        needed = sum(_frozen_bytes(store, rows) for store, rows in stores)
        if needed + _frozen_estimator_bytes(estimator, rows) > self.max_bytes:
            for store, _ in stores:  # too big to keep: don't copy it, and drop the request's marked tails
                for mark in [k for k in store if isinstance(k, tuple) and k[0] == "mark"]:
                    del store[mark]
            estimator.mark_tails = None
            with self._lock:
                self.rejected += 1
            return False
        snap = snapshot(flow, boundary)
        if not self.put(key, snap):
            return False
        flow.restored = snap  # a request that keeps no estimator state starts each call from it
        return True

    def warm(self, flow: IncrementalFlow, n_timesteps: int = 10) -> bool:
        """Compute and store a prompt's state ahead of its first take (e.g. when a voice is saved)."""
        key = self.start(flow, n_timesteps)
        if key is None:
            return False
        flow.mark = flow.prompt_boundary()
        flow.mel(
            [], finalize=False, n_timesteps=n_timesteps
        )  # the prompt alone (its last 3 tokens look ahead)
        return self.store(key, flow)


_defaults: CachePerDevice[PromptFlowCache] = CachePerDevice(PromptFlowCache)


def default_cache(device: torch.device | str) -> PromptFlowCache | None:
    """The process-wide cache for a device type (sized once, on first use); None when the budget is 0."""
    return _defaults.get(device)
