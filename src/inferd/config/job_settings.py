"""The job queue's settings (`/v1/jobs`: where jobs are kept, how many, how long, how they
run), a part of `ServerSettings`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class JobSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    jobs_redis_url: str | None = Field(
        None,
        description="Redis holding the job queue (`POST /v1/jobs`), e.g. redis://host:6379/0: "
        "every inferd process given the same URL shares the jobs, and a process that stops "
        "mid-job loses nothing. Unset: jobs are kept in this process only.",
    )
    jobs_redis_prefix: str = Field(
        "inferd-jobs",
        min_length=1,
        description="The prefix of the job queue's Redis keys (one queue per prefix).",
    )
    jobs_max_queued: int = Field(
        10000, ge=1, description="Jobs waiting and running at most; over it, 429 (code 4290)."
    )
    jobs_max_queued_mb: float = Field(
        256.0,
        gt=0,
        description="The bodies of the jobs waiting and running, in MB, at most; over it, 429 "
        "(code 4290).",
    )
    jobs_concurrency: int = Field(
        1,
        ge=1,
        description="Jobs this process runs at once. A job starts only while no interactive "
        "request waits in a queue, and runs at the runtimes' background priority.",
    )
    jobs_max_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="The share of the time jobs may work while clients' requests come: a job "
        "whose work (preprocessing, inference, postprocessing) took t seconds is followed by "
        "t * (1/share - 1) seconds without one. With no client request for a second, jobs run "
        "back to back. 1: no limit.",
    )
    jobs_result_ttl_s: float = Field(
        86400.0, gt=0, description="How long a finished job's answer is kept."
    )
    jobs_max_results: int = Field(
        100000,
        ge=1,
        description="Finished jobs' answers kept at most (the request bodies are not kept); "
        "while as many are kept, a new job is 429 (code 4290) until some expire.",
    )
    jobs_max_results_mb: float = Field(
        512.0,
        gt=0,
        description="The kept answers' bytes, in MB, at most; while they hold as much, a new "
        "job is 429 (code 4290), and an answer that would not fit fails its job (5030).",
    )
    jobs_max_result_mb: float = Field(
        16.0,
        gt=0,
        description="One job's answer, in MB, at most; a larger answer fails its job (4005).",
    )
    jobs_key_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="With API keys: the share of jobs_max_results and jobs_max_results_mb the "
        "jobs of one key may hold, so that one key cannot fill the store. 1: no bound per key.",
    )
    jobs_claim_after_s: float = Field(
        30.0,
        gt=0,
        description="Redis: a job whose worker has not renewed its claim for this long (the "
        "process died) is taken by another worker. Workers renew every third of it.",
    )
    jobs_max_attempts: int = Field(
        3,
        ge=1,
        description="Times a job may be begun (its worker stopping mid-job each time) before "
        "it is failed with 5000.",
    )
    jobs_callback_hosts: str = Field(
        "",
        description="Comma-separated hosts (or host:port) a job's callback_url may name; "
        "empty: callbacks are off.",
    )
