"""The residency metrics of a version on two GPUs and of one on the CPU only."""

from __future__ import annotations

from inferd.engine.resident.residency_record import ResidencyFacts
from inferd.observability.engine_metrics import _residency_metrics

MB = 2**20


def test_device_footprints_are_shown_per_gpu_and_not_for_the_cpu() -> None:
    devices = {0: 200 * MB, 1: 150 * MB}
    on_gpus = ResidencyFacts("g", "1", True, True, 30 * MB, devices, 1, 0, 1, 0.2)
    on_cpu = ResidencyFacts("c", "1", False, True, 10 * MB, {}, 0, 0, 0, 0.0)
    families = {f.name: f for f in _residency_metrics([on_gpus, on_cpu])}
    samples = families["inferd_model_resident_device_bytes"].samples
    assert {(s.labels["model"], s.labels["gpu"]): s.value for s in samples} == {
        ("g", "0"): 200 * MB,
        ("g", "1"): 150 * MB,
    }
    assert samples[0].labels["residency"] == "on_demand"
