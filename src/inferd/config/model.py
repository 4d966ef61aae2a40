"""Per-model configuration: `<repo>/<model>/config.yaml`.

Every field has a default, so a folder with just `1/model.onnx` is a valid model. Names, shapes
and datatypes come from the ONNX file unless `inputs` / `outputs` override them.
"""

from __future__ import annotations

import itertools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inferd.config.kinds import KINDS, Kind, TaskName

V2Datatype = Literal[
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BF16",
    "BYTES",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DynamicBatchingConfig(_Strict):
    max_queue_delay_ms: float = Field(
        2.0,
        ge=0,
        description="Longest a queued request waits for others to join its batch while another "
        "batch is running. On an idle runtime a request is dispatched at once.",
    )
    preferred_batch_sizes: tuple[int, ...] = Field(
        (), description="Batch sizes that are dispatched as soon as they are reached."
    )
    max_queue_size: int = Field(
        1024, ge=1, description="Requests queued per version; over it, 429 (code 4290)."
    )
    max_queue_time_ms: float | None = Field(
        500,
        gt=0,
        description="Longest a request waits in the queue before its batch starts. A request "
        "the queued work (at the measured cost of a row) says would wait more than half of "
        "it is refused 429 (code 4290) as it arrives (the half: a margin for the estimate), "
        "before its body is read where the route allows, with a `Retry-After` from the "
        "queue's work; one that waited longer all the same is answered 429 then. The bound in "
        "force is never below 16 measured runs of a request alone, and nothing is shed while "
        "fewer than 8 requests are queued, so that a slow model, or a burst of large requests, "
        "is queued rather than shed. 500 by default, as a "
        "latency-sensitive service would choose: its callers' budget for a whole answer is "
        "about a second, half of it queued leaves the run and the network the rest, and a "
        "request refused at once "
        "can still be retried on another replica within that budget. null: no bound "
        "(max_queue_size and the request's deadline limit the wait).",
    )
    max_batch_tokens: int | None = Field(
        None,
        ge=1,
        description="Cap on a batch's padded tokens (rows x padded length), as TEI's "
        "max_batch_tokens; unset: only max_batch_size caps a batch.",
    )
    learn_batch_tokens: bool = Field(
        True,
        description="Under load, cap batches (within max_batch_size and max_batch_tokens) at "
        "the size that costs least per token, learned from the model's own run times: on a "
        "CPU a batch that outgrows the caches costs more per token than a smaller one. Now "
        "and then a batch a size smaller or larger is tried, so the cap follows the machine. "
        "false: batches are as large as the queue and the two caps allow.",
    )
    length_grouping: bool = Field(
        True,
        description="Gather items of similar length into a batch (the oldest first), so padding "
        "stays small.",
    )
    max_consecutive_failures: int = Field(
        5,
        ge=1,
        description="Single-item runtime failures in a row (internal errors, not bad inputs) "
        "after which the version is marked unhealthy and stops taking requests.",
    )
    oom_cooldown_s: float = Field(
        30.0,
        gt=0,
        description="After an out-of-memory failure the batch size limit is halved; it grows "
        "back by half of itself each cool-down period.",
    )
    padding_side: Literal["right", "left"] = Field(
        "right", description="Where padding goes on padded axes (token ids: right for encoders)."
    )
    max_padding_waste: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Items of different lengths share a batch only while padded elements stay "
        "under this share of the batch; a quarter of it when more rows wait than one batch "
        "takes (with length_grouping: the items left out find partners of their own length).",
    )

    @model_validator(mode="after")
    def _sizes_positive(self) -> DynamicBatchingConfig:
        if any(size < 1 for size in self.preferred_batch_sizes):
            raise ValueError("preferred_batch_sizes must be positive")
        return self


