"""Server settings: one typed object built at start-up with flag > env > file > default.

Nothing here reads the environment at import time; `load_server_settings` is given the
environment and the flags by its caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from inferd.config.client_settings import ClientSettings
from inferd.config.job_settings import JobSettings
from inferd.config.yamlfile import read_yaml_mapping, validate_mapping

ENV_PREFIX = "INFERD_"

LogLevel = Literal["debug", "info", "warning", "error", "critical"]


class ServerSettings(ClientSettings, JobSettings):
    """Every server-wide path and tunable (who the clients are and what each may cause:
    `ClientSettings`; the job queue: `JobSettings`). Each field is also a CLI flag and an env
    variable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=0, le=65535, description="Port to listen on (0 picks a free one).")
    grpc_port: int = Field(
        8001,
        ge=0,
        le=65535,
        description="Port of the KServe V2 gRPC service (same host, same process and models); "
        "0: no gRPC.",
    )
    grpc_max_calls: int = Field(
        2048,
        ge=1,
        description="gRPC calls served at a time (streams included); one over it is answered "
        "RESOURCE_EXHAUSTED (code 4290) at once, before its message is read, and counted in "
        "inferd_grpc_refused_total.",
    )
    grpc_max_pending_calls: int = Field(
        8192,
        ge=1,
        description="gRPC calls that gRPC's core holds until the server takes them (a burst "
        "arrives faster than the event loop takes calls); over it, gRPC itself refuses new "
        "streams (REFUSED_STREAM: the client sees UNAVAILABLE, safe to retry), uncounted. "
        "Each holds its headers and at most its HTTP/2 window of message bytes.",
    )
    grpc_stream_window: int = Field(
        16,
        ge=1,
        description="Requests of one ModelStreamInfer stream running at a time, and responses "
        "waiting to be sent: past them the server stops reading the stream, so a client that "
        "does not read its responses is held back by HTTP/2 flow control.",
    )
    grpc_max_message_fields: int = Field(
        262144,
        ge=1,
        description="Fields (and elements of packed integer lists) a received gRPC message may "
        "hold; over it, INVALID_ARGUMENT (code 4005). Bounds protobuf's parse time: tensors "
        "in raw_input_contents or packed floats do not count element by element.",
    )
    repository: Path | None = Field(
        None, description="Model repository folder; none: the demo repository (built once)."
    )
    model_name: str | None = Field(
        None, description="The name of the model of a repository of one model (KServe's)."
    )
    demo_repository: Path = Field(
        Path("~/.cache/inferd/demo"), description="Where the demo is built and served from."
    )
    log_level: LogLevel = Field("info", description="Log level.")
    log_format: Literal["auto", "json", "text"] = Field(
        "auto",
        description="auto: text when stderr is a terminal, else json; json: one object per "
        "line (for log collectors); text: one line per event for people, with the local time "
        "(plain is taken as text).",
    )
    log_sample_rate: float = Field(
        0.01, ge=0, le=1, description="Share of successes that get a log line (errors all do)."
    )
    log_payloads: bool = Field(
        False,
        description="Debug only: log a truncated, marked copy of each logged request's input. "
        "Off, logs carry lengths and counts, never payloads.",
    )
    metrics: bool = Field(True, description="Serve Prometheus metrics at /metrics.")
    access_log: bool = Field(False, description="Log every HTTP request (costs throughput).")
    drain_grace_s: float = Field(
        0.0,
        ge=0,
        description="After SIGTERM: seconds readiness is false while requests are still "
        "accepted, so load balancers stop routing first.",
    )
    drain_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Seconds from the signal (the grace delay included) for queued and running "
        "work to finish; what is left then is answered 5030.",
    )
    request_timeout_s: float = Field(
        60.0, gt=0, description="Default deadline of an inference request, queue wait included."
    )
    max_request_timeout_s: float = Field(
        600.0, gt=0, description="Upper bound for a deadline asked by a client."
    )
    max_body_bytes: int = Field(
        64 * 1024 * 1024,
        gt=0,
        description="Largest request body accepted (413 above); over gRPC, the largest message "
        "received or sent (RESOURCE_EXHAUSTED above).",
    )
    max_text_body_bytes: int = Field(
        8 * 1024 * 1024,
        gt=0,
        description="Largest body of a text route (/predict, /embed, /v1/embeddings, "
        "/generate, /v1/completions, /v1/chat/completions), refused with 413 from its head: "
        "their texts are bounded by characters (tokenizer.max_request_chars, 1M by default: at "
        "most 6 bytes each in JSON), so a larger body cannot be valid. Raise it with "
        "max_request_chars.",
    )
    max_in_flight: int = Field(
        4096,
        ge=1,
        description="Admitted, unanswered inference requests across all models; over it, 429 "
        "(code 4290) at once.",
    )
    max_memory_mb: int = Field(
        0,
        ge=0,
        description="Admission limit on the process's resident memory: over it, new requests "
        "get 503 (code 5030) until it falls. 0: off.",
    )
    max_gpu_memory_fraction: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Admission limit on GPU 0's used memory share (when a GPU is present). 0: off.",
    )
    max_request_rows: int = Field(
        4096, ge=1, description="Most rows (batch-axis entries) one request may carry."
    )
    response_cache: bool = Field(
        True,
        description="Models whose config turns their response cache on keep it; false turns "
        "every model's off (to measure the models themselves, or to rule the cache out).",
    )
    strict_readiness: bool = Field(
        True,
        description="Ready only when every model and version loaded; when false, ready once "
        "loading finished and at least one model serves.",
    )
    model_memory_budget_mb: float = Field(
        0,
        ge=0,
        description="Resident memory the loaded model versions may hold in all (each "
        "measured when it loads: what its load added to the process). A load of an on_demand "
        "version that would go over it evicts idle on_demand versions, least recently used "
        "first, or waits within its requests' deadlines for a busy one to go idle; one that "
        "cannot fit even then is refused 503 (code 5030). 0: no budget.",
    )
    max_loaded_versions: int = Field(
        0,
        ge=0,
        description="Most model versions in memory at once, counted as the memory budget is "
        "(on_demand ones evicted to stay within it). 0: no limit.",
    )
    device_memory_budget_mb: float = Field(
        0,
        ge=0,
        description="Device memory, on each GPU, that the loaded model versions whose "
        "instances run there may hold (each measured through NVML when it loads: what its load "
        "added to the memory used on each of its GPUs). A load of an on_demand version that "
        "would go over it on a GPU evicts idle on_demand versions holding memory on that GPU, "
        "least recently used first, waiting for a busy one to go idle as the host budget "
        "does; one that cannot fit even then is refused 503 (code 5030). "
        "Checked with model_memory_budget_mb. 0: no budget.",
    )
    load_concurrency: int = Field(
        1, ge=1, description="Model versions loaded at the same time in the background."
    )
    repository_poll_s: float = Field(
        5.0,
        gt=0,
        description="How often the repository is read for new version folders of the models "
        "whose `rollout.auto` is on (each new one starts a rollout).",
    )
    gil_switch_interval_ms: float = Field(
        0.5,
        gt=0,
        description="Python's thread switch interval. Shorter than Python's 5 ms default so a "
        "runtime thread whose batch finished gets the interpreter back quickly while the event "
        "loop is busy with HTTP work.",
    )
    cors_origins: str = Field(
        "",
        description="Comma-separated origins allowed by CORS (e.g. https://app.example.com); "
        "empty: CORS off.",
    )
    keep_alive_s: float = Field(5.0, gt=0, description="HTTP keep-alive timeout.")
    max_header_bytes: int = Field(
        65536,
        ge=1024,
        description="Most bytes of a request's head (request line and headers); over it, 431 "
        "at once and the connection closed.",
    )
    max_headers: int = Field(
        100,
        ge=8,
        description="Most headers of one request; over it, 431 and the connection closed.",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Time a request's head may take to arrive; then 408 and the connection "
        "closed (a connection that sends nothing is closed).",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Time a request's body may go without a byte arriving; then 408 and the "
        "connection closed. A body still arriving when the server drains is answered 5030.",
    )

    @field_validator("log_format", mode="before")
    @classmethod
    def _plain_is_text(cls, value: object) -> object:
        return "text" if value == "plain" else value


def _field_env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings given by `INFERD_<FIELD>` variables (values as strings; pydantic converts)."""
    found: dict[str, Any] = {}
    for field in ServerSettings.model_fields:
        name = _field_env_name(field)
        if name in environ:
            found[field] = environ[name]
    return found


def load_server_settings(
    config_file: Path | None,
    environ: Mapping[str, str],
    flags: Mapping[str, Any],
) -> ServerSettings:
    """Merge default < file < environment < flags; each layer is checked on its own so that an
    error names where the bad value came from (the file and key, the variable, or the flag).

    `flags` holds only the flags the user gave (None means not given).
    """
    layers: dict[str, Any] = {}
    if config_file is not None:
        file_values = read_yaml_mapping(config_file)
        validate_mapping(ServerSettings, file_values, str(config_file))
        layers.update(file_values)
    env_values = env_overrides(environ)
    for field, value in env_values.items():
        validate_mapping(ServerSettings, {**layers, field: value}, f"${_field_env_name(field)}")
    layers.update(env_values)
    given = {k: v for k, v in flags.items() if v is not None}
    merged = {**layers, **given}
    return validate_mapping(ServerSettings, merged, "command line")
