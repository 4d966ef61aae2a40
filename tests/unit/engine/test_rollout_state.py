"""The rollout state reader never raises: wrong types, truncated files, `[]`, huge files and
random mutations of a good file come back as Unreadable with the path relative to the
repository and the reason. The serving policy on records: a withdrawn version never serves
nor stands in, a promotion outlives a pinned policy, a running rollout serves both versions."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from inferd.engine.rollout.policy import ServingPolicy
from inferd.engine.rollout.state_files import MAX_STATE_BYTES, RolloutRecord, StateStore, Unreadable
from inferd.repository.scan import scan_model
from tests.unit.engine.repo import add_model

GOOD = {
    "model": "m",
    "stable": 1,
    "candidate": 2,
    "steps": [1, 5, 100],
    "step": 1,
    "status": "running",
    "reason": "",
    "weight": 0.05,
    "window_started": 1.0,
    "decisions": [
        {
            "at": 1.0,
            "decision": "start",
            "weight": 0.01,
            "reason": "version 2 beside 1",
            "candidate": {"requests": 0, "error_rate": 0.0},
            "stable": {},
            "agreement": {"compared": 0, "mean": 1.0},
        }
    ],
    "withdrawn": [3],
}


def write(root: Path, content: bytes, model: str = "m") -> None:
    folder = root / ".inferd" / "rollouts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{model}.json").write_bytes(content)


def test_a_good_file_and_the_files_of_earlier_releases_read(tmp_path: Path) -> None:
    write(tmp_path, orjson.dumps(GOOD))
    older = {k: v for k, v in GOOD.items() if k != "withdrawn"}  # written before withdrawals
    write(tmp_path, orjson.dumps({**older, "model": "n"}), "n")
    found = StateStore(tmp_path).read_all()
    assert isinstance(found["m"], RolloutRecord) and found["m"].withdrawn == (3,)
    assert isinstance(found["n"], RolloutRecord) and found["n"].withdrawn == ()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"[]", "the file: Input should be an object"),
        (orjson.dumps({**GOOD, "stable": "1"}), "stable: Input should be a valid integer"),
        (orjson.dumps({**GOOD, "steps": [5, 1]}), "steps must rise"),
        (orjson.dumps({**GOOD, "step": 7}), "step 7 of 3 steps"),
        (orjson.dumps({**GOOD, "status": "failed"}), "never saved"),
        (orjson.dumps({**GOOD, "model": "other"}), "names model 'other'"),
        (orjson.dumps({**GOOD, "decisions": {}}), "decisions: Input should be a valid array"),
        (orjson.dumps(GOOD)[:40], "Invalid JSON"),
        (b"\xff\xfe\x00", "Invalid JSON"),
        (b"", "Invalid JSON"),
        (b" " * (MAX_STATE_BYTES + 1), "more than a state file holds"),
    ],
)
def test_a_bad_file_is_unreadable_with_its_path_and_reason(
    tmp_path: Path, content: bytes, says: str
) -> None:
    write(tmp_path, content)
    found = StateStore(tmp_path).read("m")
    assert isinstance(found, Unreadable)
    assert found.path == ".inferd/rollouts/m.json"
    assert says in found.reason, found.reason


def test_random_mutations_never_raise(tmp_path: Path) -> None:
    draw = random.Random(39)
    good = orjson.dumps(GOOD)
    store = StateStore(tmp_path)
    outcomes = set()
    for _ in range(2000):
        data = bytearray(good)
        for _ in range(draw.randint(1, 8)):
            kind = draw.random()
            place = draw.randrange(len(data) or 1)
            if kind < 0.4 and data:
                data[place] = draw.randrange(256)
            elif kind < 0.7:
                del data[place : place + draw.randint(1, 20)]
            else:
                data[place:place] = bytes(draw.randrange(256) for _ in range(draw.randint(1, 5)))
        write(tmp_path, bytes(data))
        outcomes.add(type(store.read("m")).__name__)
    assert outcomes == {"Unreadable", "RolloutRecord"} or outcomes == {"Unreadable"}


def test_wrong_types_in_every_field_are_unreadable(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    for key in GOOD:
        for wrong in (None, "x", -1, 1.5, [], {}, [[1]], True):
            if key in ("reason",) and isinstance(wrong, str):
                continue  # a string reason is right
            write(tmp_path, orjson.dumps({**GOOD, key: wrong}))
            found = store.read("m")
            assert isinstance(found, Unreadable | RolloutRecord)
            if isinstance(found, Unreadable):
                assert found.reason


def policy_for(tmp_path: Path, record: dict[str, object], config: dict[str, object]) -> Path:
    add_model(tmp_path, "m", config)
    for version in (2, 3):
        (tmp_path / "m" / str(version)).mkdir()
        (tmp_path / "m" / str(version) / "model.onnx").write_bytes(b"placeholder")
    write(tmp_path, orjson.dumps({**GOOD, **record}))
    return tmp_path / "m"


def served(folder: Path) -> tuple[list[int], list[int]]:
    policy = ServingPolicy.for_repository(folder.parent)
    entry = policy.select(scan_model(folder))
    return [v.version for v in entry.versions], [v.version for v in entry.available]


def test_a_withdrawn_version_neither_serves_nor_stands_in(tmp_path: Path) -> None:
    folder = policy_for(
        tmp_path, {"status": "rolled_back", "candidate": 3, "stable": 2, "withdrawn": [3]}, {}
    )
    assert served(folder) == ([2], [1, 2])


def test_a_promotion_outlives_a_pinned_policy(tmp_path: Path) -> None:
    folder = policy_for(
        tmp_path,
        {"status": "promoted", "stable": 1, "candidate": 2, "withdrawn": []},
        {"version_policy": {"specific": [1]}},
    )
    assert served(folder)[0] == [2]


def test_a_running_rollout_serves_its_two_versions(tmp_path: Path) -> None:
    folder = policy_for(tmp_path, {"status": "holding", "withdrawn": []}, {})
    assert served(folder)[0] == [1, 2]


def test_an_unreadable_record_leaves_the_version_policy_to_decide(tmp_path: Path) -> None:
    folder = policy_for(tmp_path, {}, {})
    write(tmp_path, b"[]")
    policy = ServingPolicy.for_repository(tmp_path)
    assert [v.version for v in policy.select(scan_model(folder)).versions] == [3]
    unreadable = policy.unreadable("m")
    assert unreadable is not None and unreadable.path == ".inferd/rollouts/m.json"
