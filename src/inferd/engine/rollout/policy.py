"""The serving policy: the one place that decides which versions of a model serve, from its
version policy (config.yaml) and its rollout record (inferd.engine.rollout.state_files). Start-up
loading, the admin's load, `inferd repo check`, the repository watcher and the rollout
controller all ask it, so they cannot disagree:

- a running rollout serves its stable version and its candidate, nothing else;
- a promoted candidate serves in its stable version's place, a pinned version policy
  notwithstanding;
- a version rolled back or aborted (in the latest rollout or an earlier one) is withdrawn:
  it never serves, and is never a fallback, until a new rollout names it;
- with no record, or one that could not be read, the version policy alone decides (the
  unreadable record is reported as the model's failed rollout).

It holds the records in memory (read once, at construction) and writes each change through.
Imports config, repository and the store only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from inferd.engine.rollout.state_files import (
    WITHDRAWING,
    RolloutRecord,
    StateStore,
    Status,
    Unreadable,
)
from inferd.repository.scan import ModelEntry


class ServingPolicy:
    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._records: dict[str, RolloutRecord] = {}
        self._unreadable: dict[str, Unreadable] = {}
        for model, found in store.read_all().items():
            if isinstance(found, Unreadable):
                self._unreadable[model] = found
            else:
                self._records[model] = found

    @classmethod
    def for_repository(cls, root: Path | None) -> ServingPolicy:
        return cls(StateStore(root))

    # -- what serves -------------------------------------------------------------------------

    def select(self, entry: ModelEntry) -> ModelEntry:
        """The entry with `versions` (what loads) and `available` (what may stand in when
        they fail) as this policy decides; an entry that cannot load is returned as it is."""
        record = self._records.get(entry.name)
        if record is None or entry.config is None or not entry.available:
            return entry
        withdrawn = set(record.withdrawn)
        by_number = {v.version: v for v in entry.available}
        allowed = [n for n in sorted(by_number) if n not in withdrawn]
        if record.active:
            chosen = [n for n in (record.stable, record.candidate) if n in by_number]
        else:
            chosen = entry.config.version_policy.select(allowed)
            if record.status is Status.PROMOTED and record.stable in chosen:
                chosen = [n for n in chosen if n != record.stable]
                if record.candidate in by_number and record.candidate not in withdrawn:
                    chosen.append(record.candidate)
            if not chosen and record.stable in by_number and record.stable not in withdrawn:
                chosen = [record.stable]  # a pinned version was withdrawn: what it replaced
        if not chosen:
            return entry  # nothing left to serve: the version policy's own choice reports why
        return replace(
            entry,
            versions=tuple(by_number[n] for n in sorted(set(chosen))),
            available=tuple(by_number[n] for n in allowed),
        )

    def withdrawn(self, model: str) -> tuple[int, ...]:
        record = self._records.get(model)
        return record.withdrawn if record is not None else ()

    # -- the records ---------------------------------------------------------------------------

    def record(self, model: str) -> RolloutRecord | None:
        return self._records.get(model)

    def in_rollout(self, model: str) -> bool:
        """Whether `model` has a rollout under way."""
        record = self._records.get(model)
        return record is not None and record.active

    def records(self) -> list[RolloutRecord]:
        return list(self._records.values())

    def unreadable(self, model: str) -> Unreadable | None:
        return self._unreadable.get(model)

    def unreadable_all(self) -> dict[str, Unreadable]:
        return dict(self._unreadable)

    def begin(
        self, model: str, stable: int, candidate: int, steps: tuple[float, ...], at: float
    ) -> RolloutRecord:
        """A new rollout's record (not yet saved): it names `candidate`, so that version is
        no longer withdrawn; the earlier withdrawals stand."""
        previous = self._records.get(model)
        withdrawn = tuple(
            n for n in (previous.withdrawn if previous is not None else ()) if n != candidate
        )
        record = RolloutRecord(
            model=model,
            stable=stable,
            candidate=candidate,
            steps=steps,
            window_started=at,
            withdrawn=withdrawn,
        )
        self._records[model] = record
        self._unreadable.pop(model, None)
        return record

    def end(self, record: RolloutRecord, status: Status) -> None:
        """The rollout ends with `status`; a rolled-back or aborted candidate is withdrawn
        (not saved here: the decision that follows saves)."""
        record.status = status
        record.weight = 0.0
        if status in WITHDRAWING and record.candidate not in record.withdrawn:
            record.withdrawn = tuple(sorted((*record.withdrawn, record.candidate)))

    def save(self, record: RolloutRecord) -> None:
        self._store.save(record)
