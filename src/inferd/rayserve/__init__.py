"""inferd on Ray Serve: each replica is an inferd engine behind Serve's proxy (replica.py),
scaled on inferd's queue depth (policy.py), deployed by `inferd ray serve` or `deploy`
(deploy.py). Needs the `ray` extra."""
