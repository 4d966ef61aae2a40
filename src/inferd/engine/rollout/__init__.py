"""Rollouts: a candidate version beside the stable one, its share of traffic raised step by
step, each step judged against the stable version over the same window; promoted when the
last step passes, rolled back when one fails.

- `policy`: which versions serve a model (the one place every path asks);
- `store`: the rollout records on disk, validated on read;
- `router`: the hot path (routing, windows, shadow traffic);
- `judge` and `statistics`: pure functions from two samples to pass, fail or hold;
- `watcher`: new version folders that start a rollout by themselves;
- `controller`: the admin's actions and the judging loop;
- `decisions`: each decision, recorded, logged and counted;
- `view`: what the status page and the admin are shown of a rollout.
"""

from inferd.engine.rollout.controller import Rollouts
from inferd.engine.rollout.policy import ServingPolicy
from inferd.engine.rollout.router import unit_hash
from inferd.engine.rollout.state_files import STATE_FOLDER, Status

__all__ = ["STATE_FOLDER", "Rollouts", "ServingPolicy", "Status", "unit_hash"]
