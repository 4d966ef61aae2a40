"""Ray Serve autoscaling on inferd's own queue: the replicas report the items waiting in their
queues (`record_autoscaling_stats` of the replica), and the deployment wants as many replicas
as keep each one's queue at the target, as the Kubernetes HPA on `inferd_queue_depth` does.
Serve applies min/max, the up and down delays and the scaling factors around it."""

from __future__ import annotations

from typing import Any

QUEUE_METRIC = "inferd_queue_depth"
"""Items waiting in a replica's queues (all its models), as /metrics names it."""


class QueueDepthPolicy:
    def __init__(self, target: float = 3.0) -> None:
        """`target`: items waiting per replica (docs/capacity.md derives it from inferd bench)."""
        if target <= 0:
            raise ValueError("the queue target must be above 0")
        self.target = target

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        """Serve's policy call: `ctx` is its AutoscalingContext; returns the wanted replicas
        (a float: Serve rounds and bounds it) and the policy's state (none)."""
        depths = (ctx.aggregated_metrics or {}).get(QUEUE_METRIC, {})
        if ctx.current_num_replicas == 0 or not depths:
            return ctx.target_num_replicas, {}
        waiting = sum(depths.values())
        return desired_replicas(waiting, self.target), {}


def desired_replicas(waiting: float, target: float) -> float:
    """As many replicas as hold `waiting` items at `target` each (0 when nothing waits:
    Serve keeps min_replicas)."""
    return max(waiting, 0.0) / target
