"""The mistakes a preparation command reports in one line (exit 2) instead of a traceback."""

from __future__ import annotations

from inferd.errors import ConfigError
from inferd.prep.source_record import SourceError
from inferd.prep.spec import SpecError
from inferd.prep.torch_export import ExportError
from inferd.prep.writer import TargetError

PREP_ERRORS = (SourceError, SpecError, ExportError, TargetError, ConfigError)
