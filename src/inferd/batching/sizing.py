"""The largest batch worth forming, learned from the runtime's own run times.

A bigger batch is not always cheaper per token: on a CPU, a batch whose activations outgrow
the caches costs more per token than a smaller one (docs/operations.md has what that was
worth on a BERT-base-sized encoder: a quarter more requests a second). The sizer keeps each
batch size's cost per padded token (buckets of powers of two, a moving average of run time /
tokens) and caps the batches at the largest bucket within `TOLERANCE` of the cheapest. It
learns only from batches formed under pressure (more than one item waiting and every other
instance busy, so that every measured batch shared the cores alike), and now and then
(`PROBE_EVERY` such batches) it forms one batch a bucket smaller or larger than the cap,
alternately, so that it finds a better size and follows the machine when it changes. With
no pressure the cap never binds: batches are as large as the queue is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TOLERANCE = 0.1
"""A bucket within this share of the cheapest bucket's cost per token counts as cheap as it."""
PROBE_EVERY = 8
"""One batch in this many formed under pressure tries a neighbouring size."""
PROBE_DEPTH = 3
"""Probes below the cap go at most this many buckets down (8x smaller batches): far enough to
cross a stretch of equal costs, not so far that a probe costs much."""
ALPHA = 0.3
"""Weight of a new batch in its bucket's moving average."""
MIN_BATCHES = 2
"""Batches a bucket needs before it counts (one probe alone is too noisy to move the cap)."""


def bucket_of(tokens: int) -> int:
    """The bucket of a batch of `tokens` padded tokens: k with 2**(k-1) < tokens <= 2**k."""
    return max(0, math.ceil(math.log2(max(tokens, 1))))


@dataclass
class _Cost:
    per_token_s: float
    batches: int


class BatchSizer:
    """One batcher's learned cap (see the module's docstring)."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        """The configured cap (max_batch_tokens); the learned one never exceeds it."""
        self._costs: dict[int, _Cost] = {}
        self._cap: int | None = None
        """The learned cap's bucket; None: not learned (the configured limit holds)."""
        self._pressured = 0
        self._probe_down = False

    @property
    def cap_tokens(self) -> int | None:
        """The cap batches are formed under now (learned or configured; None: none)."""
        if self._cap is None:
            return self._limit
        learned = 1 << self._cap
        return learned if self._limit is None else min(learned, self._limit)

    def next_cap(self) -> int | None:
        """The cap for the next batch formed under pressure: every `PROBE_EVERY`th probes,
        alternately, the bucket just below the cheap ones (so that a stretch of equal costs
        is crossed, down to `PROBE_DEPTH` below the largest) and the one just above them."""
        self._pressured += 1
        if not self._costs or self._pressured % PROBE_EVERY:
            return self.cap_tokens
        known = self._known()
        cheap = _cheap(known) if known else list(self._costs)
        self._probe_down = not self._probe_down
        if self._probe_down:
            probe = max(0, min(cheap) - 1, max(cheap) - PROBE_DEPTH)
        else:
            probe = max(cheap) + 1
        tokens = 1 << probe
        return tokens if self._limit is None else min(tokens, self._limit)

    def observe(self, tokens: int, run_s: float) -> None:
        """A batch formed under pressure ran `tokens` padded tokens in `run_s`."""
        if tokens <= 0 or run_s <= 0:
            return
        k = bucket_of(tokens)
        per_token = run_s / tokens
        cost = self._costs.get(k)
        if cost is None:
            self._costs[k] = _Cost(per_token, 1)
        else:
            cost.per_token_s += ALPHA * (per_token - cost.per_token_s)
            cost.batches += 1
        self._choose()

    def _known(self) -> dict[int, float]:
        """Each bucket's cost per token, of the buckets with `MIN_BATCHES`."""
        return {k: c.per_token_s for k, c in self._costs.items() if c.batches >= MIN_BATCHES}

    def _choose(self) -> None:
        known = self._known()
        if not known:
            return
        cheap = _cheap(known)
        # the largest bucket measured is as cheap as any: no cap (a larger may be cheaper still)
        self._cap = None if max(cheap) == max(known) else max(cheap)

    def state(self) -> dict[str, object]:
        """For the logs: the cap, and each bucket's cost per token (keyed by its largest batch)."""
        return {
            "cap_tokens": self.cap_tokens,
            "us_per_token": {
                str(1 << k): round(c.per_token_s * 1e6, 3) for k, c in sorted(self._costs.items())
            },
        }


def _cheap(known: dict[int, float]) -> list[int]:
    """The buckets within `TOLERANCE` of the cheapest."""
    cheapest = min(known.values())
    return [k for k, cost in known.items() if cost <= cheapest * (1 + TOLERANCE)]
