"""OpenTelemetry against a real OTLP receiver (tests/otlp_receiver.py, over gRPC and HTTP):
the client's W3C `traceparent` as the request span's parent, over HTTP and gRPC; the stages as
child spans at the times they ran; the batch as a link; the GenAI conventions' server metrics;
nothing sent when traces are off."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.generator_model import MODEL as GENERATOR
from tests.generator_model import build_generator_repo
from tests.integration.server import RunningServer, start_server
from tests.models import affine_model, write_config
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan

SERVER_KIND = 2  # opentelemetry.proto.trace.v1.Span.SpanKind.SPAN_KIND_SERVER
STATUS_UNSET = 0  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_UNSET
AFFINE_BODY = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
FAST_EXPORT = {
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_METRIC_EXPORT_INTERVAL": "200",
    "OTEL_SERVICE_NAME": "inferd-under-test",
}


def parent_header() -> tuple[str, str, str]:
    """A fresh W3C traceparent, with its trace id and span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def log_lines(server: RunningServer) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    running = OtlpReceiver().start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def traced(
    tmp_path_factory: pytest.TempPathFactory, receiver: OtlpReceiver
) -> Iterator[RunningServer]:
    from inferd.tools.demo import build_demo

    root = build_demo(tmp_path_factory.mktemp("traced") / "repo")
    affine_model(root / "affine" / "1" / "model.onnx")
    write_config(root / "affine", {"max_batch_size": 8, "residency": "on_demand"})
    build_generator_repo(root)
    log = tmp_path_factory.mktemp("traced-logs") / "server.log"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint, **FAST_EXPORT}
    server = start_server(root, log, "--log-sample-rate", "1", env=env)
    yield server
    assert server.stop() == 0


def request_spans(
    receiver: OtlpReceiver, trace_id: str, name: str, stages: set[str]
) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
    """The request's span in `trace_id` named `name` and its children, once every stage in
    `stages` has arrived."""

    def complete(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.trace_id == trace_id]
        roots = [s for s in mine if s.name == name]
        return bool(roots) and stages <= {
            s.name for s in mine if s.parent_span_id == roots[0].span_id
        }

    spans = [s for s in receiver.wait_for(complete) if s.trace_id == trace_id]
    roots = [s for s in spans if s.name == name]
    assert roots, f"no span {name!r} in {[s.name for s in spans]}"
    children = [s for s in spans if s.parent_span_id == roots[0].span_id]
    assert stages <= {s.name for s in children}, [s.name for s in children]
    return roots[0], children


def by_name(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans}


def within(child: ReceivedSpan, parent: ReceivedSpan) -> bool:
    return parent.start_ns <= child.start_ns <= child.end_ns <= parent.end_ns


