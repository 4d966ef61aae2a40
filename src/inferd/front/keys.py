"""API keys: Bearer tokens for inference, separate admin keys for what changes server state;
the one rule every protocol applies with them (inferd.server.auth over HTTP, the gate of
inferd.grpc_v2 over gRPC), and whose request it is (`Keys.client_for`: inferd.clients).

Keys come from files, never from command lines where `ps` would show them. A line is a key,
alone or followed by its client's settings (docs/operations.md, "Clients and their keys"):

    sk-0f3a...                                       # a bare key: a client of its own
    sk-9b1c...  name=alice weight=2 priority=high loads_per_minute=12 load_burst=4

Keys are compared in constant time. Without admin keys, admin actions are refused outright.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.clients import Client, Priority, address_client
from inferd.errors import ConfigError, ForbiddenError, InferdError, UnauthorizedError

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
"""A client's name: no `:`, so that no key's name is taken for an address's (`addr:...`) or
for an unnamed key's (`key:...`)."""
RESERVED_NAMES = frozenset({"anonymous"})
MAX_WEIGHT = 1000.0
PRIORITIES = {p.name.lower(): p for p in Priority}


@dataclass(frozen=True)
class ApiKey:
    """A key of the keys file and the client it identifies."""

    token: bytes
    client: Client
    line: int
    """Its line in the file (for messages; 0 when it came from no file)."""


def read_keys(path: Path | None) -> tuple[ApiKey, ...]:
    """The keys of the file at `path` (none for None); ConfigError, naming the file and the
    line, for a file that cannot be read, holds no key, or a setting that is not valid."""
    if path is None:
        return ()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else None
        raise ConfigError(f"{path}: cannot read the key file: {why or exc}") from exc
    keys = parse_keys(lines, str(path))
    if not keys:
        raise ConfigError(f"{path}: the key file holds no key")
    return keys


def parse_keys(lines: Sequence[str], source: str) -> tuple[ApiKey, ...]:
    """The keys of a keys file's `lines`; `source` names the file in messages. Blank lines
    and lines starting with `#` are skipped."""
    keys: list[ApiKey] = []
    by_token: dict[bytes, ApiKey] = {}
    by_name: dict[str, ApiKey] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}, line {number}"
        token, *settings = line.split()
        key = ApiKey(token.encode(), _client(token, settings, where), number)
        same = by_token.get(key.token)
        if same is not None:
            if same.client != key.client:
                raise ConfigError(f"{where}: the same key as line {same.line}, with other settings")
            continue
        namesake = by_name.get(key.client.name)
        if namesake is not None and namesake.client != key.client:
            # two keys of one client (a key being rotated): one client, one set of settings
            raise ConfigError(
                f"{where}: client '{key.client.name}' is named on line {namesake.line} "
                "with other settings; the keys of one client carry the same settings"
            )
        by_token[key.token] = by_name[key.client.name] = key
        keys.append(key)
    return tuple(keys)


def _client(token: str, settings: list[str], where: str) -> Client:
    values: dict[str, Any] = {"name": _unnamed(token)}
    seen: set[str] = set()
    for setting in settings:
        field, equals, value = setting.partition("=")
        if not equals or not field:
            raise ConfigError(
                f"{where}: '{_shown(setting)}' is not a setting: after the key, settings are "
                f"name=value, separated by spaces ({', '.join(SETTINGS)})"
            )
        parse = SETTINGS.get(field)
        if parse is None:
            raise ConfigError(
                f"{where}: unknown setting '{_shown(field)}'; known: {', '.join(SETTINGS)}"
            )
        if field in seen:
            raise ConfigError(f"{where}: '{field}' is given twice")
        seen.add(field)
        try:
            values[field] = parse(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {field}={_shown(value)}: {exc}") from None
    return Client(keyed=True, **values)


def _unnamed(token: str) -> str:
    """The name of a key without `name=`: a short hash of it, never the key."""
    return "key:" + hashlib.sha256(token.encode()).hexdigest()[:12]


def _name(value: str) -> str:
    if not NAME.fullmatch(value):
        raise ValueError(
            "a name is 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter "
            "or digit"
        )
    if value in RESERVED_NAMES:
        raise ValueError(f"'{value}' is reserved (the client of unattributed work)")
    return value


def _number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    return number


def _weight(value: str) -> float:
    weight = _number(value)
    if not 0 < weight <= MAX_WEIGHT:
        raise ValueError(f"a weight is more than 0 and at most {MAX_WEIGHT:g}")
    return weight


def _priority(value: str) -> Priority:
    priority = PRIORITIES.get(value.lower())
    if priority is None:
        raise ValueError(f"a priority is one of {', '.join(PRIORITIES)}")
    return priority


def _loads_per_minute(value: str) -> float:
    rate = _number(value)
    if rate < 0:
        raise ValueError("at least 0 (0: no limit)")
    return rate


def _load_burst(value: str) -> int:
    try:
        burst = int(value)
    except ValueError:
        raise ValueError("not a whole number") from None
    if burst < 1:
        raise ValueError("at least 1")
    return burst


SETTINGS: dict[str, Callable[[str], object]] = {
    "name": _name,
    "weight": _weight,
    "priority": _priority,
    "loads_per_minute": _loads_per_minute,
    "load_burst": _load_burst,
}
"""What may follow a key, and how each value is read."""


def _shown(text: str) -> str:
    """A piece of a keys-file line as a message shows it: short (it may be part of a key)."""
    return text if len(text) <= 40 else text[:37] + "..."


def _match(presented: bytes, keys: Sequence[ApiKey]) -> ApiKey | None:
    found = None
    for key in keys:  # no early exit: the time taken does not depend on which key matched
        if hmac.compare_digest(presented, key.token):
            found = key
    return found


class Keys:
    """The server's API and admin keys, and the one rule every protocol applies with them."""

    def __init__(self, api_keys: Sequence[ApiKey], admin_keys: Sequence[ApiKey]) -> None:
        self.api_keys = tuple(api_keys)
        self.admin_keys = tuple(admin_keys)

    def refusal(self, admin: bool, presented: bytes | None) -> InferdError | None:
        """Why a request with the bearer token `presented` (None: none) may not go on; None
        when it may. Inference needs an API key when the server has any; admin actions
        always need an admin key, and are off when the server has none."""
        keys = self.admin_keys if admin else self.api_keys
        if not admin and not keys:
            return None
        if admin and not keys:
            return ForbiddenError("admin routes are off: the server has no admin keys")
        if not presented or _match(presented, keys) is None:
            what = "an admin key" if admin else "an API key"
            return UnauthorizedError(f"this route needs {what}: Authorization: Bearer <key>")
        return None

    def client_for(self, token: bytes | None, address: str | None) -> Client:
        """Whose request it is: the client of the API key `token` when the server has API
        keys and it is one (compared in constant time); else the peer `address`'s
        (`addr:<ip>`: on a server with keys, a request without a valid key is refused 4010
        in any case)."""
        if token and self.api_keys:
            key = _match(token, self.api_keys)
            if key is not None:
                return key.client
        return address_client(address)


def bearer(authorization: bytes | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` value."""
    if authorization is None or authorization[:7].lower() != b"bearer ":
        return None
    return authorization[7:].strip() or None
