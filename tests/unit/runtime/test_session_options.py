"""What a model's runtime settings become in the ONNX Runtime session options."""

from __future__ import annotations

from inferd.config.model import RuntimeOptions
from inferd.runtime.onnx_session import _session_options


def test_spinning_settings_reach_the_session_options() -> None:
    quiet = _session_options(RuntimeOptions())
    assert quiet.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert quiet.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    assert quiet.get_session_config_entry("session.force_spinning_stop") == "0"

    spins = _session_options(RuntimeOptions(allow_spinning=True, intra_op_threads=2))
    assert spins.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert spins.intra_op_num_threads == 2
    assert spins.get_session_config_entry("session.force_spinning_stop") == "0"

    in_runs = _session_options(RuntimeOptions(allow_spinning=True, stop_spinning_after_run=True))
    assert in_runs.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert in_runs.get_session_config_entry("session.force_spinning_stop") == "1"
