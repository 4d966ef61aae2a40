"""What inferd's bounded HTTP protocol relies on of uvicorn's private httptools protocol
(inferd.compat.uvicorn_http), checked on the uvicorn installed: a failure here names what an
upgrade moved, before any request meets it."""

from __future__ import annotations

import inspect
import re

import uvicorn
from uvicorn.server import ServerState

from inferd.compat.uvicorn_http import (
    ATTRIBUTES,
    CYCLE_PARAMETERS,
    HOOKS,
    WRITTEN_FOR,
    HttpToolsProtocol,
    RequestResponseCycle,
)


def test_the_installed_uvicorn_is_the_series_it_was_written_for() -> None:
    assert uvicorn.__version__.startswith(WRITTEN_FOR + "."), (
        f"inferd.compat.uvicorn_http was written for uvicorn {WRITTEN_FOR}, and uvicorn "
        f"{uvicorn.__version__} is installed: check the contract below, then update WRITTEN_FOR "
        "and the pin in pyproject.toml"
    )


def test_the_hooks_the_subclass_overrides_are_the_protocols() -> None:
    missing = [name for name in HOOKS if not callable(getattr(HttpToolsProtocol, name, None))]
    assert missing == [], f"uvicorn's HttpToolsProtocol no longer has {missing}"
    for name in HOOKS:  # the subclass calls each with the same arguments
        parameters = list(inspect.signature(getattr(HttpToolsProtocol, name)).parameters)
        assert parameters[0] == "self", name


def test_the_attributes_the_subclass_reads_are_set_by_the_protocol() -> None:
    source = inspect.getsource(HttpToolsProtocol)
    missing = [a for a in ATTRIBUTES if not re.search(rf"self\.{a}\s*[:=]", source)]
    assert missing == [], f"uvicorn's HttpToolsProtocol no longer sets {missing}"
    assert isinstance(ServerState().default_headers, list)


def test_the_request_cycle_is_built_as_the_subclass_builds_it() -> None:
    parameters = inspect.signature(RequestResponseCycle.__init__).parameters
    missing = [p for p in CYCLE_PARAMETERS if p not in parameters]
    assert missing == [], f"uvicorn's RequestResponseCycle no longer takes {missing}"
    required = [
        name
        for name, p in parameters.items()
        if name != "self" and p.default is inspect.Parameter.empty and name not in CYCLE_PARAMETERS
    ]
    assert required == [], f"uvicorn's RequestResponseCycle now needs {required}"
    assert re.search(r"self\.response_complete\s*[:=]", inspect.getsource(RequestResponseCycle))
