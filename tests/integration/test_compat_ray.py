"""What inferd's replicas rely on of Ray Serve's private state (inferd.compat.ray_internals),
checked on the Ray installed: a failure here names what an upgrade moved. (In the slow tier:
it imports Ray. The multiplexing itself runs for real in test_ray.py.)"""

from __future__ import annotations

import inspect
import re

import ray
from ray.serve import api, multiplex

from inferd.compat.ray_internals import PUSH, WRAPPER, WRITTEN_FOR, MultiplexedIds, multiplexed_ids


def test_the_installed_ray_is_the_series_it_was_written_for() -> None:
    assert ray.__version__.startswith(WRITTEN_FOR + "."), (
        f"inferd.compat.ray_internals was written for Ray {WRITTEN_FOR}, and Ray {ray.__version__} "
        "is installed: check the contract below, then update WRITTEN_FOR and the pin in "
        "pyproject.toml"
    )


def test_serve_keeps_its_multiplex_wrapper_where_inferd_reads_it() -> None:
    assert WRAPPER in inspect.getsource(api.multiplexed), (
        f"serve.multiplexed no longer keeps its wrapper in {WRAPPER}"
    )
    init = inspect.getsource(multiplex._ModelMultiplexWrapper.__init__)
    assert re.search(rf"self\.{PUSH}\s*[:=]", init), f"the wrapper no longer sets {PUSH}"
    assert re.search(r"self\.models\s*[:=]", init), "the wrapper no longer keeps `models`"
    pushing = inspect.getsource(multiplex._ModelMultiplexWrapper)
    assert re.search(rf"if\s+self\.{PUSH}", pushing), f"the wrapper no longer reads {PUSH}"


def test_the_ha_proxy_constant_is_where_inferd_reads_it() -> None:
    from ray.serve._private import constants

    assert isinstance(constants.RAY_SERVE_ENABLE_HA_PROXY, bool)


def test_ids_before_any_request_and_with_another_wrapper() -> None:
    def registered(model_id: str) -> str:
        return model_id

    assert multiplexed_ids(registered) is None

    class Wrapper:  # what Serve keeps, as inferd reads it
        def __init__(self) -> None:
            self.models: dict[str, str] = {"a": "a"}
            setattr(self, PUSH, False)

    setattr(registered, WRAPPER, Wrapper())
    found = multiplexed_ids(registered)
    assert isinstance(found, MultiplexedIds) and list(found.ids) == ["a"]
    found.push()
    assert getattr(getattr(registered, WRAPPER), PUSH) is True
    setattr(registered, WRAPPER, object())  # another Ray's: said, not pushed into the void
    try:
        multiplexed_ids(registered)
    except AttributeError as exc:
        assert PUSH in str(exc)
    else:
        raise AssertionError("a wrapper without the push flag was taken")