class RuntimeOptions(_Strict):
    providers: tuple[str, ...] = Field(
        ("CPUExecutionProvider",),
        description="Execution providers in order of preference; CPU is always the fallback.",
    )
    intra_op_threads: int = Field(0, ge=0, description="0 lets ONNX Runtime choose.")
    inter_op_threads: int = Field(0, ge=0, description="0 lets ONNX Runtime choose.")
    graph_optimization_level: Literal["disable", "basic", "extended", "all"] = Field(
        "all", description="ONNX Runtime's graph optimizations applied when the session loads."
    )
    execution_mode: Literal["sequential", "parallel"] = Field(
        "sequential", description="parallel runs independent branches of the graph at once."
    )
    memory_arena: bool = Field(
        True,
        description="ONNX Runtime's CPU memory arena: fast reuse, but it keeps its high-water "
        "mark (batch x sequence length sets the peak).",
    )
    memory_pattern: bool = Field(
        True, description="Plan memory from the first run's shapes (helps fixed shapes)."
    )
    arena_shrink_above_elements: int | None = Field(
        None,
        ge=1,
        description="After a run whose largest input holds more elements than this (an "
        "unusually large batch), give the arena's free memory back to the system.",
    )
    cuda_arena_extend_strategy: Literal["next_power_of_two", "same_as_requested"] = Field(
        "same_as_requested",
        description="How the CUDA arena grows; same_as_requested wastes less device memory.",
    )
    gpu_mem_limit_mb: int | None = Field(
        None,
        ge=1,
        description="The CUDA provider's arena limit (ONNX Runtime's gpu_mem_limit), in MiB; "
        "unset: the whole device. A run that needs more fails as out of memory (5070, its "
        "batch halved and retried).",
    )
    allow_spinning: bool = Field(
        False,
        description="Let ONNX Runtime's idle threads spin for work. Off by default: in a server "
        "the event loop and the load share the cores, and spinning burns the CPU they need. "
        "The solo instance (solo_threads) spins unless this is set.",
    )
    stop_spinning_after_run: bool = Field(
        False,
        description="With allow_spinning: the threads spin while a run lasts and stop when it "
        "returns (ONNX Runtime's session.force_spinning_stop): no core burnt between runs, "
        "for machines shared with other work. It costs latency: the next run wakes them "
        "(a lone short text 0.2-0.7 ms slower on the solo instance: benchmarks/ab_bench.py "
        "--lone).",
    )
    device_id: int | None = Field(
        None,
        ge=0,
        description="The GPU of the CUDA and TensorRT providers (device 0 when unset). Set per "
        "instance by instance_groups; when set, a build without a GPU provider fails the load "
        "instead of falling back to the CPU.",
    )


class InstanceGroup(_Strict):
    """Instances of one kind (Triton's instance_group): `count` on the CPU, or `count` on
    each listed GPU."""

    count: int = Field(1, ge=1, description="Instances (on each GPU of `gpus` for kind gpu).")
    kind: Literal["cpu", "gpu"] = Field("cpu", description="cpu, or gpu (the CUDA provider).")
    gpus: tuple[int, ...] = Field((), description="kind gpu: the device ids; device 0 when empty.")
    threads: int | None = Field(
        None,
        ge=0,
        description="ONNX Runtime intra-op threads of each instance (runtime.intra_op_threads "
        "when unset; 0 lets ONNX Runtime choose).",
    )

    @model_validator(mode="after")
    def _gpus_for_gpu(self) -> InstanceGroup:
        if self.kind == "cpu" and self.gpus:
            raise ValueError("gpus applies to kind gpu only")
        if len(set(self.gpus)) != len(self.gpus) or any(g < 0 for g in self.gpus):
            raise ValueError("gpus must be distinct device ids, 0 or above")
        return self


