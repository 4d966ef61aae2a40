"""The IO bindings of a session's in-place runs, kept for the next run on the same buffers.

A decoder runs every step on the same buffers (its KV cache, its drawn tokens): outputs are
written into inputs' own arrays, so a run is bound, not fed. Binding costs more than a step's
other bookkeeping, so the binding of those buffers is kept, keyed by their memory and shape,
and only the small inputs whose memory changed and the returned outputs are bound again.

Works on ONNX Runtime's `IOBinding` and `OrtValue` without importing onnxruntime: the session
(`onnx_session`) hands in a new binding and the function that wraps a host array.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from inferd.runtime.protocol import Array, Bound, DeviceArray

KEPT_BINDINGS = 64
"""In-place bindings kept per session: a decoder's steps at each batch size, its prefills."""


class IOBinding(Protocol):
    """What is used of ONNX Runtime's `IOBinding`."""

    def bind_input(self, *args: Any) -> None: ...
    def bind_output(self, *args: Any) -> None: ...
    def bind_cpu_input(self, name: str, array: Array, /) -> None: ...
    def bind_ortvalue_input(self, name: str, value: object, /) -> None: ...
    def bind_ortvalue_output(self, name: str, value: object, /) -> None: ...
    def get_outputs(self) -> Any: ...


@dataclass
class Kept:
    """A binding kept for its shared buffers (`KeptBindings.take`)."""

    binding: IOBinding
    arrays: list[Array | DeviceArray]
    """The shared buffers: alive while their binding is kept."""
    small: dict[str, tuple[Array | DeviceArray, tuple[object, ...]]]
    """Each other input as last bound, and where it lies (`_where`): alive while bound."""
    values: dict[str, object] = field(default_factory=dict)
    """The host buffers' OrtValues (views of their memory), alive while bound."""
    shared_bytes: int = 0
    """Bytes of the host buffers a run reads and writes in place."""
    host_bytes: int = 0
    """Bytes of host arrays a run of this binding reads and writes (the session's
    `host_bytes`)."""


class KeptBindings:
    """A session's kept bindings, most recent last, at most `KEPT_BINDINGS`. `host_value`
    wraps a host array as an OrtValue without copying it."""

    def __init__(self, host_value: Callable[[Array], object]) -> None:
        self._host_value = host_value
        self._bindings: dict[object, Kept] = {}
        """In-place runs' bindings, most recent last (`take`)."""
        self._recent: dict[object, tuple[tuple[Array | DeviceArray, ...], object]] = {}
        """Binding keys by the identity of the shared arrays they were read from, with those
        arrays, least recently used first (`_key`)."""

    @staticmethod
    def _binding_key(feeds: Bound, returned: list[str], into: Mapping[str, str]) -> object:
        shared = sorted(set(into.values()))
        return (
            tuple(into.items()),
            tuple(returned),
            tuple((n, *_where(feeds[n])) for n in shared),
        )

    def _key(
        self, feeds: Bound, shared: list[str], returned: list[str], into: Mapping[str, str]
    ) -> object:
        """`_binding_key`, without reading the shared arrays' memory again when they are the
        very arrays of an earlier call (a decoder's store hands the same views every step,
        and its decode steps and prefills take turns): reading an array's address costs more
        than a step's other bookkeeping. `shared`: the inputs written `into`, sorted."""
        arrays = tuple(feeds[n] for n in shared)
        known = (tuple(into.items()), tuple(returned), tuple(map(id, arrays)))
        recent = self._recent.pop(known, None)
        if recent is None:
            recent = (arrays, self._binding_key(feeds, returned, into))
            while len(self._recent) >= KEPT_BINDINGS:
                self._recent.pop(next(iter(self._recent)))
        self._recent[known] = recent  # (holding the arrays: no other array takes their ids)
        return recent[1]

    def take(
        self,
        feeds: Bound,
        returned: list[str],
        into: Mapping[str, str],
        new_binding: Callable[[], IOBinding],
    ) -> tuple[object, IOBinding, Kept]:
        """The binding of `feeds` for a run whose outputs in `into` (output -> input name) are
        written into that input's own array: the kept one for the same shared buffers (taken
        out while it runs: a concurrent run makes its own; `keep` it after), else a new one.
        An input bound before to the same memory, shape and type is not bound again: ONNX
        Runtime reads the bound memory at each run, so what was written there in place since
        is what it reads, and binding again costs more than the binding's own work (a decode
        block of 4 steps 20-60 us more here: benchmarks/generate_bench.py block)."""
        shared = sorted(set(into.values()))
        key = self._key(feeds, shared, returned, into)
        kept = self._bindings.pop(key, None)
        if kept is None:
            binding = new_binding()
            kept = Kept(binding, [feeds[n] for n in shared], {})
            for name in shared:
                array = feeds[name]
                if isinstance(array, DeviceArray):
                    _bind_address(binding, name, array, output=False)
                    continue
                value = self._host_value(array)  # no copy
                binding.bind_ortvalue_input(name, value)
                kept.values[name] = value
                kept.shared_bytes += 2 * array.nbytes  # (read and written by each run)
            for output, source in into.items():
                target = feeds[source]
                if isinstance(target, DeviceArray):
                    _bind_address(binding, output, target, output=True)
                else:
                    binding.bind_ortvalue_output(output, kept.values[source])
        else:
            binding = kept.binding
        targets = set(shared)
        changed = False
        for name, array in feeds.items():
            if name in targets:
                continue
            before = kept.small.get(name)
            if before is not None and before[0] is array:
                continue  # (the same array object: the same memory, shape and type)
            where = _where(array)
            if before is None or before[1] != where:
                if isinstance(array, DeviceArray):
                    _bind_address(binding, name, array, output=False)
                else:
                    binding.bind_cpu_input(name, array)
            kept.small[name] = (array, where)
            changed = True
        if changed:
            kept.host_bytes = kept.shared_bytes + sum(
                a.nbytes for a, _ in kept.small.values() if not isinstance(a, DeviceArray)
            )
        for name in returned:  # bound again: each run gets its own arrays
            binding.bind_output(name)
        return key, binding, kept

    def kept(self, feeds: Bound, returned: list[str], into: Mapping[str, str]) -> Kept:
        """The binding kept for these feeds (KeyError when none is), left in place."""
        return self._bindings[self._binding_key(feeds, returned, into)]

    def __len__(self) -> int:
        return len(self._bindings)

    def keep(self, key: object, kept: Kept) -> None:
        self._bindings[key] = kept
        while len(self._bindings) > KEPT_BINDINGS:
            self._bindings.pop(next(iter(self._bindings)))

    def clear(self) -> None:
        self._bindings = {}
        self._recent = {}


def _where(array: Array | DeviceArray) -> tuple[object, ...]:
    """An array's memory, shape, strides and type: what a binding of it reads."""
    if isinstance(array, DeviceArray):
        return (array.device, array.address, array.shape, array.dtype.str)
    return (array.ctypes.data, array.shape, array.strides, array.dtype.str)


def _bind_address(binding: IOBinding, name: str, array: DeviceArray, output: bool) -> None:
    """Binds an array in the instance's own memory where it lies, by address."""
    bind = binding.bind_output if output else binding.bind_input
    bind(name, array.device, array.device_id, array.dtype.type, list(array.shape), array.address)
