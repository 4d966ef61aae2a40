"""The KV store for a decoder's layout (inferd.generation.decoder): `SlotKV`, an in-place cache
of fixed slots (inferd.generation.slots), or `PaddedKV`, whose arrays grow each step
(inferd.generation.kvcache). Both are `KVStore`s (inferd.generation.kvstore)."""

from __future__ import annotations

from inferd.config.model import GenerationConfig
from inferd.generation.decoder import DecoderShape
from inferd.generation.kvcache import PaddedKV
from inferd.generation.kvstore import KVStore
from inferd.generation.slots import SlotKV
from inferd.runtime.memory import HostMemory
from inferd.runtime.protocol import DeviceMemory


def kv_store(
    shape: DecoderShape, config: GenerationConfig, memory: DeviceMemory | None = None
) -> KVStore:
    """The store for the decoder's layout; an in-place cache in `memory` (the host's when
    None). A concatenating cache is new arrays every step: it stays on the host."""
    if shape.inplace:
        capacity = min(config.context_length, config.max_kv_tokens)
        rows = max(1, min(config.max_running, config.max_kv_tokens // capacity))
        return SlotKV(shape, capacity, rows, memory or HostMemory())
    return PaddedKV(shape)