class VersionPolicy(_Strict):
    """Exactly one of `latest`, `all`, `specific` (Triton's version_policy)."""

    latest: int | None = Field(None, ge=1, description="Serve the N highest versions (default 1).")
    all: bool = Field(False, description="Serve every version.")
    specific: tuple[int, ...] | None = Field(None, description="Serve these versions.")

    @model_validator(mode="after")
    def _one_policy(self) -> VersionPolicy:
        chosen = sum([self.latest is not None, self.all, self.specific is not None])
        if chosen > 1:
            raise ValueError("give only one of latest, all, specific")
        if self.specific is not None and not self.specific:
            raise ValueError("specific needs at least one version")
        return self

    def select(self, available: list[int]) -> list[int]:
        """The versions to serve, ascending."""
        ordered = sorted(available)
        if self.all:
            return ordered
        if self.specific is not None:
            return sorted(v for v in ordered if v in set(self.specific))
        return ordered[-(self.latest or 1) :]


class TensorOverride(_Strict):
    """Overrides what the ONNX file says of an input or output, or adds what it cannot say."""

    name: str = Field(description="The input or output, as the ONNX file names it.")
    datatype: V2Datatype | None = Field(None, description="The KServe V2 datatype to serve.")
    shape: tuple[int, ...] | None = Field(
        None, description="Without the batch axis when max_batch_size > 0; -1 is variable."
    )
    pad_value: float | None = Field(
        None,
        description="Inputs only: variable axes are padded with this value so items of "
        "different lengths can share a batch (e.g. 0 for token ids and attention masks).",
    )


class DriftConfig(_Strict):
    enabled: bool = Field(True, description="Track input drift (text models).")
    reference_size: int = Field(
        1000, ge=10, description="Observations in the reference window (the first ones seen)."
    )
    window: int = Field(500, ge=10, description="Observations in the recent window.")
    threshold: float = Field(
        0.2, gt=0, description="PSI over which a warning is logged (0.1: moderate, 0.2: large)."
    )
    reference_file: str | None = Field(
        None,
        description='JSON beside config.yaml with reference samples, {"input_length": [...], '
        '"top_confidence": [...]}, instead of the first requests.',
    )


class TokenizerConfig(_Strict):
    file: str = Field(
        "tokenizer.json",
        description="Hugging Face tokenizer file, looked for in the version folder, then in the "
        "model folder: the one exported with the model, never a second copy.",
    )
    max_tokens: int = Field(
        512, ge=2, description="Most tokens a text may have (special tokens included)."
    )
    truncate: bool = Field(
        True, description="Cut longer texts to max_tokens; when false they are refused (4002)."
    )
    max_chars: int = Field(
        100_000,
        ge=1,
        description="Most characters a text (or a generation prompt) may have, whatever the "
        "truncation; checked before any tokenization (4002 above).",
    )
    max_request_chars: int = Field(
        1_000_000,
        ge=1,
        description="Most characters of all the texts of one request together; checked before "
        "any tokenization (4002 above).",
    )
    input_ids: str = Field("input_ids", description="The model input that takes token ids.")
    attention_mask: str | None = Field(
        "attention_mask", description="The model input that takes the attention mask, if any."
    )
    token_type_ids: str | None = Field(
        None, description="The model input that takes segment ids (all 0), if the model has one."
    )


class EmbeddingConfig(_Strict):
    pooling: Literal["mean", "cls", "output"] = Field(
        "mean",
        description="mean: over the attention mask; cls: the first token; output: the model's "
        "own pooled output.",
    )
    output: str | None = Field(
        None,
        description="The model output to read: token states for mean/cls, the pooled vector "
        "for output. Default: the model's first output.",
    )
    normalize: bool = Field(True, description="L2-normalize the embeddings.")
    dimensions: tuple[int, ...] = Field(
        (),
        description="Smaller sizes a client may ask for (`dimensions`), for models trained to "
        "allow truncation (Matryoshka). Empty: only the full size.",
    )


class ClassificationConfig(_Strict):
    labels: tuple[str, ...] = Field((), description="Label names, in the order of the logits.")
    output: str | None = Field(None, description="The logits output; default: the first.")
    activation: Literal["softmax", "sigmoid"] = Field(
        "softmax", description="softmax: one label per text; sigmoid: independent labels."
    )


