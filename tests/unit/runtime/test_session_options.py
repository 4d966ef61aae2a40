"""What a model's runtime settings become in the ONNX Runtime session options."""

from __future__ import annotations

import os
import subprocess
import sys

from inferd.config.model import RuntimeOptions
from inferd.runtime.onnx_session import _session_options
from inferd.runtime.placement import confined_threads


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


CONFINED = """
import os, numpy as np, onnxruntime as ort
from onnx import TensorProto, helper
from inferd.config.model import RuntimeOptions
from inferd.runtime.onnx_session import _session_options
from inferd.runtime.placement import confined_threads
allowed = os.sched_getaffinity(0)
options = _session_options(RuntimeOptions())  # intra_op_threads 0: ONNX Runtime's choice
assert options.intra_op_num_threads == confined_threads() == len(allowed) == 1
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
graph = helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "g", [x], [y])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
session = ort.InferenceSession(model.SerializeToString(), options)
session.run(None, {"x": np.ones((64, 64), np.float32)})
cpus = {t: os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
assert all(c <= allowed for c in cpus.values()), cpus
"""


def test_under_a_narrower_affinity_no_runtime_thread_runs_outside_it() -> None:
    # left at 0, ONNX Runtime counts the machine's cores and pins a thread to one the process
    # was not given: a process started as `taskset -c <one cpu>` starts a server
    machine = os.sched_getaffinity(0)
    if len(machine) < 2:  # one CPU: nothing narrower to run on, and nothing to set
        assert confined_threads() is None
        return
    one = {min(machine)}
    done = subprocess.run(
        [sys.executable, "-c", CONFINED],
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, one),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert confined_threads() is None  # this process may use the whole machine
