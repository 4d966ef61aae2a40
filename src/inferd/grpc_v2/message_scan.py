"""A received message's bytes walked within a bound before protobuf parses them.

Protobuf's parser (upb, in C) takes a whole message in one call that holds the interpreter
throughout, and its time grows with the number of fields, not of bytes: 64 MiB of empty
`inputs` entries take it over five seconds, 64 MiB of one-byte packed integers half a second.
So a message is first walked here, field by field and into the nested messages its type
declares, counting what the parser would have to build: every field, and every element of a
packed integer list (a packed float list is copied as a block: not counted). Past
`budget` the walk stops and the message is refused, at a cost bounded by the budget; within
it, the parser's time is bounded too. Malformed bytes (a field running past its message's end,
a varint over ten bytes, a group) are refused from the walk.

The walk of a `ModelInferRequest` also cuts its `raw_input_contents` out as views of the
received bytes (inferd.grpc_v2.wire): the tensors are never copied into the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
"""Protobuf's wire types (groups, 3 and 4, are not used by the protocol: refused)."""

MAX_DEPTH = 32
"""Nesting deeper than any message of the protocol: refused."""

_VARINT_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_BOOL,
        FieldDescriptor.TYPE_ENUM,
    }
)


class Malformed(ValueError):
    """The bytes are not a message of the expected type."""


class OverBudget(ValueError):
    """The message holds more fields than the budget allows."""


@dataclass(slots=True)
class Shape:
    """What the walk needs of a message type: its message-typed fields (map entries are
    messages too) and its repeated integer fields (packed, each element is parsed)."""

    children: dict[int, Shape] = field(default_factory=dict)
    packed_integers: frozenset[int] = frozenset()


@cache
def shape_of(descriptor: Any) -> Shape:
    """(`descriptor`: protobuf's `Descriptor`, in Python or upb's.)"""
    shape = Shape()
    shape.packed_integers = frozenset(
        f.number
        for f in descriptor.fields
        if f.type in _VARINT_TYPES and f.label == FieldDescriptor.LABEL_REPEATED
    )
    for f in descriptor.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            # (a message type that holds itself would recurse here: the protocol has none)
            shape.children[f.number] = shape_of(f.message_type)
    return shape


Plan = Mapping[int, "Plan | None"]
"""Fields to take out of a message while it is walked: a field number mapped to None is cut
(its payloads collected, length-delimited entries only); one mapped to a plan is a message
field walked into and cut by that plan, its entries rewritten around what was cut."""


@dataclass(slots=True)
class Walked:
    """The message's bytes without the cut fields (runs of the original, and the tags and
    lengths of the entries rewritten around a cut), and the cut payloads in order: a
    top-level field's in `cut`; a nested one's in `nested`, under the index of the top-level
    entry it sits in (counted per field number) and its own field number."""

    rest: list[memoryview | bytes]
    cut: list[memoryview]
    nested: dict[tuple[int, int], list[memoryview]] = field(default_factory=dict)
    changed: bool = False


def walk(data: bytes, descriptor: Any, budget: int, plan: Plan | None = None) -> Walked:
    """Walks `data` as a message of `descriptor`'s type, taking out what `plan` names.
    Raises `Malformed` or `OverBudget`."""
    view = memoryview(data)
    walked = Walked([], [])
    _walk(data, view, 0, len(data), shape_of(descriptor), budget, 0, plan, walked, None)
    return walked


def _walk(
    data: bytes,
    view: memoryview,
    start: int,
    end: int,
    shape: Shape,
    budget: int,
    depth: int,
    plan: Plan | None,
    walked: Walked | None,
    entry: int | None,
) -> int:
    """The budget left after the fields of data[start:end]. `entry`: the index of the
    top-level entry this message sits in (None at the top)."""
    if depth > MAX_DEPTH:
        raise Malformed("nested too deeply")
    position = kept_from = start
    seen: dict[int, int] = {} if plan is not None else _NONE_SEEN
    while position < end:
        budget -= 1
        if budget < 0:
            raise OverBudget
        field_at = position
        key, position = _varint(data, position, end)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise Malformed("a field numbered 0")
        if kind == VARINT:
            _, position = _varint(data, position, end)
        elif kind == FIXED64:
            position += 8
        elif kind == FIXED32:
            position += 4
        elif kind == LENGTH_DELIMITED:
            key_end = position
            size, position = _varint(data, position, end)
            after = position + size
            if after > end:
                raise Malformed("a field runs past the end of its message")
            into = plan.get(number, _KEEP) if plan is not None and walked is not None else _KEEP
            child = shape.children.get(number)
            if child is not None and into is not _KEEP and into is not None:
                assert walked is not None  # (`into` is a plan only with somewhere to cut to)
                index = seen.get(number, 0)
                seen[number] = index + 1
                inner = Walked([], walked.cut, walked.nested)
                budget = _walk(
                    data,
                    view,
                    position,
                    after,
                    child,
                    budget,
                    depth + 1,
                    into,
                    inner,
                    index if entry is None else entry,
                )
                if inner.changed:  # the entry rewritten: its tag, its new length, what is left
                    kept = sum(len(part) for part in inner.rest)
                    walked.rest += (view[kept_from:field_at], view[field_at:key_end])
                    walked.rest.append(varint_bytes(kept))
                    walked.rest += inner.rest
                    walked.changed = True
                    kept_from = after
            elif child is not None:
                budget = _walk(
                    data, view, position, after, child, budget, depth + 1, None, None, None
                )
            elif number in shape.packed_integers:
                budget -= _count_varints(view[position:after])
                if budget < 0:
                    raise OverBudget
            if into is None and walked is not None:
                walked.rest.append(view[kept_from:field_at])
                if entry is None:
                    walked.cut.append(view[position:after])
                else:
                    walked.nested.setdefault((entry, number), []).append(view[position:after])
                walked.changed = True
                kept_from = after
            position = after
        else:
            raise Malformed(f"wire type {kind}")
        if position > end:
            raise Malformed("a field runs past the end of its message")
    if walked is not None:
        walked.rest.append(view[kept_from:end])
    return budget


_NONE_SEEN: dict[int, int] = {}
"""(Never written: only a walk with a plan counts entries.)"""
_KEEP: Any = object()
"""A field the plan does not name: walked (and counted) as it is."""


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint(data: bytes, position: int, end: int) -> tuple[int, int]:
    """The varint at `position`, and the position after it."""
    if position < end:
        byte = data[position]
        if byte < 0x80:
            return byte, position + 1
    value = shift = 0
    for index in range(position, min(position + 10, end)):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise Malformed("a varint runs past its end or over ten bytes")


def _count_varints(view: memoryview) -> int:
    """Elements of a packed varint list: its bytes without the continuation bit."""
    if len(view) < 64:
        return sum(1 for byte in view if byte < 0x80)
    return int(np.count_nonzero(np.frombuffer(view, np.uint8) < 0x80))