class RerankConfig(_Strict):
    output: str | None = Field(
        None, description="The output holding one logit per pair; default: the first."
    )
    activation: Literal["sigmoid", "none"] = Field(
        "sigmoid",
        description="sigmoid: scores between 0 and 1 (a request's `raw_scores: true` asks for "
        "the logits instead, as text-embeddings-inference's does); none: the logits always.",
    )


class ZeroShotLabel(_Strict):
    name: str = Field(description="The label returned to clients.")
    description: str | None = Field(
        None, description="The text embedded for this label (default: the name)."
    )


class ZeroShotConfig(_Strict):
    base_model: str = Field(description="The embedding model of this repository to use.")
    labels: tuple[ZeroShotLabel, ...] = Field(
        min_length=2, description="Candidate labels, embedded once when the model loads."
    )
    temperature: float = Field(
        0.05, gt=0, description="Softmax temperature over the cosine similarities."
    )


class GenerationConfig(_Strict):
    context_length: int = Field(
        1024, ge=2, description="Most tokens a sequence may hold, prompt and output together."
    )
    eos_token_id: int | None = Field(
        None, description="The token that ends a sequence; default: the tokenizer's EOS token."
    )
    max_new_tokens: int = Field(
        128, ge=1, description="New tokens when a request does not say (max_length)."
    )
    max_new_tokens_limit: int = Field(
        1024, ge=1, description="Most new tokens a request may ask for (4004 above)."
    )
    max_running: int = Field(
        16, ge=1, description="Most sequences decoded together in one step (continuous batch)."
    )
    max_kv_tokens: int = Field(
        32768,
        ge=16,
        description="Most tokens held in the KV cache over all running sequences, padding "
        "included; a waiting request joins when its prompt and output fit. An in-place decoder "
        "(`inferd export --kv-cache inplace`) holds context_length positions a row, allocated "
        "once for min(max_running, max_kv_tokens / context_length) rows.",
    )
    max_waiting: int = Field(
        256, ge=1, description="Most requests waiting to join the batch (4290 above)."
    )
    prefill_chunk: int = Field(
        4, ge=1, description="Most waiting requests admitted (prefilled) at one decode step."
    )
    inline_step_ms: float = Field(
        10.0,
        ge=0,
        description="Decode steps and prefills expected to take less than this (as the last "
        "ones ran) run on the event loop's own thread, between its other work, instead of "
        "being handed to a runtime thread and back: the handoff costs a quarter of a 1 ms "
        "step (a third of a 0.9 ms prefill), and the loop's work during a step on another "
        "thread made a 7 ms step 7% longer on two cores. Other requests then wait at most "
        "one step or prefill. 0: every step and prefill on a runtime thread.",
    )
    cache_placement: Literal["auto", "device", "host"] = Field(
        "auto",
        description="Where an in-place decoder's KV cache and drawn tokens live: device, the "
        "instance's own memory (on a GPU the cache never crosses the bus; a step copies its "
        "few small inputs in and its tokens out); host, numpy arrays that ONNX Runtime copies "
        "to the device and back at every step. auto: device, except for an FP32 cache on a "
        "GPU, whose attention (GroupQueryAttention) ONNX Runtime's CUDA provider runs in "
        "FP16 and BF16 only: it runs on the CPU, where a host cache saves copying the whole "
        "cache each step. The same memory on a CPU instance.",
    )
    block_steps: int = Field(
        4,
        ge=0,
        description="Decode steps run back to back without Python in between, where the "
        "decoder draws in its own graph (`inferd export` adds the draw), its KV cache is in "
        "place (`--kv-cache inplace`) and every running sequence's draw fits the graph's "
        "(top-k within its candidates, no repetition penalty): each step's tokens go straight "
        "back in as the next step's input, and are taken, streamed and counted once per "
        "block. A block ends early for a sequence's last token, within inline_step_ms "
        "when its steps run on the event loop's thread (a request waiting for a row waits for "
        "the block: shorter blocks let it join sooner), and on a runtime thread when a "
        "request arrives. 1: a step at a time, drawn in the graph; 0: a step at a time, "
        "drawn in Python (the graph's draw unused).",
    )
    scheduling: Literal["continuous", "static"] = Field(
        "continuous",
        description="continuous: requests join and leave the running batch at every step; "
        "static: a batch runs until its longest sequence ends (the baseline, for comparison).",
    )
    chat_template: str | None = Field(
        None,
        description="The Jinja template that turns `/v1/chat/completions` messages into a "
        "prompt (Hugging Face's form); default: `chat_template` in the model's "
        "tokenizer_config.json, else one `role: content` line per message.",
    )
    chat_content_special_tokens: bool = Field(
        False,
        description="Whether special tokens written in a chat message's content (`<|system|>`, "
        "`<|assistant|>`, `<|endoftext|>`...) act as the control tokens they name. Off, content "
        "is tokenized with its special tokens read as text: a user cannot open a system or "
        "assistant turn, nor end the text, by writing the token; only the chat template's "
        "own control tokens are control tokens. On only for clients trusted to write raw "
        "turns.",
    )