def test_an_http_request_span_has_the_clients_parent_its_stages_and_its_batch(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    header, trace_id, parent_id = parent_header()
    response = httpx.post(
        traced.url + "/embed",
        json={"model": "minilm", "texts": ["a traced text", "and another"]},
        headers={"traceparent": header, "tracestate": "vendor=1"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    root, children = request_spans(
        receiver, trace_id, "POST /embed", {"tokenize", "queue", "run", "respond"}
    )
    assert root.parent_span_id == parent_id and root.kind == SERVER_KIND
    assert root.service == "inferd-under-test"
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["inferd.model"] == "minilm" and root.attributes["inferd.items"] == 2
    assert root.attributes["inferd.request_id"] == response.headers["x-request-id"]
    stage = by_name(children)
    for child in children:
        assert within(child, root), child.name
    # in the order they ran: tokenized, queued, run, answered
    assert stage["tokenize"].end_ns <= stage["queue"].start_ns
    assert stage["queue"].end_ns == stage["run"].start_ns
    assert stage["run"].end_ns <= stage["respond"].start_ns
    (link,) = stage["run"].links
    batches = receiver.wait_for(lambda spans: any(s.span_id == link[1] for s in spans))
    batch = next(s for s in batches if s.span_id == link[1])
    assert batch.trace_id == link[0] and batch.name == "inferd.batch"
    assert batch.attributes["inferd.batch.rows"] >= 2
    assert batch.start_ns == stage["run"].start_ns and batch.end_ns == stage["run"].end_ns
    assert batch.attributes["inferd.batch.id"] == stage["run"].attributes["inferd.batch.id"]
    runs = [c for c in children if c.name == "run"]  # one a batch, however many texts in it
    assert len({r.attributes["inferd.batch.id"] for r in runs}) == len(runs) <= 2
    # the log line names the trace, so a log can be joined to its spans
    line = next(
        line
        for line in log_lines(traced)
        if line.get("request_id") == root.attributes["inferd.request_id"]
    )
    assert line["trace_id"] == trace_id


def test_a_request_without_a_parent_starts_a_trace_of_its_own(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    response = httpx.post(
        traced.url + "/embed", json={"model": "minilm", "texts": ["alone"]}, timeout=60
    )
    assert response.status_code == 200
    request_id = response.headers["x-request-id"]
    spans = receiver.wait_for(
        lambda spans: any(s.attributes.get("inferd.request_id") == request_id for s in spans)
    )
    root = next(s for s in spans if s.attributes.get("inferd.request_id") == request_id)
    assert root.parent_span_id == "" and len(root.trace_id) == 32
    time.sleep(0.3)  # (the log line is written as the response goes)
    line = next(line for line in log_lines(traced) if line.get("request_id") == request_id)
    assert line["trace_id"] == root.trace_id


def test_a_refused_request_span_names_its_code_and_stays_unset(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    header, trace_id, _ = parent_header()
    response = httpx.post(
        traced.url + "/embed",
        json={"model": "no-such-model", "texts": ["x"]},
        headers={"traceparent": header},
        timeout=30,
    )
    assert response.status_code == 404
    root, _ = request_spans(receiver, trace_id, "POST /embed", set())
    # the client's error, not the server's: the conventions leave a server span's status unset
    assert root.status_code == STATUS_UNSET
    assert root.attributes["inferd.error.code"] == response.json()["code"]
    assert root.attributes["error.type"] == str(response.json()["code"])
    assert root.attributes["http.response.status_code"] == 404


def test_a_grpc_call_takes_its_parent_from_metadata(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    header, trace_id, parent_id = parent_header()
    assert traced.grpc_target is not None
    client = grpcclient.InferenceServerClient(traced.grpc_target)
    data = grpcclient.InferInput("x", [3, 4], "FP32")
    data.set_data_from_numpy(np.ones((3, 4), dtype=np.float32))
    result = client.infer("affine", [data], headers={"traceparent": header})
    assert np.allclose(result.as_numpy("y"), 3.0)
    client.close()
    root, children = request_spans(
        receiver,
        trace_id,
        "inference.GRPCInferenceService/ModelInfer",
        {"load", "parse", "queue", "run", "respond"},  # (the first request loads `affine`)
    )
    assert root.parent_span_id == parent_id and root.kind == SERVER_KIND
    assert root.attributes["rpc.system"] == "grpc" and root.attributes["inferd.model"] == "affine"
    assert root.attributes["rpc.service"] == "inference.GRPCInferenceService"
    assert root.attributes["rpc.method"] == "ModelInfer"
    assert all(within(child, root) for child in children)


def test_a_generation_span_has_its_prefill_and_decode(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    header, trace_id, _ = parent_header()
    response = httpx.post(
        traced.url + "/generate",
        json={"model": GENERATOR, "prompt": "Go on", "max_length": 8, "temperature": 0},
        headers={"traceparent": header},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    root, children = request_spans(receiver, trace_id, "POST /generate", {"prefill", "decode"})
    stage = by_name(children)
    assert stage["prefill"].end_ns == stage["decode"].start_ns
    assert all(within(child, root) for child in children)


def test_generation_reports_the_genai_server_metrics(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    with httpx.Client(base_url=traced.url, timeout=60) as http:
        chat = http.post(
            "/v1/chat/completions",
            json={
                "model": GENERATOR,
                "messages": [{"role": "user", "content": "Say something"}],
                "max_tokens": 6,
                "temperature": 0,
            },
        )
        assert chat.status_code == 200, chat.text
        usage = chat.json()["usage"]
        missing = http.post("/v1/chat/completions", json={"model": "nope", "messages": []})
        assert missing.status_code >= 400
    chat_of = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "inferd",
        "gen_ai.request.model": GENERATOR,
    }
    names = {
        "gen_ai.server.request.duration",
        "gen_ai.server.time_to_first_token",
        "gen_ai.server.time_per_output_token",
        "gen_ai.client.token.usage",
    }

    def of_chat(points: list[Any]) -> dict[tuple[str, str], Any]:
        return {
            (p.metric, p.attributes.get("gen_ai.token.type", "")): p
            for p in points
            if all(p.attributes.get(k) == v for k, v in chat_of.items())
            and "error.type" not in p.attributes
        }

    points = receiver.wait_for_points(lambda found: names <= {m for m, _ in of_chat(found)})
    latest = of_chat(points)  # (the last export of each: cumulative)
    duration = latest[("gen_ai.server.request.duration", "")]
    assert duration.unit == "s" and duration.count >= 1 and duration.total > 0
    assert duration.bounds[:3] == (0.01, 0.02, 0.04) and duration.bounds[-1] == 81.92
    first = latest[("gen_ai.server.time_to_first_token", "")]
    assert first.count >= 1 and 0 < first.total <= duration.total
    assert first.bounds[0] == 0.001
    assert latest[("gen_ai.server.time_per_output_token", "")].count >= 1
    assert latest[("gen_ai.client.token.usage", "input")].total >= usage["prompt_tokens"]
    assert latest[("gen_ai.client.token.usage", "output")].total >= usage["completion_tokens"]
    # a request that failed counts in the duration with its error, and nowhere else
    failed = receiver.wait_for_points(
        lambda found: any("error.type" in p.attributes for p in found)
    )
    errors = [p for p in failed if "error.type" in p.attributes]
    assert {p.metric for p in errors} == {"gen_ai.server.request.duration"}
    assert errors[-1].attributes["error.type"] == str(missing.json()["error"]["code"])


@pytest.fixture(scope="module")
def affine_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("affine-repo")
    affine_model(root / "affine" / "1" / "model.onnx")
    return root


def test_spans_go_over_otlp_http_when_the_protocol_says_so(
    affine_repo: Path, receiver: OtlpReceiver, tmp_path: Path
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        **FAST_EXPORT,
    }
    server = start_server(affine_repo, tmp_path / "server.log", env=env)
    try:
        header, trace_id, parent_id = parent_header()
        response = httpx.post(
            server.url + "/v2/models/affine/infer",
            json=AFFINE_BODY,
            headers={"traceparent": header},
        )
        assert response.status_code == 200, response.text
        root, _ = request_spans(
            receiver,
            trace_id,
            "POST /v2/models/{model}/infer",
            {"parse", "queue", "run", "respond"},
        )
        assert root.parent_span_id == parent_id
    finally:
        assert server.stop() == 0


def test_nothing_is_sent_when_traces_are_off_and_the_log_still_names_the_trace(
    affine_repo: Path, tmp_path: Path
) -> None:
    own = OtlpReceiver().start()  # (the module's receiver hears the traced server too)
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": own.grpc_endpoint,
        "OTEL_TRACES_EXPORTER": "none",
        **FAST_EXPORT,
    }
    server = start_server(affine_repo, tmp_path / "server.log", "--log-sample-rate", "1", env=env)
    try:
        header, trace_id, _ = parent_header()
        for _ in range(3):
            response = httpx.post(
                server.url + "/v2/models/affine/infer",
                json=AFFINE_BODY,
                headers={"traceparent": header},
            )
            assert response.status_code == 200
        time.sleep(1.0)  # ten export periods, were an exporter running
        assert own.exports == 0
        lines = [
            line for line in log_lines(server) if line.get("endpoint") == "/v2/models/{model}/infer"
        ]
        assert len(lines) == 3 and {line["trace_id"] for line in lines} == {trace_id}
    finally:
        assert server.stop() == 0
        own.stop()
