"""The bounds every metric of inferd keeps: histogram buckets, and the label values that stand
for a model that is not one of the repository's (so that a client cannot grow a label's values)."""

from __future__ import annotations

SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LENGTH_BUCKETS = (4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
CONFIDENCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
UNKNOWN = "_unknown"
"""A model (or a predicted label) that is not one of ours."""
NO_MODEL = ""
"""A request about no model (server metadata, probes)."""