class RolloutConfig(_Strict):
    """How a new version is released beside the serving one (`inferd rollout start`): its
    share of traffic goes up step by step, each step judged on an analysis window."""

    steps: tuple[float, ...] = Field(
        (1, 5, 25, 50, 100),
        description="The candidate's share of traffic (percent) at each step; the last is 100.",
    )
    analysis_window_s: float = Field(
        60, gt=0, description="How long each step runs before it is judged."
    )
    min_requests: int = Field(
        50,
        ge=1,
        description="Requests each version needs in a window before it is judged; fewer: the "
        "step holds (and says so) until there are enough.",
    )
    max_error_rate_increase: float = Field(
        0.01,
        ge=0,
        le=1,
        description="The smallest rise of the candidate's share of failed requests (any error "
        "but shedding's 4290) over the stable version's worth a rollback: a larger one rolls "
        "back once it is beyond noise (see `significance`), at once when that is clear before "
        "the window ends.",
    )
    max_latency_ratio: float = Field(
        1.25,
        gt=0,
        description="The smallest ratio of the candidate's p99 latency, or median latency, to "
        "the stable version's (its baseline's) worth a rollback, once it is beyond noise "
        "(judged at the window's end).",
    )
    latency_slack_ms: float = Field(
        1,
        ge=0,
        description="A p99 latency difference under this never rolls back, whatever the ratio.",
    )
    max_queue_increase_ms: float = Field(
        50,
        ge=0,
        description="The smallest rise of the candidate's p99 queue time over the stable "
        "version's worth a rollback, once it is beyond noise (judged at the window's end).",
    )
    significance: float = Field(
        0.001,
        gt=0,
        lt=0.5,
        description="The chance each test may take of calling noise a difference (one-sided "
        "p-value under which a difference counts as evidence: Fisher's exact test on failures, "
        "the Mann-Whitney U test and a tail test on latency and queue time). Lower: fewer good "
        "candidates rolled back, more requests needed to roll back a bad one. A difference "
        "worth acting on but not yet beyond noise holds the step until more requests arrive.",
    )
    reference_percent: float = Field(
        5,
        gt=0,
        le=50,
        description="Share of traffic (percent) the stable version keeps at the last step "
        "(100) until the promotion, so that both versions are measured over the same window "
        "at every step.",
    )

    baseline: bool = Field(
        True,
        description="Load a second instance of the stable version (the baseline) beside the "
        "candidate; at every step where the candidate takes under half the traffic, the "
        "baseline takes as much as the candidate and the candidate is judged against it, not "
        "against the stable version (on shared cores a version's time per request depends on "
        "its share of the traffic). Costs one more copy of the stable version while the "
        "rollout runs; off (or when it does not load): judged against the stable version.",
    )
    auto: bool = Field(
        False,
        description="Start a rollout by itself when a version folder newer than the serving "
        "one appears (the repository is read every `repository_poll_s`); one that does not "
        "load is logged and never takes traffic.",
    )
    shadow_percent: float = Field(
        0,
        ge=0,
        le=100,
        description="Share of the stable version's requests also run on the candidate in the "
        "background, their answers compared (never delaying or failing the client's; skipped "
        "while anything waits in either version's queue). Each shadowed request is the "
        "candidate's work on top of the stable one's: a share, not all, under load.",
    )
    min_agreement: float = Field(
        0.95,
        ge=0,
        le=1,
        description="Rolled back when shadowed answers agree less than this on average (top "
        "label for classifiers, cosine for embeddings, tokens equal at each position for "
        "greedy generations, all outputs within `tensor_tolerance` for tensors); judged once "
        "a window has `min_requests` comparisons. With shadow_percent on, a step that still "
        "sends traffic to the stable version holds until it has that many.",
    )
    tensor_tolerance: float = Field(
        1e-3, ge=0, description="Largest difference of two tensor answers that still agree."
    )
    route_key_field: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$",
        description="A request field whose value keeps a client on one version for the whole "
        "rollout (as the `X-Inferd-Route-Key` header does, which wins when both are given): a "
        "top-level field of a task or OpenAI request (`user`, say; accepted there beside the "
        "route's own fields), or an entry of a V2 request's `parameters`. A string or an "
        "integer.",
    )

    @model_validator(mode="after")
    def _steps_rise_to_100(self) -> RolloutConfig:
        steps = self.steps
        if not steps or any(b <= a for a, b in itertools.pairwise(steps)):
            raise ValueError("steps must rise, each above the last")
        if steps[0] <= 0 or steps[-1] != 100:
            raise ValueError("steps must be above 0 and end at 100")
        return self


