"""Server settings about clients: the keys that identify them, and what each may cause.

The base of `ServerSettings` (inferd.config.server_settings): its fields are server settings
like the others (a YAML key, an `INFERD_*` variable, a flag). A key's own settings (its line in the
keys file: inferd.front.keys) win over the defaults here.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class ClientSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    api_keys_file: Path | None = Field(
        None,
        description="File of API keys, one per line: inference and metadata routes then need "
        "`Authorization: Bearer <key>`. Probes and /metrics stay open. After a key, its "
        "client's settings may follow: name=, weight=, priority=, loads_per_minute=, "
        "load_burst= (docs/operations.md, API keys and their clients).",
    )
    admin_keys_file: Path | None = Field(
        None,
        description="File of admin keys for routes that change state (repository load and "
        "unload); without it those routes are off.",
    )
    client_loads_per_minute: float = Field(
        6.0,
        ge=0,
        description="On-demand loads one client (an API key, or a client address on a server "
        "without keys) may cause a minute, on average: a request whose on_demand model is "
        "neither in memory nor loading takes one from its client's bucket of "
        "client_load_burst; with none left it is refused 429 (code 4291) with Retry-After. A "
        "key's own loads_per_minute (keys file) wins. The default, one every 10 s, bounds "
        "the loads and evictions a client churning models can force (a load costs a model's "
        "file read, session and warm-up: half a second of a core for the demo's minilm, and "
        "may evict another client's model). 0: no limit.",
    )
    client_load_burst: int = Field(
        3,
        ge=1,
        description="On-demand loads one client may cause at once before "
        "client_loads_per_minute paces it (a key's own load_burst wins): a client that turns "
        "to a few cold models gets them without waiting.",
    )
