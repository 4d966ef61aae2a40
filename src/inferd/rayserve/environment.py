"""The environment a Ray node is started with for inferd (`ray start`, in `inferd ray serve`'s
own cluster and in the tests' local clusters): Serve's direct ingress, and Ray's
authentication variables, which a node passes on to the processes it starts. Imports nothing
of Ray."""

from __future__ import annotations

DIRECT_INGRESS_ENV = {
    "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
}
"""Set in the environment of `ray start` (every node) for Serve's direct ingress: HAProxy on
the HTTP port, routing to the replicas' own servers."""
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
"""Ray's token authentication: set on every node of a cluster, or on none."""
