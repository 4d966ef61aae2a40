"""The model repository on disk: scan, validate, versions, version policy. Imports `config`."""

from inferd.repository.scan import (
    MODEL_FILE,
    ModelEntry,
    VersionEntry,
    scan_model,
    scan_repository,
    valid_name,
)

__all__ = [
    "MODEL_FILE",
    "ModelEntry",
    "VersionEntry",
    "scan_model",
    "scan_repository",
    "valid_name",
]
