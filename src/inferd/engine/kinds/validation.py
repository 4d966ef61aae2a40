"""Checking a request's tensors against a version's inputs, before anything is queued."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from inferd.errors import EmptyInputError, InvalidInputError, TooManyItemsError
from inferd.runtime.datatypes import v2_from_numpy
from inferd.runtime.protocol import Array, TensorSpec


def validate_feeds(
    feeds: Mapping[str, Array],
    inputs: Sequence[TensorSpec],
    batched: bool,
    max_rows_per_request: int,
) -> int:
    """Raises a 4xxx error naming the input and what is wrong; returns the request's rows."""
    expected = {s.name: s for s in inputs}
    missing = sorted(set(expected) - set(feeds))
    if missing:
        raise InvalidInputError(f"missing input(s) {missing}; the model takes {sorted(expected)}")
    unknown = sorted(set(feeds) - set(expected))
    if unknown:
        raise InvalidInputError(f"unknown input(s) {unknown}; the model takes {sorted(expected)}")
    rows: int | None = None
    for name, array in feeds.items():
        spec = expected[name]
        got = v2_from_numpy(array.dtype)
        if got != spec.datatype:
            raise InvalidInputError(f"input '{name}': expected datatype {spec.datatype}, got {got}")
        if array.ndim != spec.rank:
            raise InvalidInputError(
                f"input '{name}': expected shape {list(spec.shape)} (rank {spec.rank}), "
                f"got {list(array.shape)}"
            )
        for axis, (want, have) in enumerate(zip(spec.shape, array.shape, strict=True)):
            if want != -1 and want != have:
                raise InvalidInputError(
                    f"input '{name}': dimension {axis} must be {want}, got {have} "
                    f"(expected shape {list(spec.shape)})"
                )
            if have == 0:
                raise EmptyInputError(f"input '{name}': dimension {axis} is empty")
        if batched:
            if rows is None:
                rows = int(array.shape[0])
            elif rows != array.shape[0]:
                raise InvalidInputError(
                    f"input '{name}': batch size {array.shape[0]} differs from the other "
                    f"inputs' {rows}"
                )
    count = rows if rows is not None else 1
    if count > max_rows_per_request:
        raise TooManyItemsError(
            f"a request may carry at most {max_rows_per_request} rows, got {count}"
        )
    return count