class ResponseCacheConfig(_Strict):
    enabled: bool = Field(
        False,
        description="Keep answers to repeated requests (V2 tensors, /embed, /predict, /rerank "
        "and their OpenAI and gRPC forms) and answer an identical request from memory; one "
        "identical to a request still running waits for its answer instead of running "
        "again. Generation is never cached.",
    )
    max_mb: float = Field(
        64.0,
        gt=0,
        description="Memory each serving version's cache holds at most (its answers' arrays); "
        "the least recently used answers go first.",
    )
    ttl_s: float = Field(300.0, gt=0, description="Longest an answer is kept, used or not.")


class ModelConfig(_Strict):
    name: str | None = Field(None, description="Defaults to the folder name.")
    platform: Literal["onnxruntime_onnx"] = Field(
        "onnxruntime_onnx", description="The only backend: ONNX Runtime."
    )
    max_batch_size: int = Field(
        8, ge=0, description="Largest batch the runtime gets; 0 means the model has no batch axis."
    )
    dynamic_batching: DynamicBatchingConfig = DynamicBatchingConfig()
    instance_count: int = Field(
        1,
        ge=1,
        description="ONNX Runtime sessions for each version, on the providers of `runtime` "
        "(give instance_groups instead to place them on devices).",
    )
    instance_groups: tuple[InstanceGroup, ...] = Field(
        (),
        description="Where each version's instances run: groups of cpu instances, and of gpu "
        "instances on given devices. Each batch goes to the instance that would finish it "
        "first (its measured speed and the work already given to it).",
    )
    solo_threads: int | Literal["auto"] = Field(
        0,
        description="An extra CPU instance with this many intra-op threads (auto: the cores "
        "this process may use) that takes a batch when it would run alone: no other batch "
        "running or waiting. A lone request then has every core, while under load the "
        "instances run side by side as configured. Its threads spin between runs (it runs "
        "only when nothing else does) unless runtime.allow_spinning is set. 0: none. CPU "
        "instances only.",
    )
    solo_inline_ms: float = Field(
        10.0,
        ge=0,
        description="A batch for the solo instance (solo_threads) expected to take under this "
        "runs on the event loop's own thread when the server holds no other request: no "
        "handoff to a runtime thread and back (0.1-0.4 ms a request on 2 cores). The loop "
        "waits for the run, so a request arriving meanwhile is read after it. 0: always on a "
        "runtime thread.",
    )
    runtime: RuntimeOptions = RuntimeOptions()
    version_policy: VersionPolicy = VersionPolicy()
    inputs: tuple[TensorOverride, ...] = Field(
        (), description="Overrides for inputs (pad values, datatypes, shapes); see below."
    )
    outputs: tuple[TensorOverride, ...] = Field((), description="Overrides for outputs.")
    request_timeout_s: float | None = Field(
        None, gt=0, description="Deadline for this model's requests; the server's when unset."
    )
    warmup_batch_sizes: tuple[int, ...] = Field(
        (1,), description="Synthetic batches run before a version is marked ready."
    )
    task: TaskName = Field(
        "tensor",
        description="; ".join(f"{k.name}: {k.description}" for k in KINDS.values()) + ".",
    )
    tokenizer: TokenizerConfig = TokenizerConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    classification: ClassificationConfig = ClassificationConfig()
    zero_shot: ZeroShotConfig | None = Field(
        None, description="Required for task zero-shot-classification."
    )
    generation: GenerationConfig = GenerationConfig()
    rerank: RerankConfig = RerankConfig()
    drift: DriftConfig = DriftConfig()
    rollout: RolloutConfig = RolloutConfig()
    response_cache: ResponseCacheConfig = ResponseCacheConfig()
    max_texts_per_request: int = Field(
        128, ge=1, description="Most texts one request may carry (4005 above)."
    )
    default: bool = Field(
        False,
        description="Answer the task routes that name no model (`/predict`, `/embed`, "
        "`/generate`, `/v1/...`) when several models serve the task; one default per task.",
    )
    residency: Literal["pinned", "on_demand"] = Field(
        "pinned",
        description="pinned: loaded at start and kept until an admin unloads it. on_demand: "
        "loaded by its first request (requests arriving meanwhile wait for that load within "
        "their deadlines) and evicted, least recently used first, when a load would take the "
        "versions in memory over the server's model_memory_budget_mb or max_loaded_versions; "
        "never while a request to it is in flight or queued, or while it is in a rollout. A "
        "zero-shot model's base is kept like a pinned one.",
    )

    @model_validator(mode="after")
    def _unique_overrides(self) -> ModelConfig:
        for kind, items in (("inputs", self.inputs), ("outputs", self.outputs)):
            names = [t.name for t in items]
            if len(names) != len(set(names)):
                raise ValueError(f"{kind} names must be unique")
        if any(o.pad_value is not None for o in self.outputs):
            raise ValueError("pad_value applies to inputs only")
        if (self.kind.loads == "base") != (self.zero_shot is not None):
            raise ValueError("zero_shot is required for, and only for, zero-shot-classification")
        if self.default and self.kind.purpose is None:
            raise ValueError("default applies to task models (tensor models are always named)")
        if self.instance_groups and "instance_count" in self.model_fields_set:
            raise ValueError("give instance_count or instance_groups, not both")
        if isinstance(self.solo_threads, int) and self.solo_threads < 0:
            raise ValueError("solo_threads must be 0 (none), a thread count, or auto")
        return self

    @property
    def kind(self) -> Kind:
        """What its task makes of it (inferd.config.kinds)."""
        return KINDS[self.task]

    @property
    def purpose(self) -> str | None:
        """The task route that can answer with this model when a request names none."""
        return self.kind.purpose

    @property
    def needs_versions(self) -> bool:
        """A model built over a base (zero-shot) has no file of its own: it uses its base's."""
        return self.kind.needs_versions
