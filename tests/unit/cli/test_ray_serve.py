"""What `inferd ray serve` gives the environment of a local cluster of its own."""

from __future__ import annotations

from inferd.cli.ray_serve import DRAINING_PERIOD_ENV, local_cluster_env


def test_a_local_cluster_has_token_authentication_with_a_token_of_its_own() -> None:
    first, second = local_cluster_env({}), local_cluster_env({})
    assert first["RAY_AUTH_MODE"] == "token"
    assert (
        len(first["RAY_AUTH_TOKEN"]) == 64 and first["RAY_AUTH_TOKEN"] != second["RAY_AUTH_TOKEN"]
    )
    assert "RAY_AUTH_TOKEN_PATH" not in first  # (nothing written: the token is in the environment)
    assert first["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"  # on loopback
    assert first[DRAINING_PERIOD_ENV] == "2.0"
    assert first["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"


def test_a_choice_made_in_the_environment_is_kept() -> None:
    for chosen in (
        {"RAY_AUTH_MODE": "disabled"},
        {"RAY_AUTH_TOKEN": "mine"},
        {"RAY_AUTH_TOKEN_PATH": "/secrets/ray"},
    ):
        env = local_cluster_env(chosen)
        assert not {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} & set(env), (chosen, env)
    assert local_cluster_env({DRAINING_PERIOD_ENV: "30"})[DRAINING_PERIOD_ENV] == "30"


def test_a_local_cluster_routed_by_model_has_serves_proxy_not_haproxy() -> None:
    """HAProxy (direct ingress) does not read `serve_multiplexed_model_id`; Serve's proxy does."""
    env = local_cluster_env({}, multiplex=True)
    assert "RAY_SERVE_ENABLE_DIRECT_INGRESS" not in env
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in env
    assert env["RAY_AUTH_MODE"] == "token"  # the rest as without it
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
