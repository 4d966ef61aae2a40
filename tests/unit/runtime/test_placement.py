"""Instance groups to placements: names, kinds, providers, devices and threads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inferd.config.model import ModelConfig
from inferd.runtime.placement import one_instance, placements


def test_instance_count_places_instances_on_the_runtime_providers() -> None:
    config = ModelConfig(instance_count=3, runtime={"intra_op_threads": 2})
    placed = placements(config)
    assert [p.name for p in placed] == ["instance-0", "instance-1", "instance-2"]
    assert {p.kind for p in placed} == {"auto"}
    assert all(p.options == config.runtime for p in placed)
    assert len(placements(one_instance(config))) == 1


def test_groups_place_instances_on_cpu_and_on_each_listed_gpu() -> None:
    config = ModelConfig(
        runtime={"intra_op_threads": 1, "providers": ["TensorrtExecutionProvider"]},
        instance_groups=[
            {"count": 2, "kind": "gpu", "gpus": [0, 1]},
            {"count": 1, "kind": "cpu", "threads": 4},
            {"count": 1, "kind": "gpu"},
        ],
    )
    placed = placements(config)
    assert [(p.name, p.kind) for p in placed] == [
        ("gpu0-0", "gpu"),
        ("gpu0-1", "gpu"),
        ("gpu1-0", "gpu"),
        ("gpu1-1", "gpu"),
        ("cpu-0", "cpu"),
        ("gpu0-2", "gpu"),  # a second group on GPU 0 continues its numbering
    ]
    gpu1 = placed[2].options
    assert gpu1.device_id == 1
    assert gpu1.providers == ("TensorrtExecutionProvider", "CPUExecutionProvider")
    assert gpu1.intra_op_threads == 1
    cpu = placed[4].options
    assert cpu.providers == ("CPUExecutionProvider",) and cpu.device_id is None
    assert cpu.intra_op_threads == 4
    # a runtime without GPU providers configured gets CUDA for its gpu groups
    plain = ModelConfig(instance_groups=[{"kind": "gpu", "gpus": [3]}])
    (only,) = placements(plain)
    assert only.options.providers == ("CUDAExecutionProvider", "CPUExecutionProvider")
    assert only.options.device_id == 3
    first = placements(one_instance(config))
    assert [p.name for p in first] == ["gpu0-0"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"instance_count": 2, "instance_groups": [{"count": 1}]}, "not both"),
        ({"instance_groups": [{"kind": "cpu", "gpus": [0]}]}, "kind gpu only"),
        ({"instance_groups": [{"kind": "gpu", "gpus": [1, 1]}]}, "distinct"),
        ({"instance_groups": [{"kind": "tpu"}]}, "kind"),
        ({"instance_groups": [{"count": 0}]}, "count"),
    ],
)
def test_bad_groups_are_refused_with_the_reason(config: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelConfig(**config)
