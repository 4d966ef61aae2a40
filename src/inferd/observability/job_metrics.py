"""The metrics of asynchronous jobs: runs by outcome and their time, the queue's depth, and the
jobs a shared store lost."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferd.observability.metric_bounds import SECONDS_BUCKETS
from inferd.observability.observer import JobEnded, JobsLost, JobsWaiting


class JobMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.runs = Counter(
            "inferd_jobs",
            "Job runs by outcome: succeeded, failed (its route answered an error), requeued "
            "(its route was shedding or draining)",
            ["outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "inferd_job_duration_seconds",
            "Time a job ran in a worker",
            buckets=SECONDS_BUCKETS,
            registry=registry,
        )
        self.waiting = Gauge(
            "inferd_jobs_queued",
            "Jobs waiting or running in the job queue (all processes sharing it)",
            registry=registry,
        )
        self.lost = Counter(
            "inferd_jobs_lost",
            "Jobs the job store lost (Redis came back without its data): those it held, waiting, "
            "running or answered, when last read; counted by the process that found the loss",
            registry=registry,
        )

    def on_job(self, event: JobEnded) -> None:
        self.runs.labels(event.outcome).inc()
        if event.outcome != "requeued":
            self.duration.observe(event.seconds)

    def on_jobs_waiting(self, event: JobsWaiting) -> None:
        self.waiting.set(event.depth)

    def on_jobs_lost(self, event: JobsLost) -> None:
        self.lost.inc(event.count)
