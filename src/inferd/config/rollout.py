"""A model's `rollout` section: how a new version is released beside the serving one."""

from __future__ import annotations

import itertools

from pydantic import Field, model_validator

from inferd.config.section import Section


class RolloutConfig(Section):
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
