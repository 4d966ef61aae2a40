"""One line about the machine a benchmark ran on (CPU model, cores, memory, versions), read
without importing the runtime."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


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
        f"Python {platform.python_version()}; onnxruntime {_version('onnxruntime')}; "
        f"numpy {_version('numpy')}"
    )
