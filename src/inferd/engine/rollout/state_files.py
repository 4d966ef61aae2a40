"""Rollout state on disk: `<repository>/.inferd/rollouts/<model>.json`, one file a model,
validated on read with pydantic (strict types, the config's own rule for `steps`), written
whole to a temporary file and renamed. A file that cannot be read or does not validate is
never raised: `read_all` returns it as `Unreadable` (its path relative to the repository and
the reason), logged, and the other files are read on.

Imports only config, the repository's naming rule and the standard library.
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inferd.config.model import RolloutConfig
from inferd.repository.scan import valid_name

log = logging.getLogger(__name__)

STATE_FOLDER = Path(".inferd") / "rollouts"
MAX_STATE_BYTES = 1 << 20
"""A state file holds at most `DECISIONS_KEPT` decisions (a few tens of KiB); anything over
this is not one, and is not read."""
DECISIONS_KEPT = 50


class Status(enum.StrEnum):
    RUNNING = "running"
    HOLDING = "holding"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"
    ABORTED = "aborted"
    FAILED = "failed"
    """Only in memory: the state file could not be read (never written)."""


ACTIVE = (Status.RUNNING, Status.HOLDING)
WITHDRAWING = (Status.ROLLED_BACK, Status.ABORTED)


class Decision(BaseModel):
    """One entry of a rollout's log: what was decided, when, why, on what evidence."""

    model_config = ConfigDict(extra="forbid", strict=True)

    at: float
    decision: str = Field(max_length=32)
    weight: float = Field(ge=0, le=1)
    reason: str = Field(max_length=4096)
    candidate: dict[str, float] = {}
    stable: dict[str, float] = {}
    baseline: dict[str, float] = {}
    agreement: dict[str, float] = {}


class RolloutRecord(BaseModel):
    """A model's latest rollout, and the versions rolled back in this or earlier ones (out of
    traffic until a new rollout names them)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    stable: int = Field(ge=1)
    candidate: int = Field(ge=1)
    steps: tuple[float, ...]
    step: int = Field(0, ge=0)
    status: Status = Status.RUNNING
    reason: str = Field("", max_length=4096)
    weight: float = Field(0.0, ge=0, le=1)
    """The candidate's share of requests naming no version (0 to 1), derived from the step."""
    window_started: float = 0.0
    decisions: list[Decision] = Field(default_factory=list, max_length=DECISIONS_KEPT)
    withdrawn: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> RolloutRecord:
        if not valid_name(self.model):
            raise ValueError(f"'{self.model}' is not a model name")
        try:  # the config's rule: rising, above 0, ending at 100
            RolloutConfig(steps=self.steps)
        except ValidationError as exc:
            raise ValueError(_validation_reason(exc)) from None
        if self.step >= len(self.steps):
            raise ValueError(f"step {self.step} of {len(self.steps)} steps")
        if self.stable == self.candidate:
            raise ValueError("the stable and the candidate version are the same")
        if self.status is Status.FAILED:
            raise ValueError("status 'failed' is never saved")
        return self

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


@dataclass(frozen=True)
class Unreadable:
    """A state file that could not be taken up: where (relative to the repository), why."""

    path: str
    reason: str


class StateStore:
    def __init__(self, root: Path | None) -> None:
        self._root = root
        self._folder = root / STATE_FOLDER if root is not None else None

    def read_all(self) -> dict[str, RolloutRecord | Unreadable]:
        """Every state file of the folder, by model (the file's name). Never raises."""
        if self._folder is None:
            return {}
        try:
            paths = sorted(self._folder.glob("*.json"))
        except OSError as exc:
            log.error("rollout states not read", extra={"reason": str(exc)})
            return {}
        found: dict[str, RolloutRecord | Unreadable] = {}
        for path in paths:
            model = path.name.removesuffix(".json")
            if valid_name(model):
                found[model] = self.read(model)
        return found

    def read(self, model: str) -> RolloutRecord | Unreadable:
        """The model's record, or why its file cannot be one (logged)."""
        if self._folder is None or self._root is None:
            raise ValueError("no repository folder")
        path = self._folder / f"{model}.json"
        shown = path.relative_to(self._root).as_posix()
        reason = self._problem(path, model)
        if isinstance(reason, RolloutRecord):
            return reason
        log.error("rollout state unreadable", extra={"path": shown, "reason": reason})
        return Unreadable(shown, reason)

    @staticmethod
    def _problem(path: Path, model: str) -> RolloutRecord | str:
        try:
            if not path.is_file():
                return "not a file"
            size = path.stat().st_size
            if size > MAX_STATE_BYTES:
                return f"{size} bytes, more than a state file holds ({MAX_STATE_BYTES})"
            data = path.read_bytes()
        except OSError as exc:
            return f"cannot be read: {exc.strerror or exc}"
        try:
            record = RolloutRecord.model_validate_json(data)
        except ValidationError as exc:
            return _validation_reason(exc)
        if record.model != model:
            return f"it names model '{record.model[:128]}', not '{model}'"
        return record

    def save(self, record: RolloutRecord) -> None:
        """Writes the record whole (a temporary file renamed); logs, never raises."""
        if self._folder is None:
            return
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            path = self._folder / f"{record.model}.json"
            temporary = path.with_suffix(".json.tmp")
            temporary.write_text(record.model_dump_json(indent=2))
            os.replace(temporary, path)
        except OSError as exc:
            log.error("rollout state not saved", extra={"model": record.model, "reason": str(exc)})


def _validation_reason(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0] if errors else {"loc": (), "msg": str(exc)}
    where = ".".join(str(part) for part in first["loc"]) or "the file"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"[:500]
