"""One line about the machine a benchmark ran on (CPU model, cores, memory, versions), read
without importing the runtime."""

from __future__ import annotations

import importlib.util
import os
import platform
from importlib.metadata import Distribution, PackageNotFoundError, version
from pathlib import Path


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


def _runtime() -> str:
    """The ONNX Runtime build Python imports (onnxruntime or onnxruntime-gpu, whichever comes
    first on the path, as installed side by side), by its metadata beside the package."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or spec.origin is None:
        return "onnxruntime absent"
    folder = Path(spec.origin).parent.parent
    for info in sorted(folder.glob("onnxruntime*.dist-info")):
        dist = Distribution.at(info)
        if "onnxruntime" in (dist.read_text("top_level.txt") or "onnxruntime").split():
            return f"{dist.metadata['Name']} {dist.version}"
    return f"onnxruntime {_version('onnxruntime')}"


def describe() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        mem = f"{memory:.0f} GiB"
    except (ValueError, OSError):
        mem = "? GiB"
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}; {_runtime()}; "
        f"numpy {_version('numpy')}"
    )
