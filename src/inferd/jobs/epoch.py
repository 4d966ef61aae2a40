"""A shared job store's epoch, and the job ids it issues.

Redis keeps one random secret beside the queue (`{prefix}:epoch`), written once when the
queue is made. A Redis that comes back without its data (a restart without persistence, a
failover to an empty replica, a FLUSHALL) comes back without it: a process that finds the
secret gone or changed knows every job of the old epoch is lost, and remembers the old secret.

A job id names the epoch that issued it and when: the secret's tag, the time in milliseconds,
random bits, and a MAC of them under the secret. So a process that remembers an epoch can tell
an id it issued from any other string: an id of a lost epoch, or an id of this epoch whose
record is gone before its time to live could have run out (a finished job is kept
`result_ttl_s` after it finished, hence at least that long after it was made), is a lost job;
anything else unknown is unknown. Nothing here touches Redis.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

TAG_CHARS = 8
TIME_CHARS = 11
RANDOM_BYTES = 8
MAC_CHARS = 8
ID_CHARS = TAG_CHARS + TIME_CHARS + 2 * RANDOM_BYTES + MAC_CHARS
_HEX = frozenset("0123456789abcdef")


def new_secret() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Epoch:
    secret: str

    @property
    def tag(self) -> str:
        return hashlib.sha256(self.secret.encode()).hexdigest()[:TAG_CHARS]

    def issue(self, now_s: float) -> str:
        """A new job id of this epoch, made at `now_s` (seconds since the epoch of Unix)."""
        made = f"{self.tag}{int(now_s * 1000):0{TIME_CHARS}x}{secrets.token_hex(RANDOM_BYTES)}"
        return made + self._mac(made)

    def issued_at(self, job_id: str) -> float | None:
        """When this epoch issued `job_id` (seconds); None if it did not issue it."""
        if len(job_id) != ID_CHARS or not _HEX.issuperset(job_id):
            return None
        if not job_id.startswith(self.tag):
            return None
        made, mac = job_id[:-MAC_CHARS], job_id[-MAC_CHARS:]
        if not hmac.compare_digest(mac, self._mac(made)):
            return None
        return int(made[TAG_CHARS : TAG_CHARS + TIME_CHARS], 16) / 1000

    def _mac(self, made: str) -> str:
        digest = hmac.new(self.secret.encode(), made.encode(), hashlib.sha256).hexdigest()
        return digest[:MAC_CHARS]
