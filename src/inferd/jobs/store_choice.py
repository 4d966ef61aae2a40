"""The job store the settings choose: this process's (no `jobs_redis_url`), or Redis Streams
shared by every process that names the same Redis (the `redis` extra)."""

from __future__ import annotations

from inferd.config.server_settings import ServerSettings
from inferd.jobs.store import JobStore, ProcessJobStore, QueueBound, ResultBound
from inferd.observability.observer import JobsLost, Observer, notify


def open_store(settings: ServerSettings, observer: Observer) -> JobStore:
    bound = QueueBound(settings.jobs_max_queued, int(settings.jobs_max_queued_mb * 1e6))
    results = ResultBound(
        settings.jobs_max_results,
        int(settings.jobs_max_results_mb * 1e6),
        int(settings.jobs_max_result_mb * 1e6),
        settings.jobs_key_share,
    )
    if settings.jobs_redis_url is None:
        return ProcessJobStore(bound, settings.jobs_result_ttl_s, results)
    try:
        from inferd.jobs.redis_store import RedisJobStore
    except ImportError as exc:
        raise RuntimeError(
            f"jobs_redis_url needs the redis extra: pip install 'inferd[redis]' ({exc})"
        ) from exc
    return RedisJobStore(
        settings.jobs_redis_url,
        settings.jobs_redis_prefix,
        bound,
        settings.jobs_result_ttl_s,
        settings.jobs_claim_after_s,
        results,
        lambda count: notify(observer, JobsLost(count)),
    )
