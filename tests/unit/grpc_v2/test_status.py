"""Every inferd error code has a gRPC status, none of them UNKNOWN or OK."""

from __future__ import annotations

import grpc

from inferd.errors import ErrorCode
from inferd.grpc_v2.status_codes import GRPC_STATUS


def test_every_code_maps_to_a_meaningful_status() -> None:
    assert set(GRPC_STATUS) == set(ErrorCode)
    assert not {grpc.StatusCode.UNKNOWN, grpc.StatusCode.OK} & set(GRPC_STATUS.values())
    assert GRPC_STATUS[ErrorCode.QUEUE_FULL] is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert GRPC_STATUS[ErrorCode.DEADLINE_EXCEEDED] is grpc.StatusCode.DEADLINE_EXCEEDED
