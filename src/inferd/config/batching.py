"""A model's `dynamic_batching` section: how its requests are queued and batched."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inferd.config.section import Section


class DynamicBatchingConfig(Section):
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
        "the queued work ahead of it (at the queue's measured drain) says would wait more "
        "than 0.8 of it is refused 429 (code 4290) as it arrives (the rest: a margin for the "
        "estimate), before its body is read where the route allows, with a `Retry-After` from "
        "the queue's work; one that waited longer all the same is answered 429 then. The work "
        "ahead of a request is its client's: while other clients (API keys, or addresses "
        "without keys) are queued, what the fair order serves before it, so a client that "
        "floods is refused while one within its share is admitted. A client that comes back "
        "before its `Retry-After` has its next refusal held back until then, and longer each "
        "time it does so again in a row (4 s at most). "
        "The bound in force is never below 16 measured runs of a request alone, and nothing "
        "is shed while fewer than 8 requests are queued, so that a slow model, or a burst of "
        "large requests, is queued rather than shed. 500 by default, as a latency-sensitive "
        "service would choose: its callers' budget for a whole answer is about a second, "
        "half of it queued leaves the run and the network the rest, and a request refused at "
        "once can still be retried on another replica within that budget. null: no bound "
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
