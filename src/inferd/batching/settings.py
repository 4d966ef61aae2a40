"""`BatcherSettings`: how one version's batcher behaves, from the model's configuration."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatcherSettings:
    """How one version's batcher behaves. Its values come from the model's configuration (the
    engine builds them from `dynamic_batching`, whose defaults are the only ones); the batcher
    restates none of them."""

    max_batch_size: int
    """Rows per batch; 0 for a model without a batch axis (one request per run)."""
    max_queue_delay_s: float
    preferred_batch_sizes: tuple[int, ...]
    max_queue_size: int
    max_padding_waste: float
    max_batch_tokens: int | None
    """Cap on a batch's padded tokens (rows x padded length of the first padded input)."""
    length_grouping: bool
    """Gather items of similar length into a batch (oldest item first, nearest lengths next)."""
    concurrency: int
    """Batches that may run at once (the runtime's instance count)."""
    oom_cooldown_s: float
    """After an out-of-memory failure, time before the lowered batch size limit grows again."""
    max_consecutive_failures: int
    """Single-item runtime failures in a row after which the batcher calls itself unhealthy."""
    max_queue_time_s: float | None = None
    """Longest a client's item may wait in the queue (never below `QUEUE_TIME_FLOOR_RUNS`
    measured runs of a request alone, inferd.batching.queue_admission): one the queue's work says
    would wait longer is refused 4290 when it arrives, and one that waited longer is answered
    4290 (background items are exempt). None: no bound."""
    learn_batch_tokens: bool = True
    """Cap batches at the size that costs least per token, learned from run times
    (inferd.batching.sizing); False: only max_batch_size and max_batch_tokens cap them."""
    queue_lanes: int = 1
    """Runtimes that can run at once on cores of their own (instances on the CPU: their count,
    at most the cores); over 1, a client batch formed while another runs takes at most its
    share of the queued rows (queued rows over the lanes, rounded up) and leaves the rest to
    the runtimes that free up next: on a CPU a batch's cost a row barely falls with its
    size, and one single-threaded instance given the whole queue ran it in turn while the
    other cores found nothing to run."""
    model: str = ""
    version: str = ""
    """Whose batcher this is: in log lines and observer events."""
    scan_window: int = 8
    """Batch formation looks at up to scan_window x max_batch_size queued items (the
    batcher's own bound on its work per batch, not a model setting)."""

    @property
    def label(self) -> str:
        return f"{self.model}/{self.version}"
