"""A real OTLP receiver for the tests, traces over gRPC and over HTTP (protobuf) and metrics
over gRPC, built on OpenTelemetry's own protocol definitions (opentelemetry-proto): what a
collector's `otlp` receiver accepts, decoded into plain records the tests can read."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

T = TypeVar("T")


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]
    """(trace id, span id) of each linked span."""
    service: str
    status_code: int
    resource: dict[str, Any]


@dataclass(frozen=True)
class ReceivedPoint:
    """One histogram data point of a metric (cumulative, as the SDK sends by default)."""

    metric: str
    unit: str
    attributes: dict[str, Any]
    count: int
    total: float
    bounds: tuple[float, ...]


def decode_metrics(request: metrics_service_pb2.ExportMetricsServiceRequest) -> list[ReceivedPoint]:
    points = []
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.WhichOneof("data") != "histogram":
                    continue
                for point in metric.histogram.data_points:
                    points.append(
                        ReceivedPoint(
                            metric=metric.name,
                            unit=metric.unit,
                            attributes={a.key: _value(a.value) for a in point.attributes},
                            count=point.count,
                            total=point.sum,
                            bounds=tuple(point.explicit_bounds),
                        )
                    )
    return points


def _value(any_value: Any) -> Any:
    field = any_value.WhichOneof("value")
    return getattr(any_value, field) if field is not None else None


def decode(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=tuple((li.trace_id.hex(), li.span_id.hex()) for li in span.links),
                        service=str(resource.get("service.name", "")),
                        status_code=span.status.code,
                        resource=resource,
                    )
                )
    return spans


class OtlpReceiver:
    """Listens on 127.0.0.1: `grpc_endpoint` (OTLP/gRPC) and `http_endpoint` (OTLP/HTTP,
    `/v1/traces`); every span received goes into `spans`."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.points: list[ReceivedPoint] = []
        self.exports = 0
        self._lock = threading.Lock()
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        receiver = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                receiver._take(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                with receiver._lock:
                    receiver.points.extend(decode_metrics(request))
                return metrics_service_pb2.ExportMetricsServiceResponse()

        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self._grpc)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._grpc)
        grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self.grpc_endpoint = f"http://127.0.0.1:{grpc_port}"

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._take(request)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http_endpoint = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._http_thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def _take(self, request: Any) -> None:
        spans = decode(request)
        with self._lock:
            self.spans.extend(spans)
            self.exports += 1

    def start(self) -> OtlpReceiver:
        self._grpc.start()
        self._http_thread.start()
        return self

    def stop(self) -> None:
        self._grpc.stop(None)
        self._http.shutdown()
        self._http.server_close()

    def wait_for_points(
        self, found: Callable[[list[ReceivedPoint]], bool], timeout_s: float = 15.0
    ) -> list[ReceivedPoint]:
        """The metric points received, once `found` holds of them (or when the time is up)."""
        return self._wait(self.points, found, timeout_s)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 15.0
    ) -> list[ReceivedSpan]:
        """The spans received, once `found` holds of them (or when the time is up)."""
        return self._wait(self.spans, found, timeout_s)

    def _wait(
        self, received: list[T], found: Callable[[list[T]], bool], timeout_s: float
    ) -> list[T]:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                seen = list(received)
            if found(seen) or time.monotonic() > deadline:
                return seen
            time.sleep(0.05)
